"""String <-> int32 code tables for the detectors' label columns.

:class:`Interner` gives every distinct string a code that never changes, so
window states hold codes and the table goes into the snapshot.
:class:`RowInterner` codes columns whose rows repeat with one lookup per row.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Interner", "RowInterner"]


class Interner:
    """Stable string <-> int32 code table (labels are low-cardinality by design).

    Codes never change once given, so window states can hold codes and the table
    is part of the snapshot.
    """

    def __init__(self, strings: list[str] | None = None):
        self.strings: list[str] = []
        self.index: dict[str, int] = {}
        for s in strings or ():
            self.code(s)

    def code(self, s: str) -> int:
        c = self.index.get(s)
        if c is None:
            c = len(self.strings)
            self.strings.append(s)
            self.index[s] = c
        return c

    def known(self, strings) -> list[int]:
        """Codes of those of ``strings`` that have one (a string never interned can match no row)."""
        index = self.index
        return [index[s] for s in strings if s in index]

    def codes(self, *columns: np.ndarray) -> list[np.ndarray]:
        """Vectorised: code arrays (int32) for object string columns (one hash pass)."""
        if not columns:
            return []
        n = len(columns[0])
        if n == 0:
            return [np.zeros(0, dtype=np.int32) for _ in columns]
        # Fast path: every value already has a code. ``map`` over the dict's C ``__getitem__`` runs no Python
        # code per value (~30 ns per string vs ~70 ns through Arrow); a new string or a None falls back below.
        get = self.index.__getitem__
        try:
            return [np.fromiter(map(get, c), dtype=np.int32, count=n) for c in columns]
        except (KeyError, TypeError):
            pass
        allc = np.concatenate([np.asarray(c, dtype=object) for c in columns])
        arr = pa.array(allc, type=pa.string(), from_pandas=True)
        if arr.null_count:
            arr = pc.fill_null(arr, "")
        enc = arr.dictionary_encode()
        idx = enc.indices.to_numpy(zero_copy_only=False)
        lut = np.fromiter((self.code(s) for s in enc.dictionary.to_pylist()), dtype=np.int32)
        glob = lut[idx]
        return [glob[i * n : (i + 1) * n] for i in range(len(columns))]

    def lookup(self, codes: np.ndarray) -> np.ndarray:
        """Object array of strings for a code array."""
        table = np.array(self.strings, dtype=object)
        return table[np.asarray(codes, dtype=np.int64)]


class RowInterner:
    """``Interner.codes`` for columns whose rows repeat: one dict lookup per row instead of one per value.

    Remembers every distinct row (the tuple of its values) under a row id, with the interner codes of its
    values, so a known row costs one lookup of its tuple. The rows not seen before go through
    ``interner.codes`` (new strings only occur in them, so new codes come in the same order as for the
    whole batch) and are remembered. The memory is dropped once it holds ``limit`` rows; codes never depend
    on it (row ids do: use them only within one batch).
    """

    def __init__(self, interner: Interner, limit: int = 1 << 18):
        self.interner = interner
        self.limit = limit
        self._reset(0)

    def _reset(self, width: int) -> None:
        self.rows: dict[tuple, int] = {}  # row values -> row id
        self.size = 0  # row ids in use
        self.table = np.zeros((width, 64), dtype=np.int32)  # [column, row id] -> interner code (spare capacity)

    def codes(self, *columns: np.ndarray) -> list[np.ndarray]:
        """Code arrays (int32), equal to ``interner.codes(*columns)``."""
        if not columns or len(columns[0]) == 0:
            return self.interner.codes(*columns)
        return self.columns(self.ids(*columns))

    def columns(self, ids: np.ndarray) -> list[np.ndarray]:
        """Per column, the codes of the rows ``ids`` (from the last ``ids`` call)."""
        return list(np.take(self.table, ids, axis=1))

    def ids(self, *columns: np.ndarray) -> np.ndarray:
        """Row id (int32) of each row of the (non-empty) columns; equal ids have equal codes."""
        n = len(columns[0])
        if len(columns) != len(self.table) or self.size >= self.limit:  # another set of columns, or full
            self._reset(len(columns))
        values = [c.tolist() for c in columns]
        try:
            ids = np.fromiter(map(self.rows.get, zip(*values), repeat(-1)), dtype=np.int32, count=n)
        except TypeError:  # an unhashable value (the interner decides whether that is an error): not remembered
            return self._append(np.stack(self.interner.codes(*columns)))
        new = np.flatnonzero(ids < 0)
        if len(new):
            ids[new] = self._learn([c[new] for c in columns])
        return ids

    def _learn(self, columns: list[np.ndarray]) -> np.ndarray:
        """Remember the rows of ``columns`` (none of them known yet); their row ids."""
        codes = np.stack(self.interner.codes(*columns))
        rows = list(zip(*(c.tolist() for c in columns)))
        at = dict(zip(rows, range(len(rows))))  # distinct row -> a position holding it
        new = dict(zip(at, self._append(codes[:, list(at.values())]).tolist()))
        self.rows.update(new)
        return np.fromiter(map(new.__getitem__, rows), dtype=np.int32, count=len(rows))

    def _append(self, codes: np.ndarray) -> np.ndarray:
        """New row ids for the columns of ``codes`` ([column, row])."""
        base, m = self.size, codes.shape[1]
        if base + m > self.table.shape[1]:
            grown = np.zeros((len(self.table), 2 * (base + m)), dtype=np.int32)
            grown[:, :base] = self.table[:, :base]
            self.table = grown
        self.table[:, base : base + m] = codes
        self.size = base + m
        return np.arange(base, base + m, dtype=np.int32)
