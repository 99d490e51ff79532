"""Columnar group-by: rows grouped by key columns, reductions per group, no Python per row.

- :class:`GroupBy`: groups by integer, boolean, string or address-code key
  columns, sorted by key values; sums, counts, min / max and top rows per group.
  Integer keys of moderate range are combined into one int64 sort key; wider
  ones are sorted with ``np.lexsort``. :func:`group_reduce` is its sums and
  maxima in the form the window aggregators keep; :func:`reduce_runs` the same
  for rows already in key order.
- :class:`DenseGroups` / :func:`min_max_by`: groups by one small integer key
  through ``bincount`` / ``ufunc.at`` tables, no sort.
- :func:`factorize` / :func:`factorize_interned`: string columns as integer
  codes in sorted-value order.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import pyarrow as pa

__all__ = [
    "DenseGroups",
    "GroupBy",
    "combined_key",
    "factorize",
    "factorize_interned",
    "group_reduce",
    "lut_limit",
    "min_max_by",
    "reduce_runs",
]

_I64_MAX, _I64_MIN = int(np.iinfo(np.int64).max), int(np.iinfo(np.int64).min)


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
    dense = codes.dtype.kind in "iu" and 0 <= codes.min() and codes.max() < lut_limit(len(codes))
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


def lut_limit(n: int) -> int:
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
        if size > lut_limit(len(key)):
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
        comb = combined_key(codes)
        if comb is not None:  # one int64 key in the order of the columns: one sort key instead of several
            codes = [comb]
        if desc is None and comb is not None:
            order = np.argsort(comb, kind="stable")
        else:
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


def group_reduce(
    keys: list[np.ndarray],
    sums: list[np.ndarray] = (),
    maxes: list[np.ndarray] = (),
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Group rows by key columns; per group, its keys and the sum / max of each value column.

    Groups are sorted by the key columns (first column most significant), which makes every result
    deterministic. :class:`GroupBy` with its reductions, in the three lists the window aggregators keep.
    """
    n = len(keys[0]) if keys else 0
    if n == 0:
        return (
            [np.zeros(0, dtype=k.dtype) for k in keys],
            [np.zeros(0, dtype=v.dtype) for v in sums],
            [np.zeros(0, dtype=v.dtype) for v in maxes],
        )
    g = GroupBy(*keys)
    return [k[g.first] for k in keys], [g.sum(v) for v in sums], [g.max(v) for v in maxes]


def reduce_runs(
    keys: list[np.ndarray],
    sums: list[np.ndarray] = (),
    maxes: list[np.ndarray] = (),
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """``group_reduce`` for rows already sorted by the key columns (first most significant): no sort, the
    groups are the runs of equal keys."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return group_reduce(keys, sums, maxes)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    ukeys = [k[starts] for k in keys]
    return ukeys, [np.add.reduceat(v, starts) for v in sums], [np.maximum.reduceat(v, starts) for v in maxes]


_COMBINED_LIMIT = 2**62


def combined_key(keys: list[np.ndarray]) -> np.ndarray | None:
    """One non-negative int64 per row ordered like the key columns (first most significant), or None.

    Mixed radix over each column's value range; when the product would overflow, the key so far is first
    replaced by its dense rank (``np.unique`` inverse, order-preserving); None when even that overflows
    (the caller then uses ``np.lexsort``).
    """
    comb = None
    span = 1
    for k in keys:
        k = np.asarray(k)
        if k.dtype.kind not in "iub":
            return None
        lo, hi = int(k.min()), int(k.max())
        r = hi - lo + 1
        if r >= _COMBINED_LIMIT or hi >= 2**63:
            return None
        part = k.astype(np.int64) - lo if lo else k.astype(np.int64)
        if comb is None:
            comb, span = part, r
            continue
        if span * r >= _COMBINED_LIMIT:
            u, inv = np.unique(comb, return_inverse=True)
            comb, span = inv.reshape(-1).astype(np.int64), len(u)
            if span * r >= _COMBINED_LIMIT:
                return None
        comb = comb * r + part
        span *= r
    return comb
