"""IPFIX (RFC 7011 / 7012) decoder: message header, template / options template / data sets.

Handles template withdrawal (field count 0; template id 2 in a Template Set
withdraws all data templates of the domain, id 3 in an Options Template Set all
options templates), enterprise-specific fields (PEN bit; unknown ones skipped by
length), variable-length fields (1-byte length, 255 -> 2 more length bytes), set
padding, reduced-size encoding, absolute (s/ms/us/ns) and relative timestamps
(flowStart/EndSysUpTime + systemInitTimeMilliseconds from options), and
sampling from options records (34/35, 305/306, 309/310, 50, by selector /
sampler id or per domain). Data sets seen before their template are held in
the :class:`TemplateCache`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct

from schemas.columns import PROTO_IPFIX

from ._nf_common import Ctx, Dialect, decode_message
from .errors import DecodeError
from .result import DecodeResult
from .templates import TemplateCache

PROTOCOL = "ipfix"
_HDR = struct.Struct("!HHIII")
_SET = struct.Struct("!HH")
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
HEADER_LEN = 16


def _field_specs(body, p: int, count: int, base: int) -> tuple[list, int]:
    """``count`` field specifiers from ``p``: ``([(ie, pen, length)], new p)``."""
    L = len(body)
    fields = []
    for _ in range(count):
        if p + 4 > L:
            raise DecodeError(PROTOCOL, "bad_template", base + p, "field specifier past the set end")
        ie, ln = _SET.unpack_from(body, p)
        p += 4
        pen = 0
        if ie & 0x8000:
            if p + 4 > L:
                raise DecodeError(PROTOCOL, "bad_template", base + p, "enterprise number past the set end")
            pen = _U32.unpack_from(body, p)[0]
            ie &= 0x7FFF
            p += 4
        fields.append((ie, pen, ln))
    return fields, p


def _template_set(body, base: int, ctx: Ctx, options: bool, new_keys: list) -> tuple[int, int]:
    """Template (2) or Options Template (3) Set; returns ``(learned, withdrawn)``."""
    cache, problems = ctx.cache, ctx.problems
    kind = "options" if options else "data"
    all_id = 3 if options else 2
    learned = withdrawn = 0
    p, L = 0, len(body)
    while L - p >= 4:
        tid, fc = _SET.unpack_from(body, p)
        if fc == 0:
            if tid == all_id:
                withdrawn += cache.withdraw_all(ctx.exporter, 10, ctx.domain, kind)
            elif tid >= 256:
                withdrawn += cache.withdraw((ctx.exporter, 10, ctx.domain, tid))
            elif tid != 0:
                problems["bad_template"] += 1
                break
            else:
                break  # padding
            p += 4
            continue
        if tid < 256:
            problems["bad_template"] += 1
            break
        scope = 0
        if options:
            if p + 6 > L:
                raise DecodeError(PROTOCOL, "bad_template", base + p, "options template header past the set end")
            scope = _U16.unpack_from(body, p + 4)[0]
            p += 6
            if scope == 0 or scope > fc:
                problems["bad_template"] += 1
                break
        else:
            p += 4
        fields, p = _field_specs(body, p, fc, base)
        if sum(1 if ln == 0xFFFF else ln for _, _, ln in fields) == 0:
            problems["bad_template"] += 1
            continue
        key = (ctx.exporter, 10, ctx.domain, tid)
        res = cache.learn(key, kind, fields, scope, ctx.recv_ms)
        if res == "rejected":
            problems["template_limit"] += 1
            continue
        new_keys.append(key)
        if res != "refreshed":
            learned += 1
    return learned, withdrawn


DIALECT = Dialect(PROTOCOL, PROTO_IPFIX, 10, (2, 3), _template_set, "set", "the message end",
                  count_records=True, trailing=True)


def decode_ipfix(
    datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache, defer: list | None = None
) -> DecodeResult:
    """Decode one IPFIX message (``defer``: as in :func:`ingest.decode.netflow9.decode_v9`)."""
    n = len(datagram)
    if n < HEADER_LEN:
        raise DecodeError(PROTOCOL, "truncated", 0, "shorter than the IPFIX header")
    version, length, export_time, seq, domain = _HDR.unpack_from(datagram, 0)
    if version != 10:
        raise DecodeError(PROTOCOL, "bad_version", 0)
    if length < HEADER_LEN:
        raise DecodeError(PROTOCOL, "bad_length", 2, f"message length {length}")
    if length > n:
        raise DecodeError(PROTOCOL, "truncated", 2, f"message length {length} > datagram {n}")
    return decode_message(DIALECT, datagram, length, HEADER_LEN, exporter, received_at_ms, templates, defer,
                          domain, seq, export_time * 1000, None)
