"""Shared vectorised helpers for the policy rules.

- :class:`Networks`: CIDR membership of (n, 16) address columns, vectorised
  (addresses as two big-endian uint64 halves, one masked compare per CIDR).
- :class:`GroupBy`: sort-based group-by over integer/string/address key
  columns (``np.unique`` factorisation + ``np.lexsort``), exact int64 sums,
  min/max per group, top rows per group for samples (``desc=``: in the same sort).
- :class:`DenseGroups` / :func:`min_max_by`: groups by one small integer key
  (string codes, job x bucket) through ``bincount`` / ``ufunc.at`` tables, no sort.
- :class:`BatchContext`: one enriched batch with lazily computed, cached
  derived columns, masks and address selections shared by all rules (the
  cheap string-code tests first, address work only on the rows they leave).
- :func:`format_tuple`: the ``'proto src:sport -> dst:dport'`` sample string
  (only for the few rows reported).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from schemas.columns import addr_halves, addr_keys, addr_str, addr_strs, dtype_for

ENRICHED_DTYPE = dtype_for("flow_enriched")
_ENRICHED_FIELDS = frozenset(ENRICHED_DTYPE.names)
_I64_MAX, _I64_MIN = int(np.iinfo(np.int64).max), int(np.iinfo(np.int64).min)
_V4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_PROTO = {1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 58: "ipv6-icmp", 132: "sctp"}


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
    """``factorize`` of a string column given as integer codes into ``strings`` (same result, no string hashing).

    The distinct codes come from a ``bincount`` and each row's rank from a lookup table indexed by code
    (no sort of the column) while the codes are small; otherwise from ``np.unique``.
    """
    codes = np.asarray(codes)
    if len(codes) == 0:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64)
    dense = codes.dtype.kind in "iu" and 0 <= codes.min() and codes.max() < _lut_limit(len(codes))
    if dense:
        u = np.flatnonzero(np.bincount(codes))
    else:
        u, inv = np.unique(codes, return_inverse=True)
    dic = np.empty(len(u), dtype=object)
    dic[:] = [strings[i] for i in u.tolist()]  # one per distinct value
    order = np.argsort(dic, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    if dense:
        lut = np.empty(int(u[-1]) + 1, dtype=np.int64)
        lut[u] = rank
        return dic[order], lut[codes]
    return dic[order], rank[inv.reshape(-1)]


def _lut_limit(n: int) -> int:
    """Largest code (exclusive) for which a lookup table indexed by code is cheaper than sorting ``n`` values."""
    return 8 * n + 4096


def min_max_by(ids: Sequence[np.ndarray], k: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per id in ``[0, k)``: min of ``lo`` and max of ``hi`` over the rows having that id in any of the id
    columns ``ids`` (each aligned with ``lo`` / ``hi``); the int64 max / min for an id without rows.
    With ``lo <= hi`` row by row, an id has rows exactly where its min <= its max. No sort, no bincount."""
    mins = np.empty(k, dtype=np.int64)
    mins.fill(_I64_MAX)
    maxs = np.empty(k, dtype=np.int64)
    maxs.fill(_I64_MIN)
    for col in ids:
        np.minimum.at(mins, col, lo)
        np.maximum.at(maxs, col, hi)
    return mins, maxs


class DenseGroups:
    """Groups of rows by one non-negative integer key, in key order (as ``GroupBy(key)``), without a sort.

    Keys below ``size`` (when that is small next to the row count) index ``bincount`` / ``ufunc.at``
    tables directly; larger ones are first replaced by their rank (``np.unique``). Reductions are of
    integer values into int64.
    """

    def __init__(self, key: np.ndarray, size: int):
        key = np.asarray(key, dtype=np.int64)
        values = None
        if size > _lut_limit(len(key)):
            values, key = np.unique(key, return_inverse=True)
            key, size = key.reshape(-1), len(values)
        counts = np.bincount(key, minlength=size)
        present = counts.nonzero()[0]
        self._key, self._size, self._present = key, size, present
        self._counts = counts[present]
        self.keys = present if values is None else values[present]
        self.ngroups = len(present)

    @property
    def first(self) -> np.ndarray:
        """Per group, its first row (the lowest row index)."""
        return self.min(np.arange(len(self._key)))

    def count(self) -> np.ndarray:
        return self._counts

    def sum(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(np.add, 0, values)

    def min(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(np.minimum, _I64_MAX, values)

    def max(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(np.maximum, _I64_MIN, values)

    def _reduce(self, ufunc: np.ufunc, start: int, values: np.ndarray) -> np.ndarray:
        out = np.empty(self._size, dtype=np.int64)
        out.fill(start)
        ufunc.at(out, self._key, values)
        return out[self._present]


class GroupBy:
    """Group rows by several key columns; groups come out sorted by key values.

    ``desc``: rows of each group come in ``order`` by descending ``desc`` (ties: lower index first), so
    ``top(k)`` gives ``top_rows(desc, k)`` without a second sort, and ``first`` is each group's top row.
    Otherwise rows of a group are in index order.
    """

    def __init__(self, *keys: np.ndarray, desc: np.ndarray | None = None):
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
        sort_keys = tuple(reversed(codes))
        if desc is not None:  # least significant: lexsort is stable, so equal weights stay in index order
            sort_keys = (-np.asarray(desc, dtype=np.float64), *sort_keys)
        order = np.lexsort(sort_keys) if sort_keys else np.arange(n)
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for c in codes:
            cs = c[order]
            change[1:] |= cs[1:] != cs[:-1]
        self.order = order
        self.starts = np.flatnonzero(change)
        self._change = change
        self.first = order[self.starts]
        self.ngroups = len(self.starts)

    @cached_property
    def gid(self) -> np.ndarray:
        """Group number of every row."""
        gid = np.empty(self.n, dtype=np.int64)
        gid[self.order] = np.cumsum(self._change) - 1
        return gid

    def sum(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(np.asarray(values)[self.order], self.starts)

    def count(self) -> np.ndarray:
        c = np.empty(self.ngroups, dtype=np.int64)
        c[:-1] = self.starts[1:] - self.starts[:-1]
        c[-1:] = self.n - self.starts[-1:]
        return c

    def min(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.asarray(values).dtype)
        return np.minimum.reduceat(np.asarray(values)[self.order], self.starts)

    def max(self, values: np.ndarray) -> np.ndarray:
        if self.ngroups == 0:
            return np.zeros(0, dtype=np.asarray(values).dtype)
        return np.maximum.reduceat(np.asarray(values)[self.order], self.starts)

    def top_rows(self, weight: np.ndarray, k: int) -> list[np.ndarray]:
        """Per group, up to ``k`` row indices by descending weight (ties: lower index first)."""
        if self.ngroups == 0:
            return []
        # lexsort is stable: rows of equal group and weight stay in index order; groups come in the order
        # of their numbers, so group g starts where it starts in ``order`` too
        order = np.lexsort((-np.asarray(weight, dtype=np.float64), self.gid))
        return self._slices(order, k)

    def top(self, k: int) -> list[np.ndarray]:
        """Per group, its first ``k`` rows in ``order`` (built with ``desc``: the ``top_rows(desc, k)``)."""
        return self._slices(self.order, k)

    def _slices(self, order: np.ndarray, k: int) -> list[np.ndarray]:
        starts = self.starts.tolist()
        ends = starts[1:] + [self.n]
        return [order[s : min(e, s + k)] for s, e in zip(starts, ends)]


def format_tuple(proto: int, src16, sport: int, dst16, dport: int) -> str:
    """``'tcp 10.0.0.1:5555 -> 10.0.1.2:2049'`` (IPv6 in brackets)."""
    src, dst = _host_text(addr_str(src16)), _host_text(addr_str(dst16))
    return _tuple_text(_proto_text(proto), src, int(sport), dst, int(dport))


def _tuple_text(proto: str, src: str, sport: int, dst: str, dport: int) -> str:
    return f"{proto} {src}:{sport} -> {dst}:{dport}"


def _host_text(addr: str) -> str:
    """An address text as it stands before ``:port`` (IPv6 in brackets)."""
    return f"[{addr}]" if ":" in addr else addr


def _proto_text(proto: int) -> str:
    return _PROTO.get(int(proto)) or str(int(proto))


class GroupAddrs(NamedTuple):
    """Rows of a batch with one side's address: (n, 16) bytes, ``addr_halves``, inside the cluster ranges."""

    rows: np.ndarray
    a16: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    inside: np.ndarray


_NO_ADDRS = GroupAddrs(np.zeros(0, dtype=np.int64), np.zeros((0, 16), dtype=np.uint8), np.zeros(0, dtype=np.uint64),
                       np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=bool))
for _a in _NO_ADDRS:
    _a.flags.writeable = False


class BatchContext:
    """An enriched flow batch plus cached derived columns."""

    def __init__(self, batch: np.ndarray, cluster: Networks, interned: tuple[Mapping[str, np.ndarray], Sequence[str]] | None = None):
        """``interned``: (column name -> integer codes, code -> string[, string -> code]) the caller already
        computed for this batch (the detector engine's interner); ``codes`` then factorizes those integers
        instead of the strings, and ``isin`` compares the codes directly."""
        if not _ENRICHED_FIELDS.issubset(batch.dtype.names or ()):
            missing = [f for f in ENRICHED_DTYPE.names if f not in (batch.dtype.names or ())]
            raise ValueError(f"batch is not an enriched flow batch; missing fields: {missing[:5]}")
        self.batch = batch
        self.cluster = cluster
        self.n = len(batch)
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._masks: dict[tuple[str, tuple], np.ndarray] = {}
        self._addrs: dict[tuple[str, tuple], GroupAddrs] = {}
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

    def bytes_at(self, rows: np.ndarray) -> np.ndarray:
        """``bytes_est`` (int64) of ``rows``: gathers only those rows unless the whole column is cached."""
        full = self.__dict__.get("bytes_est")
        return full[rows] if full is not None else self.batch["bytes_est"][rows].astype(np.int64)

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

    def halves(self, side: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``addr_halves`` of the ``side`` (``"src"``/``"dst"``) address of ``rows`` only."""
        return addr_halves(self.batch[f"{side}_addr"][rows])

    def group_addrs(self, side: str, groups) -> GroupAddrs:
        """The rows whose ``{side}_group`` is in ``groups``, with their ``side`` addresses and cluster
        membership (tested for those rows only); once per batch and (side, groups), arrays read-only."""
        key = (side, tuple(groups))
        sel = self._addrs.get(key)
        if sel is None:
            rows = self.isin(f"{side}_group", key[1]).nonzero()[0]
            sel = self._addrs[key] = self._group_addrs(side, rows) if len(rows) else _NO_ADDRS
        return sel

    def _group_addrs(self, side: str, rows: np.ndarray) -> GroupAddrs:
        a16 = self.batch[f"{side}_addr"][rows]
        hi, lo = addr_halves(a16)
        sel = GroupAddrs(rows, a16, hi, lo, self.cluster.contains_halves(hi, lo))
        for a in sel:
            a.flags.writeable = False
        return sel

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
        """Row mask: string column ``name`` in ``values`` (``'*'`` matches everything).

        Computed once per batch and (name, values); the mask is read-only, shared by every rule asking.
        """
        values = tuple(values)
        mask = self._masks.get((name, values))
        if mask is None:
            mask = self._masks[(name, values)] = self._isin(name, values)
            mask.flags.writeable = False
        return mask

    def _isin(self, name: str, values: tuple) -> np.ndarray:
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
        return self.isin(name, (value,))

    def label_ids(self, *names: str) -> tuple[list[np.ndarray], Sequence[str]]:
        """(ids of each column, labels): string columns ``names`` as non-negative integers into one table,
        ``labels[id]`` the value (for ``DenseGroups``; labels may hold values absent from the batch, in any
        order). The caller's codes when it interned the columns with a small table, else ``factorize`` ranks."""
        it = self._interned
        if it is not None and all(n in it[0] for n in names) and len(it[1]) <= _lut_limit(self.n):
            return [it[0][n] for n in names], it[1]
        if len(names) == 1:
            uniq, codes = self.codes(names[0])
            return [codes], uniq
        uniq, codes = factorize(np.concatenate([self.batch[n] for n in names]))
        return [codes[i * self.n : (i + 1) * self.n] for i in range(len(names))], uniq

    # --- reporting
    def samples(self, rows: np.ndarray, k: int = 5) -> list[str]:
        """Distinct sample 5-tuples of ``rows`` (already ordered by preference)."""
        return self.samples_of([rows], k)[0]

    def samples_of(self, row_lists: Sequence[np.ndarray], k: int = 5) -> list[list[str]]:
        """``samples`` of each of several row lists, reading the batch's fields once for all of them.

        Each distinct address is turned into text once; the tuples are the ``format_tuple`` ones.
        """
        sizes = [len(r) for r in row_lists]
        if sum(sizes) == 0:
            return [[] for _ in row_lists]
        b = self.batch
        rows = np.concatenate([np.asarray(r, dtype=np.int64) for r in row_lists])
        proto, sport, dport = (b[f][rows].tolist() for f in ("ip_protocol", "src_port", "dst_port"))
        src, dst = addr_keys(b["src_addr"][rows]), addr_keys(b["dst_addr"][rows])
        hosts = list({*src, *dst})
        host = {a: _host_text(t) for a, t in zip(hosts, addr_strs(hosts))}
        name = {p: _proto_text(p) for p in set(proto)}
        out = []
        end = 0
        for size in sizes:
            start, end = end, end + size
            picked: list[str] = []
            for i in range(start, end):
                t = _tuple_text(name[proto[i]], host[src[i]], sport[i], host[dst[i]], dport[i])
                if t not in picked:
                    picked.append(t)
                    if len(picked) >= k:
                        break
            out.append(picked)
        return out


class StatelessRule:
    """Base for rules that judge each batch on its own: no timer work, no state to snapshot."""

    def evaluate(self, now_ms: int) -> list:
        return []

    def snapshot(self) -> dict:
        return {}

    def restore(self, snap: dict) -> None:
        pass
