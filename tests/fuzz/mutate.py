"""The custom mutator of every target: structure-aware edits on top of a byte mutator.

``mutate(kind, data, max_size, rng, mut)``: ``kind`` is ``datagrams`` (the framed input of
:mod:`tests.fuzz.framing`) or ``message`` (one Kafka message for the codec); ``mut(bytes, max_size)``
is the byte mutator (``atheris.Mutate`` under atheris, :func:`tests.fuzz.bytemut.mutate_bytes` in the
test suite). Most edits keep the protocol's version field and lengths right so inputs get past the
header checks; some are plain byte edits of the whole input so nothing is out of reach.
"""

from __future__ import annotations

import random
import struct
from typing import Callable

from . import framing, nf_tree, sflow_tree

Mutator = Callable[[bytes, int], bytes]


def _version(payload: bytes) -> bytes:
    """The bytes that make a payload one protocol's (sFlow 00000005, v5/v9/IPFIX 0005/0009/000a), or b""."""
    if payload[:4] == b"\x00\x00\x00\x05":
        return payload[:4]
    if payload[:2] in (b"\x00\x05", b"\x00\x09", b"\x00\x0a"):
        return payload[:2]
    return b""


def _keep_version(old: bytes, new: bytes) -> bytes:
    v = _version(old)
    if not v:
        return new
    new = v + new[len(v) :]
    if v == b"\x00\x0a" and len(new) >= 4:
        new = new[:2] + struct.pack(">H", min(len(new), 0xFFFF)) + new[4:]
    return new


def _mutate_payload(payload: bytes, donors: list[bytes], rng: random.Random, mut: Mutator, max_size: int) -> bytes:
    v = _version(payload)
    out = None
    if rng.random() < 0.75:
        if v == b"\x00\x00\x00\x05":
            out = sflow_tree.mutate(payload, rng, mut, donors)
        elif v in (b"\x00\x09", b"\x00\x0a"):
            out = nf_tree.mutate(payload, rng, mut, donors)
    if out is None:
        out = mut(payload, max(max_size, 1))
        if rng.random() < 0.85:
            out = _keep_version(payload, out)
    return out[:max_size]


def _frame_op(frames: list, rng: random.Random) -> None:
    op = rng.randrange(5)
    i = rng.randrange(len(frames))
    if op == 0 and len(frames) < framing.MAX_FRAMES:  # the same datagram again (duplicate, replay)
        frames.insert(rng.randrange(len(frames) + 1), frames[i])
    elif op == 1 and len(frames) > 1:
        frames.pop(i)
    elif op == 2 and len(frames) > 1:  # reorder: data before template, restarts
        j = rng.randrange(len(frames))
        frames[i], frames[j] = frames[j], frames[i]
    else:  # who sent it, when, and whether the batch is flushed after it
        ctl, payload = frames[i]
        frames[i] = (ctl ^ (1 << rng.randrange(8)) if op == 3 else rng.randrange(256), payload)


def mutate_datagrams(data: bytes, max_size: int, rng: random.Random, mut: Mutator) -> bytes:
    frames = framing.parse(data) or [(framing.ctl(), b"\x00\x00\x00\x05")]
    r = rng.random()
    if r < 0.8:
        i = rng.randrange(len(frames))
        ctl, payload = frames[i]
        donors = [p for j, (_c, p) in enumerate(frames) if j != i]
        budget = max(0, max_size - (len(data) - len(payload)) - 3)
        frames[i] = (ctl, _mutate_payload(payload, donors, rng, mut, budget))
    elif r < 0.93:
        _frame_op(frames, rng)
    else:
        return mut(data, max_size)
    out = framing.build(frames)
    return out if len(out) <= max_size else out[:max_size]


def mutate_message(data: bytes, max_size: int, rng: random.Random, mut: Mutator, headers: list[bytes]) -> bytes:
    """A Kafka message: mostly body edits under a known schema header, sometimes another schema's header."""
    r = rng.random()
    if r < 0.1 and headers:
        return (rng.choice(headers) + data[len(headers[0]) :])[:max_size]
    out = mut(data, max_size)
    if r < 0.9 and headers and data[: len(headers[0])] in headers:
        out = data[: len(headers[0])] + out[len(headers[0]) :]
    return out[:max_size]
