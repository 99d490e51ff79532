"""The fuzz input format of the datagram targets: a short sequence of datagrams with who sent them and when.

One input is ``frame*``; a frame is ``ctl:u8 len:u16be payload[len]``. ``ctl`` picks the exporter
(bits 0-1, :data:`EXPORTERS`), whether the batched paths flush after this datagram (bit 2), and how far
the receive clock moves before it (bits 3-5, :data:`TIME_STEPS_MS`: repeats, small steps, past the
pending-set hold, past the template expiry, backwards). Parsing is total: a length past the end takes
what is left, so every byte string is an input (libFuzzer's own mutations stay meaningful).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

EXPORTERS = ("192.0.2.1", "192.0.2.2", "2001:db8::3", "198.51.100.4")
#: receive-clock steps (ms): same ms, small steps, > pending_hold_s (30 s), > template expiry (1800 s), backwards
TIME_STEPS_MS = (0, 1, 250, 5_000, 31_000, 1_900_000, -7_000, 86_400_000)
T0_MS = 1_700_000_000_000
MAX_FRAMES = 16
FLUSH = 0x04

_LEN = struct.Struct(">H")


class Datagram(NamedTuple):
    payload: bytes
    exporter: str
    received_ms: int
    flush: bool


def parse(data: bytes) -> list[tuple[int, bytes]]:
    """``[(ctl, payload)]`` of an input (at most :data:`MAX_FRAMES`)."""
    out = []
    p, n = 0, len(data)
    while p < n and len(out) < MAX_FRAMES:
        ctl = data[p]
        if p + 3 > n:
            out.append((ctl, data[p + 1 :]))
            break
        ln = _LEN.unpack_from(data, p + 1)[0]
        out.append((ctl, data[p + 3 : p + 3 + ln]))
        p += 3 + ln
    return out


def build(frames: list[tuple[int, bytes]]) -> bytes:
    """The input holding ``frames`` (payloads cut to 65535 bytes)."""
    return b"".join(bytes((ctl & 0xFF,)) + _LEN.pack(min(len(pl), 0xFFFF)) + pl[:0xFFFF] for ctl, pl in frames)


def datagrams(data: bytes) -> list[Datagram]:
    """The datagrams of an input with their exporter, receive time and flush flag."""
    t = T0_MS
    out = []
    for ctl, payload in parse(data):
        t += TIME_STEPS_MS[(ctl >> 3) & 7]
        out.append(Datagram(payload, EXPORTERS[ctl & 3], t, bool(ctl & FLUSH)))
    return out


def ctl(exporter: int = 0, flush: bool = False, step: int = 1) -> int:
    """A ``ctl`` byte: exporter index, flush flag, index into :data:`TIME_STEPS_MS`."""
    return (exporter & 3) | (FLUSH if flush else 0) | ((step & 7) << 3)
