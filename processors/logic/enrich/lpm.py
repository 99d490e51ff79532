"""Vectorised longest-prefix match over 16-byte address columns.

Addresses are the (n, 16) uint8 columns of :mod:`schemas.columns` (IPv6, or
IPv4-mapped IPv6). Prefixes live in the same 128-bit space: an IPv4 ``/L``
becomes ``::ffff:a.b.c.d/(96+L)``, so IPv4 prefixes only ever match
IPv4-mapped addresses, while an IPv6 ``::/0`` matches everything.

Lookup works one prefix length at a time, longest first. For one length the
masked (hi, lo) 64-bit halves of each address are looked up in that length's
open-addressing hash table (multiplicative hash, linear probing, at most 1/4
full, so most addresses are settled by their first slot: a hit, or an empty
slot). Addresses matched at a longer length are not looked at again. No
per-address Python.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

import numpy as np

from schemas.columns import addr_halves

__all__ = ["PrefixTable", "parse_prefix", "prefix_str"]

_ALL64 = (1 << 64) - 1


def _mask64(bits: int) -> int:
    """Top ``bits`` (0..64) of a 64-bit word set."""
    return (_ALL64 << (64 - bits)) & _ALL64 if bits > 0 else 0


def parse_prefix(text: str | ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[int, int]:
    """``(value128, length128)`` of an IP address or CIDR in the IPv4-mapped 128-bit space.

    A bare address is a host prefix (/32 or /128). Raises ``ValueError`` for
    bad text or a CIDR with host bits set.
    """
    net = text if isinstance(text, ipaddress.IPv4Network | ipaddress.IPv6Network) else ipaddress.ip_network(
        str(text).strip(), strict=True
    )
    if net.version == 4:
        value = (0xFFFF << 32) | int(net.network_address)
        return value, 96 + net.prefixlen
    return int(net.network_address), net.prefixlen


def prefix_str(value: int, length: int) -> str:
    """Text form of a 128-bit prefix; IPv4-mapped ones (length >= 96) print as IPv4 CIDRs."""
    if length >= 96 and (value >> 32) == 0xFFFF:
        return f"{ipaddress.IPv4Address(value & 0xFFFFFFFF)}/{length - 96}"
    return f"{ipaddress.IPv6Address(value)}/{length}"


_MIX_HI = np.uint64(0xC2B2AE3D27D4EB4F)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio (Fibonacci hashing)


def _slots(hi: np.ndarray, lo: np.ndarray, shift: np.uint64) -> np.ndarray:
    """Hash table slot (top bits of a multiplicative hash) of each (hi, lo) pair; uint64 arithmetic wraps."""
    x = hi * _MIX_HI
    x ^= lo
    x *= _MIX
    x >>= shift
    return x.view(np.int64)


class _Level:
    """All prefixes of one length: an open-addressing hash table of their (hi, lo) halves."""

    __slots__ = ("length", "hmask", "lmask", "shift", "smask", "t_hi", "t_lo", "t_idx", "max_probe")

    def __init__(self, length: int, values: list[int], index: list[int]):
        self.length = length
        self.hmask = np.uint64(_mask64(min(length, 64)))
        self.lmask = np.uint64(_mask64(max(length - 64, 0)))
        seen: set[int] = set()
        for v in values:
            if v in seen:
                raise ValueError(f"duplicate prefix {prefix_str(v, length)}")
            seen.add(v)
        size = 8
        while size < 4 * len(values):
            size *= 2
        bits = size.bit_length() - 1
        self.shift = np.uint64(64 - bits)
        self.smask = size - 1
        his = np.array([v >> 64 for v in values], dtype=np.uint64)
        los = np.array([v & _ALL64 for v in values], dtype=np.uint64)
        self.t_hi = np.zeros(size, dtype=np.uint64)
        self.t_lo = np.zeros(size, dtype=np.uint64)
        self.t_idx = np.full(size, -1, dtype=np.int32)
        self.max_probe = 0
        for slot, h, lo, i in zip(_slots(his, los, self.shift).tolist(), his.tolist(), los.tolist(), index):
            d = 0
            while self.t_idx[(slot + d) & self.smask] >= 0:
                d += 1
            at = (slot + d) & self.smask
            self.t_hi[at], self.t_lo[at], self.t_idx[at] = h, lo, i
            self.max_probe = max(self.max_probe, d)

    def match(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions of the matching addresses, their entry indexes)."""
        qh = hi & self.hmask
        ql = lo & self.lmask
        slot = _slots(qh, ql, self.shift)
        rows = None  # positions still searched (None: all)
        pos, idx = [], []
        for d in range(self.max_probe + 1):
            s = slot if d == 0 else (slot + d) & self.smask
            entry = self.t_idx.take(s)
            hit = (self.t_lo.take(s) == ql) & (self.t_hi.take(s) == qh) & (entry >= 0)
            h = np.flatnonzero(hit)
            pos.append(h if rows is None else rows[h])
            idx.append(entry[h])
            if d == self.max_probe:
                break
            more = np.flatnonzero((entry >= 0) & ~hit)  # another prefix in that slot: this one may come later
            if len(more) == 0:
                break  # the rest ended at an empty slot: no prefix of this length
            rows = more if rows is None else rows[more]
            slot, qh, ql = slot[more], qh[more], ql[more]
        if len(pos) == 1:
            return pos[0], idx[0]
        return np.concatenate(pos), np.concatenate(idx)


class PrefixTable:
    """Longest-prefix-match table; entry ``i`` is the ``i``-th prefix given.

    ``lookup`` returns an int32 column of entry indexes, -1 where no prefix
    matches. Duplicate prefixes are rejected (``ValueError``).
    """

    def __init__(self, prefixes: Iterable[tuple[int, int]]):
        by_len: dict[int, tuple[list[int], list[int]]] = {}
        n = 0
        for i, (value, length) in enumerate(prefixes):
            if not 0 <= length <= 128:
                raise ValueError(f"prefix length {length} out of range 0..128")
            full = (1 << 128) - 1
            mask = (full << (128 - length)) & full if length else 0
            if value & ~mask & full:
                raise ValueError(f"prefix {prefix_str(value, length)} has host bits set")
            vals, idx = by_len.setdefault(length, ([], []))
            vals.append(value)
            idx.append(i)
            n = i + 1
        self.size = n
        self._levels = [_Level(L, *by_len[L]) for L in sorted(by_len, reverse=True)]

    @classmethod
    def from_cidrs(cls, cidrs: Sequence[str]) -> PrefixTable:
        """Table from address / CIDR strings (entry ``i`` = ``cidrs[i]``)."""
        return cls(parse_prefix(c) for c in cidrs)

    @property
    def lengths(self) -> list[int]:
        """Distinct prefix lengths present (128-bit space), longest first."""
        return [lv.length for lv in self._levels]

    def __len__(self) -> int:
        return self.size

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """int32 entry index of the longest matching prefix per address, -1 when none."""
        hi, lo = addr_halves(addrs)
        n = len(hi)
        out = np.full(n, -1, dtype=np.int32)
        if not self._levels or n == 0:
            return out
        rows = None  # None = all rows still unmatched
        for level in self._levels:
            if rows is None:
                pos, idx = level.match(hi, lo)
                out[pos] = idx
                rows = np.flatnonzero(out < 0)
            else:
                if rows.size == 0:
                    break
                pos, idx = level.match(hi[rows], lo[rows])
                out[rows[pos]] = idx
                keep = np.ones(rows.size, dtype=bool)
                keep[pos] = False
                rows = rows[keep]
        return out
