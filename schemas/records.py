"""Many Avro single-object messages of one flat record schema at once (detector outputs).

``encode_records(name, records)`` is ``[encode_record(name, r) for r in records]``,
byte for byte, computed column by column: each field becomes a byte stream plus
the length of every record's piece of it, the pieces are scattered to their
places in one buffer and the buffer is cut per record. An optional ``["null", T]``
field (default null) counts as flat while every record leaves it null. Schemas that are not
flat, short lists and records with a value of an unexpected type go through
``encode_record`` (fastavro), so behaviour, errors included, stays the same.
Why, and what it costs: docs/schemas.md#many-flat-records-at-once-detector-outputs.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa

from .registry import encode_record, header, schema_json
from .strings import utf8_buffers
from .varint import varint_bytes, varint_widths, zigzag

__all__ = ["encode_records", "flat_plan"]

MIN_RECORDS = 100  # below this, per-record fastavro is faster (docs/schemas.md, "Many flat records at once")


_REQUIRED = object()  # a field without a default


@cache
def flat_plan(name: str) -> tuple | None:
    """((field, kind, symbols, default), ...) of a flat record schema; None when a field is not flat.

    ``default``: the schema's default of the field (written when a record leaves the field out, as fastavro
    does), else ``_REQUIRED``.
    """
    plan = []
    for f in schema_json(name)["fields"]:
        t = f["type"]
        default = f.get("default", _REQUIRED)
        if t in ("long", "int"):
            plan.append((f["name"], "long", None, default))
        elif t in ("double", "boolean", "string"):
            plan.append((f["name"], t, None, default))
        elif isinstance(t, dict) and t.get("type") == "enum":
            plan.append((f["name"], "enum", {s: i for i, s in enumerate(t["symbols"])}, default))
        elif isinstance(t, list) and t and t[0] == "null" and default is None:
            plan.append((f["name"], "null", None, default))  # an optional nested value: fast while it is null
        else:
            return None
    return tuple(plan)


def encode_records(name: str, records: list[dict]) -> list[bytes]:
    """``[encode_record(name, r) for r in records]``, vectorised for flat schemas."""
    plan = flat_plan(name)
    if plan is None or len(records) < MIN_RECORDS:
        return [encode_record(name, r) for r in records]
    try:
        parts = [p for field, kind, symbols, default in plan
                 for p in _parts(_column(records, field, default), kind, symbols)]
    except (KeyError, TypeError, ValueError, OverflowError, pa.ArrowException):
        return [encode_record(name, r) for r in records]  # an odd value: fastavro decides (as before)
    return _assemble(header(name), len(records), parts)


def _column(records: list[dict], field: str, default) -> list:
    """The field's values (its default where a record leaves it out; KeyError when it has none)."""
    if default is _REQUIRED:
        return [r[field] for r in records]
    return [r.get(field, default) for r in records]


def _parts(values: list, kind: str, symbols: dict | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(bytes of the column as uint8, byte length of each record's piece)] for one field."""
    n = len(values)
    if kind == "long":
        if not all(type(v) is int for v in values):  # bool, float, None ...: not what fastavro writes as is
            raise TypeError("not int")
        return [_varints(zigzag(np.array(values, dtype=np.int64)))]
    if kind == "enum":
        return [_varints(zigzag(np.array([symbols[v] for v in values], dtype=np.int64)))]
    if kind == "null":
        if any(v is not None for v in values):  # a value in the union's other branch: fastavro writes these records
            raise TypeError("not null")
        return [(np.zeros(n, dtype=np.uint8), np.ones(n, dtype=np.int64))]  # union branch 0 (null): one byte 0
    if kind == "double":
        if not all(isinstance(v, float) or type(v) is int for v in values):
            raise TypeError("not a number")
        return [(np.array(values, dtype="<f8").view(np.uint8), np.full(n, 8, dtype=np.int64))]
    if kind == "boolean":
        if not all(type(v) is bool for v in values):
            raise TypeError("not bool")
        return [(np.array(values, dtype=np.uint8), np.ones(n, dtype=np.int64))]
    arr = pa.array(values, type=pa.string())  # raises for non-str values
    if arr.null_count:
        raise TypeError("None in a string field")
    offs, data = utf8_buffers(arr)
    lens = np.diff(offs)
    return [_varints((lens << 1).view(np.uint64)), (data, lens)]


def _varints(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(concatenated varints of a non-empty uint64 column, width of each)."""
    umax = int(u.max())
    return np.frombuffer(varint_bytes(u, None, umax), dtype=np.uint8), varint_widths(u, umax)


def _assemble(head: bytes, n: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
    """Messages ``head + part pieces in order`` for n records."""
    h = len(head)
    row_len = h + sum(lens for _s, lens in parts)
    row_end = np.cumsum(row_len)
    row_start = row_end - row_len
    out = np.empty(int(row_end[-1]), dtype=np.uint8)
    out[(row_start[:, None] + np.arange(h)).ravel()] = np.tile(np.frombuffer(head, dtype=np.uint8), n)
    cursor = row_start + h
    for stream, lens in parts:
        src_start = np.cumsum(lens) - lens
        out[np.repeat(cursor - src_start, lens) + np.arange(len(stream))] = stream
        cursor += lens
    buf = out.tobytes()
    return [buf[a:b] for a, b in zip(row_start.tolist(), row_end.tolist())]
