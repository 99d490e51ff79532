"""Builders for hand-made NetFlow v5/v9 and IPFIX datagrams (tests only)."""

from __future__ import annotations

import struct

EXPORT_S = 1_719_835_200


def pad4(b: bytes) -> bytes:
    return b + bytes((-len(b)) % 4)


# -- NetFlow v9 ------------------------------------------------------------
def v9(*flowsets: bytes, uptime=100_000, secs=EXPORT_S, seq=1, source_id=0, count=None) -> bytes:
    return struct.pack("!HHIIII", 9, len(flowsets) if count is None else count, uptime, secs, seq, source_id) + b"".join(flowsets)


def v9_template_set(*templates: tuple[int, list]) -> bytes:
    body = b"".join(struct.pack("!HH", tid, len(f)) + b"".join(struct.pack("!HH", ie, ln) for ie, ln in f) for tid, f in templates)
    return struct.pack("!HH", 0, 4 + len(body)) + body


def v9_options_template_set(tid: int, scope: list, fields: list, pad: bool = True) -> bytes:
    body = struct.pack("!HHH", tid, 4 * len(scope), 4 * len(fields))
    body += b"".join(struct.pack("!HH", t, ln) for t, ln in scope + fields)
    if pad:
        body = pad4(body + bytes(4)[:0])
    return struct.pack("!HH", 1, 4 + len(body)) + body


def data_set(set_id: int, records: bytes, pad: bool = True) -> bytes:
    body = pad4(records) if pad else records
    return struct.pack("!HH", set_id, 4 + len(body)) + body


# -- IPFIX -----------------------------------------------------------------
def ipfix(*sets: bytes, export_s=EXPORT_S, seq=0, domain=0) -> bytes:
    body = b"".join(sets)
    return struct.pack("!HHIII", 10, 16 + len(body), export_s, seq, domain) + body


def _spec(f) -> bytes:
    if len(f) == 3:
        ie, ln, pen = f
        return struct.pack("!HHI", ie | 0x8000, ln, pen)
    ie, ln = f
    return struct.pack("!HH", ie, ln)


def ipfix_template_set(*templates: tuple[int, list]) -> bytes:
    body = b"".join(struct.pack("!HH", tid, len(f)) + b"".join(_spec(x) for x in f) for tid, f in templates)
    return struct.pack("!HH", 2, 4 + len(body)) + body


def ipfix_withdraw(tid: int, options: bool = False) -> bytes:
    return struct.pack("!HHHH", 3 if options else 2, 8, tid, 0)


def ipfix_options_template_set(tid: int, scope: list, fields: list) -> bytes:
    body = struct.pack("!HHH", tid, len(scope) + len(fields), len(scope)) + b"".join(_spec(x) for x in scope + fields)
    return struct.pack("!HH", 3, 4 + len(body)) + body


def varlen(b: bytes, long: bool = False) -> bytes:
    if long or len(b) >= 255:
        return b"\xff" + struct.pack("!H", len(b)) + b
    return bytes([len(b)]) + b


# -- NetFlow v5 ------------------------------------------------------------
def v5_record(src=b"\x0a\x00\x00\x01", dst=b"\x0a\x00\x00\x02", pkts=10, octets=1000, first=90_000, last=99_000,
              sport=1234, dport=80, flags=0x1B, proto=6, tos=0, inif=1, outif=2) -> bytes:
    return struct.pack("!4s4s4sHHIIIIHHBBBBHHBBH", src, dst, bytes(4), inif, outif, pkts, octets, first, last,
                       sport, dport, 0, flags, proto, tos, 0, 0, 24, 24, 0)


def v5(records: list[bytes], uptime=100_000, secs=EXPORT_S, nsecs=500_000_000, seq=0, engine=(1, 2), sampling=0) -> bytes:
    return struct.pack("!HHIIIIBBH", 5, len(records), uptime, secs, nsecs, seq, engine[0], engine[1], sampling) + b"".join(records)
