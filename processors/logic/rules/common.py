"""Shared vectorised helpers for the policy rules.

- :class:`Networks`: CIDR membership of (n, 16) address columns, vectorised
  (addresses as two big-endian uint64 halves, one masked compare per CIDR).
- :class:`GroupBy`: sort-based group-by over integer/string/address key
  columns (``np.unique`` factorisation + ``np.lexsort``), exact int64 sums,
  min/max per group, top rows per group for samples.
- :class:`BatchContext`: one enriched batch with lazily computed, cached
  derived columns shared by all rules.
- :func:`format_tuple`: the ``'proto src:sport -> dst:dport'`` sample string
  (only for the few rows reported).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np
import pyarrow as pa

from processors.logic.windows import addr_text
from schemas.columns import dtype_for

ENRICHED_DTYPE = dtype_for("flow_enriched")
_V4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_PROTO = {1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 58: "ipv6-icmp", 132: "sctp"}


def addr_halves(a16: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 16) uint8 -> (hi, lo) uint64 columns, big-endian (so order = address order)."""
    a = np.ascontiguousarray(np.asarray(a16, dtype=np.uint8).reshape(-1, 16))
    v = a.view(">u8").astype(np.uint64)
    return v[:, 0], v[:, 1]


class Networks:
    """A fixed list of CIDRs (IPv4 ones as IPv4-mapped /96+len) with vectorised membership."""

    def __init__(self, cidrs: list[str] | tuple[str, ...] = ()):
        self.cidrs = [str(c) for c in cidrs]
        nets = []
        for c in self.cidrs:
            n = ipaddress.ip_network(c, strict=False)
            if n.version == 4:
                packed = b"\x00" * 10 + b"\xff\xff" + n.network_address.packed
                plen = n.prefixlen + 96
                v6only = False
            else:
                packed = n.network_address.packed
                plen = n.prefixlen
                # an IPv6 network never contains IPv4 hosts (unless written in ::ffff:0:0/96 form)
                v6only = not n.subnet_of(_V4_MAPPED)
            val = int.from_bytes(packed, "big")
            mask = ((1 << 128) - 1) ^ ((1 << (128 - plen)) - 1)
            parts = (val >> 64, val & (2**64 - 1), mask >> 64, mask & (2**64 - 1))
            nets.append((*(np.uint64(x) for x in parts), v6only))
        self._nets = nets

    def __bool__(self) -> bool:
        return bool(self._nets)

    def contains_halves(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        out = np.zeros(len(hi), dtype=bool)
        mapped = None
        for nh, nl, mh, ml, v6only in self._nets:
            hit = ((hi & mh) == nh) & ((lo & ml) == nl)
            if v6only:
                if mapped is None:
                    mapped = (hi == 0) & ((lo >> np.uint64(32)) == np.uint64(0xFFFF))
                hit &= ~mapped
            out |= hit
        return out

    def contains(self, a16: np.ndarray) -> np.ndarray:
        """Vectorised membership of an (n, 16) address column."""
        hi, lo = addr_halves(a16)
        return self.contains_halves(hi, lo)


def factorize(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted uniques, codes) of a 1-D column.

    String (object) columns go through Arrow's dictionary encoding (C++, a few
    times faster than sorting Python strings); only the small dictionary is
    sorted, so codes follow the sorted order of the uniques either way.
    """
    col = np.asarray(col)
    if len(col) == 0:
        return col[:0], np.zeros(0, dtype=np.int64)
    if col.dtype == object:
        try:
            enc = pa.array(col, type=pa.string()).dictionary_encode()
        except (TypeError, ValueError, pa.ArrowException):
            enc = None
        if enc is not None and enc.null_count == 0:
            dic = np.array(enc.dictionary.to_pylist(), dtype=object)
            order = np.argsort(dic, kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            return dic[order], rank[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    uniq, inv = np.unique(col, return_inverse=True)
    return uniq, inv.astype(np.int64).reshape(-1)


def factorize_interned(codes: np.ndarray, strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``factorize`` of a string column given as integer codes into ``strings`` (same result, no string hashing)."""
    codes = np.asarray(codes)
    if len(codes) == 0:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
    u, inv = np.unique(codes, return_inverse=True)
    dic = np.empty(len(u), dtype=object)
    dic[:] = [strings[i] for i in u.tolist()]  # one per distinct value
    order = np.argsort(dic, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return dic[order], rank[inv.reshape(-1)]


class GroupBy:
    """Group rows by several key columns; groups come out sorted by key values."""

    def __init__(self, *keys: np.ndarray):
        n = len(keys[0]) if keys else 0
        codes = []
        for k in keys:
            k = np.asarray(k)
            if k.dtype == object:
                codes.append(factorize(k)[1])
            else:
                codes.append(k.astype(np.int64) if k.dtype.kind == "b" else k)
        self.n = n
        if n == 0:
            self.order = np.zeros(0, dtype=np.int64)
            self.starts = np.zeros(0, dtype=np.int64)
            self.gid = np.zeros(0, dtype=np.int64)
            self.first = np.zeros(0, dtype=np.int64)
            self.ngroups = 0
            return
        order = np.lexsort(tuple(reversed(codes))) if codes else np.arange(n)
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for c in codes:
            cs = c[order]
            change[1:] |= cs[1:] != cs[:-1]
        self.order = order
        self.starts = np.flatnonzero(change)
        gid_sorted = np.cumsum(change) - 1
        self.gid = np.empty(n, dtype=np.int64)
        self.gid[order] = gid_sorted
        self.first = order[self.starts]
        self.ngroups = len(self.starts)

    def sum(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(np.asarray(values)[self.order], self.starts)

    def count(self) -> np.ndarray:
        return np.diff(np.append(self.starts, self.n))

    def min(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.asarray(values).dtype)
        return np.minimum.reduceat(np.asarray(values)[self.order], self.starts)

    def max(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.asarray(values).dtype)
        return np.maximum.reduceat(np.asarray(values)[self.order], self.starts)

    def any(self, mask: np.ndarray) -> np.ndarray:
        return self.max(np.asarray(mask, dtype=np.int8)) > 0

    def top_rows(self, weight: np.ndarray, k: int) -> list[np.ndarray]:
        """Per group, up to ``k`` row indices by descending weight (ties: lower index first)."""
        if self.ngroups == 0:
            return []
        idx = np.arange(self.n)
        order = np.lexsort((idx, -np.asarray(weight, dtype=np.float64), self.gid))
        g = self.gid[order]
        starts = np.searchsorted(g, np.arange(self.ngroups))
        ends = np.append(starts[1:], self.n)
        return [order[s : min(e, s + k)] for s, e in zip(starts, ends)]


def format_tuple(proto: int, src16, sport: int, dst16, dport: int) -> str:
    """``'tcp 10.0.0.1:5555 -> 10.0.1.2:2049'`` (IPv6 in brackets)."""

    def ep(a16, port):
        s = addr_text(a16)
        return f"[{s}]:{port}" if ":" in s else f"{s}:{port}"

    return f"{_PROTO.get(int(proto), str(int(proto)))} {ep(src16, int(sport))} -> {ep(dst16, int(dport))}"


class BatchContext:
    """An enriched flow batch plus cached derived columns."""

    def __init__(self, batch: np.ndarray, cluster: Networks, interned: tuple[Mapping[str, np.ndarray], Sequence[str]] | None = None):
        """``interned``: (column name -> integer codes, code -> string[, string -> code]) the caller already
        computed for this batch (the detector engine's interner); ``codes`` then factorizes those integers
        instead of the strings, and ``isin`` compares the codes directly."""
        missing = [f for f in ENRICHED_DTYPE.names if f not in (batch.dtype.names or ())]
        if missing:
            raise ValueError(f"batch is not an enriched flow batch; missing fields: {missing[:5]}")
        self.batch = batch
        self.cluster = cluster
        self.n = len(batch)
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if interned is not None:  # (codes, strings, string -> code)
            index = interned[2] if len(interned) > 2 else {s: i for i, s in enumerate(interned[1])}
            interned = (interned[0], interned[1], index)
        self._interned = interned

    # --- basic columns
    @cached_property
    def t_end(self) -> np.ndarray:
        return self.batch["time_end_ms"].astype(np.int64)

    @cached_property
    def t_start(self) -> np.ndarray:
        ts = self.batch["time_start_ms"].astype(np.int64)
        return np.where((ts > 0) & (ts <= self.t_end), ts, self.t_end)

    @cached_property
    def bytes_est(self) -> np.ndarray:
        return self.batch["bytes_est"].astype(np.int64)

    @cached_property
    def src_halves(self) -> tuple[np.ndarray, np.ndarray]:
        return addr_halves(self.batch["src_addr"])

    @cached_property
    def dst_halves(self) -> tuple[np.ndarray, np.ndarray]:
        return addr_halves(self.batch["dst_addr"])

    @cached_property
    def src_in_cluster(self) -> np.ndarray:
        return self.cluster.contains_halves(*self.src_halves)

    @cached_property
    def dst_in_cluster(self) -> np.ndarray:
        return self.cluster.contains_halves(*self.dst_halves)

    # --- string columns
    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(uniques, codes) of a string column, computed once per batch."""
        if name not in self._codes:
            if self._interned is not None and name in self._interned[0]:
                self._codes[name] = factorize_interned(self._interned[0][name], self._interned[1])
            else:
                self._codes[name] = factorize(self.batch[name])
        return self._codes[name]

    def code_col(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Integer codes of a string column (sorted-unique order), optionally for some rows; for group-bys."""
        codes = self.codes(name)[1]
        return codes if rows is None else codes[rows]

    def isin(self, name: str, values) -> np.ndarray:
        """Row mask: string column ``name`` in ``values`` (``'*'`` matches everything)."""
        values = list(values)
        if "*" in values:
            return np.ones(self.n, dtype=bool)
        if name not in self._codes and self._interned is not None and name in self._interned[0]:
            # the caller's codes are enough for a membership test: no factorization
            index = self._interned[2]
            want = [index[v] for v in values if isinstance(v, str) and v in index]
            raw = self._interned[0][name]
            if len(want) == 1:
                return raw == want[0]
            return np.isin(raw, np.array(want, dtype=raw.dtype)) if want else np.zeros(self.n, dtype=bool)
        uniq, codes = self.codes(name)
        if len(uniq) == 0:
            return np.zeros(self.n, dtype=bool)
        return np.isin(uniq, np.array(values, dtype=object))[codes]

    def eq(self, name: str, value: str) -> np.ndarray:
        return self.isin(name, [value])

    # --- reporting
    def samples(self, rows: np.ndarray, k: int = 5) -> list[str]:
        """Distinct sample 5-tuples of ``rows`` (already ordered by preference)."""
        b = self.batch
        out: list[str] = []
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return out
        # the (few) rows' fields once, not a field view per row and field
        cols = zip(b["ip_protocol"][rows].tolist(), b["src_addr"][rows], b["src_port"][rows].tolist(),
                   b["dst_addr"][rows], b["dst_port"][rows].tolist())
        for proto, src, sport, dst, dport in cols:
            s = format_tuple(proto, src, sport, dst, dport)
            if s not in out:
                out.append(s)
                if len(out) >= k:
                    break
        return out


class StatelessRule:
    """Base for rules that judge each batch on its own: no timer work, no state to snapshot."""

    def evaluate(self, now_ms: int) -> list:
        return []

    def snapshot(self) -> dict:
        return {}

    def restore(self, snap: dict) -> None:
        pass
