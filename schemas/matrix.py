"""``matrix.windows.v2``: the cells of one traffic-matrix window, level and shard as one columnar message.

A :class:`MatrixWindow` holds the window, the level, the shard (and part), a sorted table of the names
its cells use, int32 codes into it for src, dst and category, and one int64 column per value of a
``matrix_cell`` (:data:`VALUE_FIELDS`). :func:`encode_window` writes it as one Avro single-object message of
``matrix_window_v2.avsc`` (byte for byte what fastavro writes, a column at a time);
:func:`decode_window` reads any valid Avro encoding of it with the compiled column walk and raises only
:class:`CodecError`. :func:`decode_cells` reads either form (v2, or a v1 ``matrix_cell``) as cell dicts, for
tools and tests (never a hot path). docs/schemas.md, "matrix.windows.v2", shows how to read it with plain
fastavro.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from fabricflow.compiled import load

from .columns import load_avsc
from .registry import HEADER_LEN, CodecError, decode_record, header, schema_of
from .strings import encode_strings
from .varint import encode_long, encode_long_column, read_long

__all__ = ["SCHEMA", "LEVELS", "VALUE_FIELDS", "MatrixWindow", "encode_window", "decode_window", "decode_cells",
           "is_window"]

SCHEMA = "matrix_window_v2"
V1_SCHEMA = "matrix_cell"
_AVSC = load_avsc(SCHEMA)
LEVELS: tuple[str, ...] = tuple(next(f["type"]["symbols"] for f in _AVSC["fields"] if f["name"] == "level"))
_CODE_FIELDS = ("src", "dst", "category")
#: The value columns, in schema order (those of ``matrix_cell`` after its names).
VALUE_FIELDS: tuple[str, ...] = tuple(f["name"] for f in _AVSC["fields"][9:])
_ROW_DTYPE = np.dtype([(f, np.int32) for f in _CODE_FIELDS] + [(f, np.int64) for f in VALUE_FIELDS])
_PLAN = tuple((f, "long") for f in (*_CODE_FIELDS, *VALUE_FIELDS))
_compiled = load("schemas._batch_compiled")


class MatrixWindow:
    """The cells of one window, level and shard (and part), columnar: see the module docstring.

    ``labels``: object array of the sorted distinct names; ``src``/``dst``/``category``: int32 codes into it;
    ``values``: field -> int64 column, for every field of :data:`VALUE_FIELDS`.
    """

    __slots__ = ("window_start_ms", "window_end_ms", "level", "shard", "part", "labels", "src", "dst", "category",
                 "values")

    def __init__(self, window_start_ms: int, window_end_ms: int, level: str, shard: int, labels, src, dst, category,
                 values: dict[str, np.ndarray], part: int = 0):
        self.window_start_ms, self.window_end_ms = int(window_start_ms), int(window_end_ms)
        self.level, self.shard, self.part = level, int(shard), int(part)
        self.labels = labels if isinstance(labels, np.ndarray) else _objects(labels)
        self.src, self.dst, self.category = src, dst, category
        self.values = values

    def __len__(self) -> int:
        return len(self.src)

    def __eq__(self, other) -> bool:
        return isinstance(other, MatrixWindow) and self.to_record() == other.to_record()

    def __repr__(self) -> str:
        return (f"MatrixWindow({self.window_start_ms}, {self.level!r}, shard={self.shard}, part={self.part}, "
                f"{len(self)} cells)")

    def key(self) -> str:
        """The Kafka key of its message: window start, level, shard (and part when split)."""
        k = f"{self.window_start_ms}|{self.level}|{self.shard}"
        return f"{k}|{self.part}" if self.part else k

    def names(self, field: str) -> np.ndarray:
        """A name column (src, dst or category) as an object array (one gather from the table)."""
        return self.labels.take(getattr(self, field))

    def to_record(self) -> dict:
        """The message's Avro record as a dict of plain lists (tests, tools, ``replay --report``)."""
        return {"window_start_ms": self.window_start_ms, "window_end_ms": self.window_end_ms, "level": self.level,
                "shard": self.shard, "part": self.part, "labels": self.labels.tolist(),
                **{f: getattr(self, f).tolist() for f in _CODE_FIELDS},
                **{f: self.values[f].tolist() for f in VALUE_FIELDS}}

    def cells(self) -> list[dict]:
        """The v1 ``matrix_cell`` dicts of its cells, in order (tools and tests only: a dict per cell)."""
        names = {f: self.names(f).tolist() for f in _CODE_FIELDS}
        vals = {f: self.values[f].tolist() for f in VALUE_FIELDS}
        head = {"window_start_ms": self.window_start_ms, "window_end_ms": self.window_end_ms, "level": self.level}
        return [{**head, "src": names["src"][i], "dst": names["dst"][i], "category": names["category"][i],
                 **{f: vals[f][i] for f in VALUE_FIELDS}} for i in range(len(self))]

    @classmethod
    def from_cells(cls, cells: list[dict], shard: int = 0, part: int = 0) -> MatrixWindow:
        """The window of v1 cell dicts of one window and level (tests and tools; values missing -> 0)."""
        if not cells:
            raise ValueError("from_cells needs at least one cell (its window and level)")
        c0 = cells[0]
        labels = sorted({c[f] for c in cells for f in _CODE_FIELDS})
        pos = {x: i for i, x in enumerate(labels)}
        codes = {f: np.array([pos[c[f]] for c in cells], dtype=np.int32) for f in _CODE_FIELDS}
        values = {f: np.array([c.get(f, 0) for c in cells], dtype=np.int64) for f in VALUE_FIELDS}
        return cls(c0["window_start_ms"], c0["window_end_ms"], c0["level"], shard, labels, codes["src"], codes["dst"],
                   codes["category"], values, part)


def _objects(items) -> np.ndarray:
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a


def encode_window(w: MatrixWindow) -> bytes:
    """One ``matrix_window_v2`` single-object message (what ``fastavro.schemaless_writer`` writes, with the header)."""
    n = len(w)
    parts = [header(SCHEMA), encode_long(w.window_start_ms), encode_long(w.window_end_ms),
             encode_long(LEVELS.index(w.level)), encode_long(w.shard), encode_long(w.part)]
    if len(w.labels):
        parts += [encode_long(len(w.labels)), encode_strings(w.labels)]
    parts.append(b"\x00")
    if n == 0:
        parts.append(b"\x00" * len(_PLAN))
        return b"".join(parts)
    count = encode_long(n)
    for f in _CODE_FIELDS:
        parts += [count, encode_long_column(np.asarray(getattr(w, f))), b"\x00"]
    for f in VALUE_FIELDS:
        parts += [count, encode_long_column(np.asarray(w.values[f])), b"\x00"]
    return b"".join(parts)


@cache
def _layout():
    kinds, offs, widths = _compiled.layout(_PLAN, _ROW_DTYPE)
    return kinds, offs, widths


def is_window(message: bytes) -> bool:
    """Whether ``message`` is a ``matrix_window_v2`` message (False for v1 cells; CodecError when neither)."""
    return schema_of(message) == SCHEMA


def decode_window(message: bytes) -> MatrixWindow:
    """A ``matrix_window_v2`` message; raises only :class:`CodecError` (wrong schema, corrupt or truncated
    bytes, columns of different lengths, codes outside the label table, an unknown level, trailing bytes)."""
    name = schema_of(message)
    if name != SCHEMA:
        raise CodecError(f"expected {SCHEMA}, got {name}")
    m = bytes(message)
    ws, pos = read_long(m, HEADER_LEN, "window_start_ms")
    we, pos = read_long(m, pos, "window_end_ms")
    lv, pos = read_long(m, pos, "level")
    if not 0 <= lv < len(LEVELS):
        raise CodecError(f"level: enum index {lv} outside {len(LEVELS)} symbols")
    shard, pos = read_long(m, pos, "shard")
    part, pos = read_long(m, pos, "part")
    buf = np.frombuffer(m, dtype=np.uint8)
    err = np.zeros(4, dtype=np.int64)
    got = _compiled.strings(buf, pos, err)
    if got is None:
        raise _error(err, (("labels", "string"),))
    labels, pos = got
    kinds, offs, widths = _layout()
    n = _compiled.rows(buf, pos, kinds[0], err)
    if n < 0:
        raise _error(err, _PLAN)
    rows = np.zeros(n, dtype=_ROW_DTYPE)
    where = np.empty((len(kinds), 2), dtype=np.int64)
    if _compiled.walk(buf, pos, kinds, offs, widths, rows, where, np.empty((0, n + 1), np.int32),
                      np.empty(0, np.uint8), np.empty((0, 2), np.int64), err) < 0:
        raise _error(err, _PLAN)
    if int(where[-1, 1]) != len(m):
        raise CodecError(f"corrupt {SCHEMA} message: {len(m) - int(where[-1, 1])} bytes after the last field")
    if n:
        for f in _CODE_FIELDS:
            c = rows[f]
            if int(c.min()) < 0 or int(c.max()) >= len(labels):
                raise CodecError(f"{f}: label code outside the {len(labels)} labels")
    values = {f: np.ascontiguousarray(rows[f]) for f in VALUE_FIELDS}
    return MatrixWindow(ws, we, LEVELS[lv], shard, labels, np.ascontiguousarray(rows["src"]),
                        np.ascontiguousarray(rows["dst"]), np.ascontiguousarray(rows["category"]), values, part)


def _error(err: np.ndarray, plan: tuple) -> CodecError:
    code, field, a, b = err.view(np.uint64).tolist()
    return CodecError(_compiled.ERRORS[code].format(f=plan[field][0] if plan else "", a=a, b=b))


def decode_cells(message: bytes) -> list[dict]:
    """The cells of a ``matrix.windows`` message of either version as v1 ``matrix_cell`` dicts (tools, tests)."""
    if schema_of(message) == SCHEMA:
        return decode_window(message).cells()
    return [decode_record(message, expect=V1_SCHEMA)]
