"""Shared NetFlow v9 / IPFIX machinery: the one set walk, data sets -> flow rows, options -> sampling state.

:func:`decode_message` walks the sets of a message for both protocols; a
:class:`Dialect` holds what differs once the header is read (set ids, the
template set parser, error wording, sequence increment, trailing bytes).

Given a :class:`~ingest.decode.templates.Template` and a set body, produce
``FLOW_DTYPE`` rows (one numpy gather for fixed-length templates; a per-record
walk only to strip variable-length fields), then apply timestamps, ICMP,
dual-stack and sampling fix-ups column-wise. With ``Ctx.defer`` set (the
ingest pipeline, via ``decode_into``) a data set is only checked and its
arrival-time inputs resolved; its rows are made later, many sets at a time,
by :mod:`ingest.decode.batch`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from schemas.columns import FLOW_DTYPE, concat_rows

from . import _nf_plan as P
from .errors import DecodeError
from .result import EMPTY_FLOWS, DecodeResult, ExportHeader
from .templates import VAR_LEN, Pending, SamplingState, Template, TemplateCache

_U16 = struct.Struct("!H")
_SET = struct.Struct("!HH")
UPTIME_MOD = 0xFFFFFFFF  # sysUptime is a 32-bit ms counter: differences are taken modulo 2^32


class Ctx:
    """Per-datagram facts the record decoding needs."""

    __slots__ = (
        "protocol", "proto_code", "version", "exporter", "exporter16", "domain", "recv_ms",
        "export_ms", "uptime_ms", "cache", "problems", "state", "defer", "const_key", "const",
    )

    def __init__(self, protocol, proto_code, version, exporter, domain, recv_ms, export_ms, uptime_ms, cache: TemplateCache, problems: Counter):
        self.protocol = protocol
        self.proto_code = proto_code
        self.version = version
        self.exporter = exporter
        self.exporter16 = cache.exporter16(exporter)
        self.domain = domain
        self.recv_ms = recv_ms
        self.export_ms = export_ms
        self.uptime_ms = uptime_ms
        self.cache = cache
        self.problems = problems
        self.state: SamplingState | None = cache.sampling_state(exporter, version, domain)
        # None: decode data sets now. A list: collect them for a FlowBatch (see _emit).
        self.defer: list | None = None
        self.const_key: tuple | None = None  # (recv_ms, export_ms, rate) of ``const``, reused by the next set
        self.const = b""


def fixed_body(t: Template, body) -> tuple[bytes, int, bool]:
    """Strip variable-length fields record by record: ``(packed fixed-field bytes, n, ok)``.

    ``ok`` is False when a record ran past the end of the set (the records
    before it are still returned).
    """
    mv = memoryview(body)
    end = len(mv)
    pos = 0
    parts = []
    n = 0
    fields = t.fields
    min_len = t.min_len
    while end - pos >= min_len and min_len > 0:
        rec = []
        p = pos
        ok = True
        for _ie, _pen, ln in fields:
            if ln == VAR_LEN:
                if p >= end:
                    ok = False
                    break
                vl = mv[p]
                p += 1
                if vl == 255:
                    if p + 2 > end:
                        ok = False
                        break
                    vl = _U16.unpack_from(mv, p)[0]
                    p += 2
                p += vl
                if p > end:
                    ok = False
                    break
            else:
                if p + ln > end:
                    ok = False
                    break
                rec.append(mv[p : p + ln])
                p += ln
        if not ok:
            return b"".join(parts), n, False
        parts.extend(rec)
        n += 1
        pos = p
    return b"".join(parts), n, True


def _fallback_rate(ctx: Ctx) -> int:
    ctx.problems["sampling_rate_missing"] += 1
    r = ctx.cache.sampling_override(ctx.exporter)
    return int(r) if r and r > 0 else 1


def _domain_rate(state: SamplingState | None) -> int:
    if state is None:
        return 0
    if state.default_rate > 0:
        return state.default_rate
    if len(state.samplers) == 1:
        (r,) = state.samplers.values()
        return r
    return 0


def _rates_from_fields(plan: P.Plan, body, n: int) -> np.ndarray:
    """Per-record 1-in-N rate from sampling fields inside data records (0 = unknown)."""
    rl = plan.rec_len
    f = plan.rate_fields
    rate = np.zeros(n, dtype=np.int64)
    if P.IE_SAMPLING_PACKET_INTERVAL in f:
        iv = P.uint_column(body, n, rl, *f[P.IE_SAMPLING_PACKET_INTERVAL]).astype(np.float64)
        sp = (P.uint_column(body, n, rl, *f[P.IE_SAMPLING_PACKET_SPACE]).astype(np.float64)
              if P.IE_SAMPLING_PACKET_SPACE in f else np.zeros(n))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(iv > 0, np.rint((iv + sp) / np.where(iv > 0, iv, 1)), 0)
        rate = np.where(rate > 0, rate, r.astype(np.int64))
    if P.IE_SAMPLING_POPULATION in f and P.IE_SAMPLING_SIZE in f:
        pop = P.uint_column(body, n, rl, *f[P.IE_SAMPLING_POPULATION]).astype(np.float64)
        size = P.uint_column(body, n, rl, *f[P.IE_SAMPLING_SIZE]).astype(np.float64)
        r = np.where(size > 0, np.rint(pop / np.where(size > 0, size, 1)), 0).astype(np.int64)
        rate = np.where(rate > 0, rate, r)
    for ie in (P.IE_SAMPLING_INTERVAL, P.IE_FLOW_SAMPLER_RANDOM_INTERVAL):
        if ie in f:
            v = P.uint_column(body, n, rl, *f[ie]).astype(np.int64)
            rate = np.where(rate > 0, rate, v)
    return np.clip(rate, 0, 1 << 40)


def _prepare(t: Template, body, ctx: Ctx):
    """``(plan, fixed-field body, whole records)`` of one data set (variable-length fields stripped)."""
    plan = t.plan(ctx.protocol)
    if t.variable:
        body, n, ok = fixed_body(t, body)
        if not ok:
            ctx.problems["bad_record"] += 1
    else:
        n = len(body) // plan.rec_len
    return plan, body, n


def _per_record_rates(plan: P.Plan, state: SamplingState | None) -> bool:
    """True when the sampling rate must be looked up record by record (rate or sampler id in the records)."""
    return bool(plan.rate_fields) or (plan.has_sampler and state is not None and bool(state.samplers))


def decode_data(t: Template, body, ctx: Ctx, export_ms: int, uptime_ms: int | None, recv_ms: int) -> np.ndarray | None:
    """Rows of one data set (``None`` if it holds no whole record)."""
    plan, body, n = _prepare(t, body, ctx)
    if n <= 0 or plan.rec_len <= 0:
        return None
    return _decode_prepared(plan, body, n, ctx, export_ms, uptime_ms, recv_ms)


def _decode_prepared(
    plan: P.Plan, body, n: int, ctx: Ctx, export_ms: int, uptime_ms: int | None, recv_ms: int
) -> np.ndarray:
    state = ctx.state
    per_record = _per_record_rates(plan, state)
    rate = 1
    if not per_record:
        rate = _domain_rate(state) or _fallback_rate(ctx)
    const = P.const_block(ctx.proto_code, ctx.exporter16, ctx.domain, recv_ms, export_ms, rate)
    out = _gathered(plan, body, n, const, ctx, export_ms, uptime_ms)
    if per_record:
        rates = _rates_from_fields(plan, body, n) if plan.rate_fields else np.zeros(n, dtype=np.int64)
        if plan.has_sampler and state is not None and state.samplers:
            need = rates <= 0
            if need.any():
                sids = out["sampler_id"]
                for sid in np.unique(sids[need]).tolist():
                    r = state.samplers.get(int(sid), 0)
                    if r > 0:
                        rates[need & (sids == sid)] = r
        missing = rates <= 0
        if missing.any():
            rates[missing] = _domain_rate(state) or _fallback_rate(ctx)
        out["sampling_rate"] = rates
        P.scale_counts(out, rates)
    elif rate != 1:
        P.scale_counts(out, rate)
    if plan.reverse is not None:
        out = with_reverse(out, plan, body, n, const, ctx, export_ms, uptime_ms)
    return out


def _gathered(plan: P.Plan, body, n: int, const: bytes, ctx: Ctx, export_ms: int, uptime_ms: int | None) -> np.ndarray:
    """The rows of ``n`` records by ``plan`` (forward or reverse): gathered, counts saturated, times and
    ICMP/address-family fixed up; sampling not applied yet."""
    out = plan.gather(body, n, const)
    if plan.wide_counts:
        P.saturate_counts(out)
    fix_times(out, plan, body, n, ctx, export_ms, uptime_ms)
    if plan.icmp_where or plan.dual_af:
        fix_icmp_af(out, plan, body, n)
    return out


def with_reverse(out: np.ndarray, plan: P.Plan, body, n: int, const: bytes, ctx: Ctx, export_ms: int,
                 uptime_ms: int | None) -> np.ndarray:
    """RFC 5103 biflow rows: each forward row followed by its reverse row where the reverse count is > 0.

    The reverse rows are one more gather of the same record bytes with
    ``plan.reverse`` (:func:`~ingest.decode._nf_plan.reverse_fields`), the same
    fix-ups, and the forward rows' sampling rates; no per-record loop.
    """
    rp = plan.reverse
    keep = P.uint_column(body, n, plan.rec_len, *plan.reverse_keep) > 0
    if not keep.any():
        return out
    rev = _gathered(rp, body, n, const, ctx, export_ms, uptime_ms)
    if rp.icmp_src is None:
        # ICMP type/code rides in the destination port of both directions: undo the port swap
        icmp = (rev["ip_protocol"] == 1) | (rev["ip_protocol"] == 58)
        if icmp.any():
            sp = rev["src_port"][icmp]
            rev["src_port"][icmp] = rev["dst_port"][icmp]
            rev["dst_port"][icmp] = sp
    rate = out["sampling_rate"]
    rev["sampling_rate"] = rate
    rev["bytes_est"] = rev["bytes"]
    rev["packets_est"] = rev["packets"]
    P.scale_counts(rev, rate)
    # interleave as raw bytes (structured-array copies go field by field: ~20x slower)
    item = out.dtype.itemsize
    both = np.empty((n, 2, item), dtype=np.uint8)
    both[:, 0] = out.view(np.uint8).reshape(n, item)
    both[:, 1] = rev.view(np.uint8).reshape(n, item)
    take = np.ones((n, 2), dtype=bool)
    take[:, 1] = keep
    return both.reshape(2 * n, item)[take.reshape(-1)].view(out.dtype).reshape(-1)


def _emit(t: Template, body, ctx: Ctx, export_ms: int, uptime_ms: int | None, recv_ms: int, out_parts: list) -> int:
    """Decode one data set into ``out_parts``, or (``ctx.defer`` set) collect it for a batched decode.

    Deferred, a set whose rate is one value for the whole set becomes a tuple
    ``(template, plan, const block, record bytes, n, export_ms, uptime_ms,
    system_init_ms)`` for :meth:`ingest.decode.batch.FlowBatch.add`: every
    input that depends on state at arrival (sampling rate, system init time)
    is resolved now, so a later options record or template change cannot
    alter it. Sets with per-record rates and RFC 5103 biflow sets (up to two
    rows per record) are decoded now (an array). Returns the wire record count.
    """
    if ctx.defer is None:
        plan, body, n = _prepare(t, body, ctx)
        if n <= 0 or plan.rec_len <= 0:
            return 0
        out_parts.append(_decode_prepared(plan, body, n, ctx, export_ms, uptime_ms, recv_ms))
        return n  # wire records (an RFC 5103 biflow record may give two rows)
    if t.variable:
        plan, body, n = _prepare(t, body, ctx)
    else:
        plan = t._plans.get(ctx.protocol) or t.plan(ctx.protocol)
        n = len(body) // plan.rec_len
    rl = plan.rec_len
    if n <= 0 or rl <= 0:
        return 0
    state = ctx.state
    if plan.reverse is not None or plan.rate_fields or (plan.has_sampler and state is not None and state.samplers):
        ctx.defer.append(_decode_prepared(plan, body, n, ctx, export_ms, uptime_ms, recv_ms))
        return n
    if state is not None and state.default_rate > 0:
        rate = state.default_rate
    else:
        rate = _domain_rate(state) or _fallback_rate(ctx)
    key = (recv_ms, export_ms, rate)
    if key == ctx.const_key:
        const = ctx.const
    else:
        const = ctx.const = P.const_block(ctx.proto_code, ctx.exporter16, ctx.domain, recv_ms, export_ms, rate)
        ctx.const_key = key
    if len(body) != n * rl:
        body = body[: n * rl]
    sysinit = state.system_init_ms if state is not None else None
    ctx.defer.append((t, plan, const, body, n, export_ms, uptime_ms, sysinit))
    return n


def fix_times(out: np.ndarray, plan: P.Plan, body, n: int, ctx: Ctx, export_ms: int, uptime_ms: int | None) -> None:
    for col, kind, src in (("time_start_ms", plan.start_kind, plan.start_src), ("time_end_ms", plan.end_kind, plan.end_src)):
        if kind is None or kind == "ms":
            continue
        if kind == "uptime":
            v = out[col]
            if uptime_ms is not None:
                # export time minus how long ago (in exporter uptime) the flow started; wraps at 2**32 ms.
                v[:] = export_ms - ((uptime_ms - v) & UPTIME_MOD)
            elif plan.system_init_src is not None:
                v += P.uint_column(body, n, plan.rec_len, *plan.system_init_src).astype(np.int64)
            elif ctx.state is not None and ctx.state.system_init_ms is not None:
                v += ctx.state.system_init_ms
            else:
                v[:] = export_ms
        elif kind == "s":
            out[col] *= 1000
        else:
            fix_export_relative(out, col, kind, src, plan, body, n, export_ms)


def fix_export_relative(out: np.ndarray, col: str, kind: str, src, plan: P.Plan, body, n: int, export) -> None:
    """A ``delta_us`` (microseconds before the export) or ``ntp`` time column to unix ms; ``export`` is the
    export time in ms, one for the datagram or one per row (a 4-byte NTP field keeps only it)."""
    if kind == "delta_us":
        v = out[col]
        v[:] = export - v // 1000
    elif kind == "ntp":
        if src[1] == 8:
            out[col] = P.ntp_to_unix_ms(P.uint_column(body, n, plan.rec_len, src[0], 8))
        else:
            out[col] = export


def fix_icmp_af(out: np.ndarray, plan: P.Plan, body, n: int) -> None:
    rl = plan.rec_len
    if plan.icmp_where:
        proto = out["ip_protocol"]
        m = (proto == 1) | (proto == 58)
        if m.any():
            src = plan.icmp_src
            if src[0] == "tc":
                tc = P.uint_column(body, n, rl, src[1], src[2]).astype(np.int64)
            else:
                tc = P.uint_column(body, n, rl, src[1], 1).astype(np.int64) << 8
                if src[2] is not None:
                    tc |= P.uint_column(body, n, rl, src[2], 1).astype(np.int64)
            out["dst_port"][m] = tc[m]
            out["src_port"][m] = 0
    if plan.dual_af:
        if plan.has_ipver_field:
            m6 = out["ip_version"] == 6
        else:
            v4zero = ~out["src_addr"][:, 12:].any(axis=1) & ~out["dst_addr"][:, 12:].any(axis=1)
            m6 = v4zero
            out["ip_version"] = np.where(m6, 6, 4)
        if m6.any():
            if plan.v6_src is not None:
                out["src_addr"][m6] = P.bytes_column(body, n, rl, plan.v6_src, 16)[m6]
            if plan.v6_dst is not None:
                out["dst_addr"][m6] = P.bytes_column(body, n, rl, plan.v6_dst, 16)[m6]


def _record_values(t: Template, body) -> list[tuple[dict, dict]]:
    """Options records as ``(scope {ie: int}, options {ie: int})`` (IANA, <= 8 bytes)."""
    recs = []
    mv = memoryview(body)
    end = len(mv)
    pos = 0
    min_len = t.min_len
    while min_len > 0 and end - pos >= min_len and len(recs) < 4096:
        scope, opts = {}, {}
        p = pos
        for i, (ie, pen, ln) in enumerate(t.fields):
            if ln == VAR_LEN:
                if p >= end:
                    return recs
                vl = mv[p]
                p += 1
                if vl == 255:
                    if p + 2 > end:
                        return recs
                    vl = _U16.unpack_from(mv, p)[0]
                    p += 2
                p += vl
                if p > end:
                    return recs
                continue
            if p + ln > end:
                return recs
            if pen == 0 and 0 < ln <= 8:
                (scope if i < t.scope_count else opts).setdefault(ie, int.from_bytes(mv[p : p + ln], "big"))
            p += ln
        recs.append((scope, opts))
        pos = p
    return recs


def apply_options(t: Template, body, ctx: Ctx, v9_scope: bool) -> int:
    """Learn sampling/system-init facts from options records; returns the record count.

    ``v9_scope``: NetFlow v9 scope field types (1 System .. 5 Template) are not
    information elements, so scope values are only used for IPFIX.
    """
    recs = _record_values(t, body)
    for scope, opts in recs:
        vals = dict(opts)
        if not v9_scope:
            for k, v in scope.items():
                vals.setdefault(k, v)
        rate = 0
        iv = vals.get(P.IE_SAMPLING_PACKET_INTERVAL)
        if iv:
            rate = round((iv + vals.get(P.IE_SAMPLING_PACKET_SPACE, 0)) / iv)
        if not rate and vals.get(P.IE_SAMPLING_SIZE) and vals.get(P.IE_SAMPLING_POPULATION):
            rate = round(vals[P.IE_SAMPLING_POPULATION] / vals[P.IE_SAMPLING_SIZE])
        if not rate:
            rate = vals.get(P.IE_SAMPLING_INTERVAL) or vals.get(P.IE_FLOW_SAMPLER_RANDOM_INTERVAL) or 0
        sid = vals.get(P.IE_FLOW_SAMPLER_ID, vals.get(P.IE_SELECTOR_ID))
        init = vals.get(P.IE_SYSTEM_INIT_MS)
        if init is not None and not 0 <= init < _MAX_SYSTEM_INIT_MS:
            init = None  # a u64 beyond any clock (fuzzing found 2**63+): unknown, not an int64 overflow later
        if rate or init is not None:
            st = ctx.state or ctx.cache.sampling_state(ctx.exporter, ctx.version, ctx.domain, create=True)
            ctx.state = st
            if rate:
                rate = min(int(rate), 1 << 40)
                if sid is not None:
                    if len(st.samplers) < 4096 or sid in st.samplers:
                        st.samplers[int(sid)] = rate
                else:
                    st.default_rate = rate
            if init is not None:
                st.system_init_ms = int(init)
    return len(recs)


#: systemInitTimeMilliseconds above this (year ~146,000,000) is treated as not sent
_MAX_SYSTEM_INIT_MS = 1 << 62


def handle_data_set(key, t: Template | None, expired: bool, body, ctx: Ctx, out_parts: list) -> int:
    """Decode, or hold / count a data set; returns the decoded record count."""
    if t is None:
        if expired:
            ctx.problems["template_expired"] += 1
            return 0
        if not ctx.cache.hold(key, Pending(ctx.recv_ms, bytes(body), ctx.export_ms, ctx.uptime_ms)):
            ctx.problems["unknown_template"] += 1
        return 0
    if t.kind == "options":
        apply_options(t, body, ctx, v9_scope=ctx.version == 9)
        return 0
    return _emit(t, body, ctx, ctx.export_ms, ctx.uptime_ms, ctx.recv_ms, out_parts)


@dataclass(frozen=True)
class Dialect:
    """What tells NetFlow v9 and IPFIX apart once their headers are read.

    ``template_sets``: the set ids of (templates, options templates); ``parse_templates(body,
    base, ctx, options, new_keys) -> (learned, withdrawn)`` reads one such set; ``set_name``
    and ``end_name`` word the errors as each RFC names its sets; ``count_records``: the header
    sequence advances by data records (IPFIX) instead of by 1 per packet (v9); ``trailing``:
    bytes after the last set are a problem (IPFIX, whose header carries the message length).
    """

    protocol: str
    proto_code: int
    version: int
    template_sets: tuple[int, int]
    parse_templates: Callable
    set_name: str
    end_name: str
    count_records: bool
    trailing: bool


def decode_message(
    d: Dialect, datagram: bytes, end: int, pos: int, exporter: str, received_at_ms: int, templates: TemplateCache,
    defer: list | None, domain: int, seq: int, export_ms: int, uptime_ms: int | None,
) -> DecodeResult:
    """Walk the sets of one NetFlow v9 / IPFIX message from ``pos`` to ``end`` (after its header).

    Data sets become flow rows (or go to ``defer``, see :func:`_emit`), template sets are learned,
    held data sets whose template arrives are released; every set is checked against ``end``.
    """
    problems: Counter = Counter()
    if templates.has_pending():
        expired = templates.expire_pending(received_at_ms)
        if expired:
            problems["pending_expired"] += expired
    ctx = Ctx(d.protocol, d.proto_code, d.version, exporter, domain, received_at_ms, export_ms, uptime_ms, templates,
              problems)
    ctx.defer = defer
    mv = memoryview(datagram)
    parts: list = []
    new_keys: list = []
    learned = withdrawn = records = 0
    tmpl_id, opts_id = d.template_sets
    version = d.version
    while end - pos >= 4:
        set_id, length = _SET.unpack_from(datagram, pos)
        if length < 4:
            raise DecodeError(d.protocol, "bad_length", pos, f"{d.set_name} length {length}")
        if pos + length > end:
            raise DecodeError(d.protocol, "truncated", pos, f"{d.set_name} length {length} past {d.end_name}")
        body = mv[pos + 4 : pos + length]
        if set_id >= 256:
            key = (exporter, version, domain, set_id)
            t, expired = templates.get(key, received_at_ms)
            records += handle_data_set(key, t, expired, body, ctx, parts)
        elif set_id == tmpl_id or set_id == opts_id:
            lrn, wd = d.parse_templates(body, pos + 4, ctx, set_id == opts_id, new_keys)
            learned += lrn
            withdrawn += wd
        else:
            problems["reserved_set_id"] += 1
        pos += length
    if d.trailing and pos != end:
        problems["trailing_bytes"] += 1
    if new_keys:
        release_pending(new_keys, ctx, parts)
    header = ExportHeader(d.protocol, exporter, domain, seq, records if d.count_records else 1, export_ms, uptime_ms)
    return DecodeResult(flows=concat_rows(parts) if parts else EMPTY_FLOWS, header=header, problems=problems,
                        templates_learned=learned, templates_withdrawn=withdrawn)


def release_pending(keys, ctx: Ctx, out_parts: list) -> None:
    """Decode sets held for templates learned in this datagram (they join this result)."""
    cache = ctx.cache
    if not cache.has_pending():
        return
    # Options first, so held data sets see the sampling state they announce.
    keys = sorted(keys, key=lambda k: 0 if getattr(cache.peek(k), "kind", "") == "options" else 1)
    for key in keys:
        items = cache.take_pending(key)
        if not items:
            continue
        t = cache.peek(key)
        if t is None:
            continue
        for it in items:
            if t.kind == "options":
                apply_options(t, it.body, ctx, v9_scope=ctx.version == 9)
                continue
            _emit(t, it.body, ctx, it.export_ms, it.uptime_ms, it.received_at_ms, out_parts)
