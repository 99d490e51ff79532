"""Batched NetFlow v9 / IPFIX record decoding: many data sets of one template in one numpy pass.

Per exporter, a :class:`FlowBatch` keeps the flow records in arrival order, either decoded already
(sFlow, NetFlow v5, sets whose sampling rate differs per record) or as raw data-set records grouped
by the exact :class:`~ingest.decode.templates.Template` object in effect when the set arrived (a
template redefined before the flush keeps decoding its own sets). Everything a set's rows depend on
at arrival is captured with it, so :meth:`FlowBatch.decode` returns exactly the rows of the
per-datagram decoder, in the same order. :func:`decode_sets` is the kernel (one frombuffer + gather
over all sets of a template). Why: docs/architecture.md, "Why ingest decodes in batches". Pure: no I/O,
no clock.
"""

from __future__ import annotations

import numpy as np

from schemas.columns import FLOW_DTYPE, PROTOCOL_NAMES, concat_rows

from . import _nf_plan as P
from ._nf_common import UPTIME_MOD, fix_export_relative, fix_icmp_af
from .result import EMPTY_FLOWS

__all__ = ["FlowBatch", "decode_sets", "concat_rows"]

_ITEM = FLOW_DTYPE.itemsize


def _per_row(values: list, cnt: np.ndarray, k: int):
    """Per-set values repeated for each record of the set (a scalar for one set)."""
    if k == 1:
        return values[0]
    return np.repeat(np.asarray(values, dtype=np.int64), cnt)


def decode_sets(plan: P.Plan, consts: bytes, records: bytes, counts: list[int], export_ms: list[int],
                uptime_ms: list[int | None], system_init_ms: list[int | None]) -> np.ndarray:
    """``FLOW_DTYPE`` rows of ``k`` data sets of one record layout, in set order.

    ``consts``: the sets' :func:`~ingest.decode._nf_plan.const_block` (``k *
    CONST_LEN`` bytes: protocol, exporter, domain, receive/export time, rate);
    ``records``: their whole records back to back (``sum(counts) *
    plan.rec_len`` bytes, variable-length fields already stripped);
    ``counts``, ``export_ms``, ``uptime_ms`` (None: no uptime in the header)
    and ``system_init_ms`` (None: unknown) per set. Same rows as decoding each
    set on its own with ``decode_data``.
    """
    k = len(counts)
    cnt = np.asarray(counts, dtype=np.intp)
    n = int(cnt.sum())
    cp = plan.columns()
    if cp is None:
        out = _gather_bytes(plan, consts, records, cnt, k, n)
    else:
        out = P.gather_columns(plan, cp, consts, records, cnt, k, n)
    if plan.wide_counts:
        P.saturate_counts(out)
    _fix_times(out, plan, records, n, cnt, k, export_ms, uptime_ms, system_init_ms)
    if plan.icmp_where or plan.dual_af:
        fix_icmp_af(out, plan, records, n)
    rate = out["sampling_rate"]
    if (rate != 1).any():
        P.scale_counts(out, rate)
    return out


def _gather_bytes(plan: P.Plan, consts: bytes, records: bytes, cnt, k: int, n: int) -> np.ndarray:
    """Reference gather: one row per record (its set's constant block + the record), then the plan's byte index."""
    rl = plan.rec_len
    K = P.CONST_LEN
    buf = np.empty((n, K + rl), dtype=np.uint8)
    c = np.frombuffer(consts, dtype=np.uint8, count=k * K).reshape(k, K)
    buf[:, :K] = c if k == 1 else np.repeat(c, cnt, axis=0)
    buf[:, K:] = np.frombuffer(records, dtype=np.uint8, count=n * rl).reshape(n, rl)
    return buf.take(plan.base, axis=1).view(FLOW_DTYPE).reshape(n)


def gather_paths(fields: list, protocol: str = "ipfix") -> tuple:
    """For ``bench/decode_netflow.py --gather``: (record length, ``gather(body, n)`` as the per-datagram decoder
    builds ``n`` rows, ``columns(body, n)`` the column kernel alone or None on a big-endian host, the row
    limit of the cached gather tables) for a template of ``fields`` ((IE, PEN, length) triples)."""
    plan = P.Plan(fields, protocol)
    const = P.const_block(4, bytes(16), 1, 2, 3, 1)
    cp = plan.columns()

    def columns(body, n: int) -> np.ndarray:
        return P.gather_columns(plan, cp, const, body, None, 1, n)

    return plan.rec_len, lambda body, n: plan.gather(body, n, const), columns if cp is not None else None, P.TABLE_ROWS


def _fix_times(out, plan: P.Plan, body, n: int, cnt, k: int, export_ms, uptime_ms, system_init_ms) -> None:
    """``_nf_common.fix_times`` with header times per set instead of per datagram."""
    export = None
    cols = (("time_start_ms", plan.start_kind, plan.start_src), ("time_end_ms", plan.end_kind, plan.end_src))
    for col, kind, src in cols:
        if kind is None or kind == "ms":
            continue
        if kind == "s":
            out[col] *= 1000
            continue
        if export is None:
            export = _per_row(export_ms, cnt, k)
        v = out[col]
        if kind == "uptime":
            has_up = [u is not None for u in uptime_ms]
            if all(has_up):
                # export time minus how long ago (in exporter uptime) the flow started; wraps at 2**32 ms.
                v[:] = export - ((_per_row(uptime_ms, cnt, k) - v) & UPTIME_MOD)
                continue
            m_up = np.repeat(np.asarray(has_up, dtype=bool), cnt)
            exp_rows = np.broadcast_to(export, (n,))
            new = v.copy()
            if m_up.any():
                up = np.repeat(np.asarray([u or 0 for u in uptime_ms], dtype=np.int64), cnt)
                new[m_up] = exp_rows[m_up] - ((up[m_up] - v[m_up]) & UPTIME_MOD)
            rest = ~m_up
            if plan.system_init_src is not None:
                add = P.uint_column(body, n, plan.rec_len, *plan.system_init_src).astype(np.int64)
                new[rest] = v[rest] + add[rest]
            else:
                has_si = np.repeat(np.asarray([s is not None for s in system_init_ms], dtype=bool), cnt)
                si = np.repeat(np.asarray([s or 0 for s in system_init_ms], dtype=np.int64), cnt)
                a = rest & has_si
                new[a] = v[a] + si[a]
                b = rest & ~has_si
                new[b] = exp_rows[b]
            v[:] = new
        else:
            fix_export_relative(out, col, kind, src, plan, body, n, export)


class _Group:
    """Data sets of one template object waiting in a :class:`FlowBatch`."""

    __slots__ = ("index", "plan", "sets")

    def __init__(self, index: int, plan: P.Plan):
        self.index = index
        self.plan = plan
        self.sets: list[tuple] = []

    def decode(self, sets: list[tuple]) -> np.ndarray:
        return decode_sets(
            self.plan,
            b"".join([s[2] for s in sets]),
            b"".join([s[3] for s in sets]),
            [s[4] for s in sets],
            [s[5] for s in sets],
            [s[6] for s in sets],
            [s[7] for s in sets],
        )


class FlowBatch:
    """One exporter's flow records waiting to be published, in arrival order.

    ``add(items)`` takes what a decoder collected with ``defer`` (raw set
    tuples and decoded arrays), ``add_rows(arr)`` decoded rows of any
    protocol; ``records`` counts both. ``decode()`` returns all of them as one
    ``FLOW_DTYPE`` array, one numpy pass per template; ``failed_records`` then
    maps protocol -> records of sets the kernel could not decode (a decoder
    bug; those sets are dropped, the rest is returned).
    """

    __slots__ = ("records", "failed_records", "_groups", "_src", "_n", "_rows")

    def __init__(self) -> None:
        self.records = 0
        self.failed_records: dict[str, int] = {}
        self._groups: dict = {}  # Template object (identity) -> _Group (index = insertion order)
        # Arrival order, one entry per data set or rows array: its group index
        # (-1: decoded rows, the next of ``_rows``) and its record count.
        self._src: list[int] = []
        self._n: list[int] = []
        self._rows: list[np.ndarray] = []

    def __len__(self) -> int:
        return self.records

    def add_rows(self, rows: np.ndarray) -> None:
        n = len(rows)
        if n:
            self._src.append(-1)
            self._n.append(n)
            self._rows.append(rows)
            self.records += n

    def add(self, items: list) -> None:
        groups, src, ns = self._groups, self._src, self._n
        for it in items:
            if type(it) is tuple:
                g = groups.get(it[0])
                if g is None:
                    g = groups[it[0]] = _Group(len(groups), it[1])
                n = it[4]
                src.append(g.index)
                ns.append(n)
                g.sets.append(it)
                self.records += n
            else:
                self.add_rows(it)

    def decode(self) -> np.ndarray:
        """All records, in arrival order (the same rows per-datagram decoding gives)."""
        if not self._n:
            return EMPTY_FLOWS
        if not self._groups:
            return concat_rows(self._rows)
        try:
            return self._decode_grouped()
        except Exception:
            return self._decode_each()

    def _decode_grouped(self) -> np.ndarray:
        groups = list(self._groups.values())
        sources = [g.decode(g.sets) for g in groups]
        if self._rows:
            sources.append(concat_rows(self._rows))
        if len(sources) == 1:
            return sources[0]
        # Each source's rows go back to their arrival positions: source s's
        # entries, in order, fill the output ranges [at, at + n) they arrived in.
        src = np.asarray(self._src, dtype=np.intp)
        src[src < 0] = len(groups)
        cnt = np.asarray(self._n, dtype=np.intp)
        at = np.cumsum(cnt) - cnt
        total = int(cnt.sum())
        out = np.empty((total, _ITEM), dtype=np.uint8)
        for s, arr in enumerate(sources):
            m = src == s
            c = cnt[m]
            dest = np.arange(len(arr), dtype=np.intp) + np.repeat(at[m] - (np.cumsum(c) - c), c)
            out[dest] = np.ascontiguousarray(arr).view(np.uint8).reshape(len(arr), _ITEM)
        return out.view(FLOW_DTYPE).reshape(total)

    def _decode_each(self) -> np.ndarray:
        """Fallback: set by set; a set that fails is dropped and counted."""
        groups = list(self._groups.values())
        next_set = [0] * len(groups)
        rows = iter(self._rows)
        parts = []
        for s, n in zip(self._src, self._n):
            if s < 0:
                parts.append(next(rows))
                continue
            g = groups[s]
            it = g.sets[next_set[s]]
            next_set[s] += 1
            try:
                parts.append(g.decode([it]))
            except Exception:
                proto = PROTOCOL_NAMES.get(it[2][P.C_PROTO], "unknown")
                self.failed_records[proto] = self.failed_records.get(proto, 0) + n
        return concat_rows(parts) if parts else EMPTY_FLOWS
