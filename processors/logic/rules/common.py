"""Shared vectorised helpers for the policy rules.

- :class:`Networks`: CIDR membership of (n, 16) address columns, vectorised
  (addresses as two big-endian uint64 halves, one masked compare per CIDR).
- :class:`BatchContext`: one enriched batch with lazily computed, cached
  derived columns, masks and address selections shared by all rules (the
  cheap string-code tests first, address work only on the rows they leave).
- :func:`format_tuple`: the ``'proto src:sport -> dst:dport'`` sample string
  (only for the few rows reported).

The rules group rows with :mod:`processors.logic.windows.groupby`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import NamedTuple

import numpy as np

from processors.logic.windows.groupby import factorize, factorize_interned, lut_limit
from processors.logic.enrich.lpm import parse_prefix
from schemas.columns import addr_halves, addr_keys, addr_str, addr_strs, dtype_for

ENRICHED_DTYPE = dtype_for("flow_enriched")
_ENRICHED_FIELDS = frozenset(ENRICHED_DTYPE.names)
_V4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_PROTO = {1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 58: "ipv6-icmp", 132: "sctp"}


class Networks:
    """A fixed list of CIDRs (IPv4 ones as IPv4-mapped /96+len) with vectorised membership."""

    def __init__(self, cidrs: list[str] | tuple[str, ...] = ()):
        self.cidrs = [str(c) for c in cidrs]
        nets = []
        for c in self.cidrs:
            n = ipaddress.ip_network(c, strict=False)
            val, plen = parse_prefix(n)  # the same 128-bit space as the LPM tables
            # an IPv6 network never contains IPv4 hosts (unless written in ::ffff:0:0/96 form)
            v6only = n.version == 6 and not n.subnet_of(_V4_MAPPED)
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
        if it is not None and all(n in it[0] for n in names) and len(it[1]) <= lut_limit(self.n):
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
