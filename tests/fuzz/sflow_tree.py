"""Structure-aware sFlow v5 mutations: edit one sample or record and keep every length and count right.

A datagram is parsed into its header, samples and records (:func:`parse`), one of them is changed,
and :func:`serialize` recomputes the sample and record lengths, the record and sample counts and the
4-byte padding, so the decoder walks past the change instead of stopping at the first bad length.
Datagrams that do not parse are left to the byte mutator.
"""

from __future__ import annotations

import random
import struct
from typing import Callable

from .bytemut import INTERESTING_32

_U32 = struct.Struct(">I")
_II = struct.Struct(">II")
# sample format -> bytes of its header before the record count
_SAMPLE_FIXED = {1: 28, 2: 8, 3: 40, 4: 12, 5: 28}  # 5: discarded packet (reason before the count)
_AGENT_LEN = {0: 0, 1: 4, 2: 16}
FLOW_RECORDS = (1, 3, 4, 1001, 1002, 1003, 1004, 2100)
COUNTER_RECORDS = (1, 2, 3, 4, 5, 7, 1005)
SAMPLE_FORMATS = (1, 2, 3, 4, 5, 0)

Mutator = Callable[[bytes, int], bytes]


class Datagram:
    __slots__ = ("version", "atype", "agent", "head", "samples")

    def __init__(self, version: int, atype: int, agent: bytes, head: bytes, samples: list):
        self.version, self.atype, self.agent, self.head, self.samples = version, atype, agent, head, samples


def parse(d: bytes) -> Datagram | None:
    """The datagram as ``Datagram``; samples are ``[fmt, fixed, records]`` (``records`` a list of
    ``[fmt, body]``) or ``[fmt, body, None]`` for formats without records; None when it does not parse."""
    try:
        version, atype = _II.unpack_from(d, 0)
        alen = _AGENT_LEN.get(atype)
        if alen is None:
            return None
        off = 8 + alen
        agent = d[8:off]
        head = d[off : off + 12]  # sub-agent, sequence, uptime
        (ns,) = _U32.unpack_from(d, off + 12)
        off += 16
        if ns > 64:
            return None
        samples = []
        for _ in range(ns):
            fmt, ln = _II.unpack_from(d, off)
            body = d[off + 8 : off + 8 + ln]
            if len(body) != ln:
                return None
            off += 8 + ((ln + 3) & ~3)
            fixed = _SAMPLE_FIXED.get(fmt)
            if fixed is None:
                samples.append([fmt, body, None])
                continue
            (nr,) = _U32.unpack_from(body, fixed)
            if nr > 64:
                return None
            recs, p = [], fixed + 4
            for _ in range(nr):
                rf, rl = _II.unpack_from(body, p)
                rb = body[p + 8 : p + 8 + rl]
                if len(rb) != rl:
                    return None
                recs.append([rf, rb])
                p += 8 + ((rl + 3) & ~3)
            samples.append([fmt, body[:fixed], recs])
        return Datagram(version, atype, agent, head, samples)
    except struct.error:
        return None


def _pad(b: bytes) -> bytes:
    return b + bytes(-len(b) % 4)


def serialize(dg: Datagram) -> bytes:
    out = [_II.pack(dg.version, dg.atype), dg.agent, dg.head, _U32.pack(len(dg.samples))]
    for fmt, fixed, recs in dg.samples:
        if recs is None:
            body = fixed
        else:
            body = fixed + _U32.pack(len(recs)) + b"".join(_II.pack(rf, len(rb)) + _pad(rb) for rf, rb in recs)
        out.append(_II.pack(fmt, len(body)) + _pad(body))
    return b"".join(out)


def _set_word(b: bytes, rng: random.Random) -> bytes:
    """One aligned word of ``b`` set to a boundary value."""
    if len(b) < 4:
        return b
    at = rng.randrange(len(b) // 4) * 4
    return b[:at] + _U32.pack(rng.choice(INTERESTING_32)) + b[at + 4 :]


def _raw_header(body: bytes, rng: random.Random, mut: Mutator) -> bytes:
    """A raw packet header record: mutate the frame and keep header_length equal to it (mostly)."""
    if len(body) < 16:
        return mut(body, 256)
    proto, flen, stripped, _hlen = struct.unpack_from(">IIII", body)
    frame = body[16:]
    r = rng.random()
    if r < 0.7:
        frame = mut(frame, 256)
    elif r < 0.8:
        proto = rng.choice((1, 1, 11, 12, 2, 0))
    elif r < 0.9:
        flen = rng.choice((0, len(frame), len(frame) + 4, 1500, 9000, 0xFFFFFFFF))
        stripped = rng.choice((0, 4, flen, 0xFFFFFFFF))
    hlen = len(frame) if rng.random() < 0.9 else rng.choice(INTERESTING_32)
    return struct.pack(">IIII", proto, flen, stripped, hlen) + frame


def _all_records(dg: Datagram) -> list:
    return [(s, i) for s in dg.samples if s[2] is not None for i in range(len(s[2]))]


def mutate(d: bytes, rng: random.Random, mut: Mutator, donors: list[bytes]) -> bytes | None:
    """One structure-keeping edit of sFlow datagram ``d`` (None: it does not parse).

    ``mut(bytes, max_size)`` mutates raw bytes; ``donors`` are other datagrams of the
    same input whose samples and records can be copied in."""
    dg = parse(d)
    if dg is None:
        return None
    recs = _all_records(dg)
    op = rng.randrange(10)
    if op <= 3 and recs:  # edit a record body
        s, i = rng.choice(recs)
        rf, rb = s[2][i]
        if rf == 1 and s[0] in (1, 3):
            rb = _raw_header(rb, rng, mut)
        elif rng.random() < 0.5:
            rb = _set_word(rb, rng)
        else:
            rb = mut(rb, 512)
        s[2][i] = [rf, rb]
    elif op == 4 and recs:  # change a record's format
        s, i = rng.choice(recs)
        choices = FLOW_RECORDS if s[0] in (1, 3) else COUNTER_RECORDS
        s[2][i][0] = rng.choice(choices) if rng.random() < 0.9 else rng.choice(INTERESTING_32)
    elif op == 5 and recs:  # delete, duplicate or move a record
        s, i = rng.choice(recs)
        rec = s[2].pop(i)
        if rng.random() < 0.6:
            t = rng.choice([x for x in dg.samples if x[2] is not None])
            t[2].insert(rng.randrange(len(t[2]) + 1), rec)
            if rng.random() < 0.5:
                s[2].insert(i, list(rec))
    elif op == 6 and dg.samples:  # edit a sample header (rate, pool, drops, interfaces, ...)
        s = rng.choice(dg.samples)
        s[1] = _set_word(s[1], rng) if rng.random() < 0.8 else mut(s[1], 64)
    elif op == 7 and dg.samples:  # change a sample's format (its header size follows)
        s = rng.choice(dg.samples)
        new = rng.choice(SAMPLE_FORMATS)
        if s[2] is not None and new in _SAMPLE_FIXED:
            fixed = _SAMPLE_FIXED[new]
            s[1] = (s[1] + bytes(fixed))[:fixed]
        s[0] = new
    elif op == 8:  # delete, duplicate, reorder samples or copy one from another datagram
        others = [p for p in (parse(x) for x in donors) if p is not None and p.samples]
        if others and rng.random() < 0.4:
            dg.samples.insert(rng.randrange(len(dg.samples) + 1), list(rng.choice(rng.choice(others).samples)))
        elif dg.samples:
            s = dg.samples.pop(rng.randrange(len(dg.samples)))
            if rng.random() < 0.6:
                dg.samples.insert(rng.randrange(len(dg.samples) + 1), s)
                if rng.random() < 0.5:
                    dg.samples.insert(rng.randrange(len(dg.samples) + 1), [s[0], s[1], None if s[2] is None else
                                                                           [list(r) for r in s[2]]])
    else:  # the datagram header: agent address type, sub-agent, sequence, uptime
        if rng.random() < 0.3:
            dg.atype = rng.choice((0, 1, 2, 3))
            alen = _AGENT_LEN.get(dg.atype, 4)
            dg.agent = (dg.agent + bytes(16))[:alen]
        else:
            dg.head = _set_word(dg.head, rng)
    return serialize(dg)
