"""NetFlow v9 (RFC 3954) decoder: header, template / options template / data FlowSets.

FlowSets are walked by their length, never by the header Count (softflowd's
Count covers data records only, and its options sets are unpadded). Data sets
whose template is unknown are held in the :class:`TemplateCache` and decoded
in the result of the datagram that brings the template. Sampling comes from
options data (SAMPLING_INTERVAL/ALGORITHM, FLOW_SAMPLER_ID/RANDOM_INTERVAL),
applied by sampler id when data records carry one, else per source id.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct

from schemas.columns import PROTO_NETFLOW9

from ._nf_common import Ctx, Dialect, decode_message
from .errors import DecodeError
from .result import DecodeResult
from .templates import VAR_LEN, TemplateCache

PROTOCOL = "netflow9"
_HDR = struct.Struct("!HHIIII")
_SET = struct.Struct("!HH")  # template id, field count
_OPT = struct.Struct("!HHH")
HEADER_LEN = 20


def _templates(body, base: int, ctx: Ctx, new_keys: list) -> int:
    """Template FlowSet (id 0); returns the number of new/changed templates."""
    cache, problems = ctx.cache, ctx.problems
    learned = 0
    p, L = 0, len(body)
    while L - p >= 4:
        tid, fc = _SET.unpack_from(body, p)
        if tid == 0 and fc == 0:
            break  # padding
        if tid < 256 or fc == 0:
            problems["bad_template"] += 1
            break
        end = p + 4 + 4 * fc
        if end > L:
            raise DecodeError(PROTOCOL, "bad_template", base + p, f"template {tid} runs past its FlowSet")
        fields = _fields(body, p + 4, end, problems)
        p = end
        if fields is not None:
            learned += _learn(ctx, tid, "data", fields, 0, new_keys)
    return learned


def _options_templates(body, base: int, ctx: Ctx, new_keys: list) -> int:
    """Options Template FlowSet (id 1)."""
    problems = ctx.problems
    learned = 0
    p, L = 0, len(body)
    while L - p >= 6:
        tid, slen, olen = _OPT.unpack_from(body, p)
        if tid == 0:
            break  # padding
        if tid < 256 or slen % 4 or olen % 4 or slen + olen == 0:
            problems["bad_template"] += 1
            break
        end = p + 6 + slen + olen
        if end > L:
            raise DecodeError(PROTOCOL, "bad_template", base + p, f"options template {tid} runs past its FlowSet")
        fields = _fields(body, p + 6, end, problems)
        p = end
        if fields is not None:
            learned += _learn(ctx, tid, "options", fields, slen // 4, new_keys)
    return learned


def _fields(body, start: int, end: int, problems) -> list | None:
    """The (IE, 0, length) field specifiers ``body[start:end]`` of a (options) template; None, counted as
    ``bad_template``, when one has a variable length (v9 has none) or they add up to no bytes."""
    fields = [(ie, 0, ln) for ie, ln in struct.iter_unpack("!HH", body[start:end])]
    if any(ln == VAR_LEN for _, _, ln in fields) or sum(ln for _, _, ln in fields) == 0:
        problems["bad_template"] += 1
        return None
    return fields


def _learn(ctx: Ctx, tid: int, kind: str, fields, scope_count: int, new_keys: list) -> int:
    key = (ctx.exporter, 9, ctx.domain, tid)
    res = ctx.cache.learn(key, kind, fields, scope_count, ctx.recv_ms)
    if res == "rejected":
        ctx.problems["template_limit"] += 1
        return 0
    new_keys.append(key)
    return 1 if res in ("new", "changed") else 0


def _template_set(body, base: int, ctx: Ctx, options: bool, new_keys: list) -> tuple[int, int]:
    """Template (0) or Options Template (1) FlowSet: ``(learned, 0)`` (v9 has no withdrawal)."""
    return (_options_templates if options else _templates)(body, base, ctx, new_keys), 0


DIALECT = Dialect(PROTOCOL, PROTO_NETFLOW9, 9, (0, 1), _template_set, "FlowSet", "the end",
                  count_records=False, trailing=False)


def decode_v9(
    datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache, defer: list | None = None
) -> DecodeResult:
    """Decode one NetFlow v9 export packet.

    With ``defer`` (a list), data sets are appended to it undecoded or
    per-record-decoded (see ``_nf_common._emit``) instead of landing in
    ``result.flows``; on :class:`DecodeError` the list must be discarded.
    """
    n = len(datagram)
    if n < HEADER_LEN:
        raise DecodeError(PROTOCOL, "truncated", 0, "shorter than the v9 header")
    version, _count, uptime, secs, seq, source_id = _HDR.unpack_from(datagram, 0)
    if version != 9:
        raise DecodeError(PROTOCOL, "bad_version", 0)
    return decode_message(DIALECT, datagram, n, HEADER_LEN, exporter, received_at_ms, templates, defer,
                          source_id, seq, secs * 1000, uptime)
