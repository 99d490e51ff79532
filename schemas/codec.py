"""The batch codec: a structured array of records <-> one Avro message of columns.

Flow records and counter samples travel as *batches*: one Avro record whose
fields are arrays, one element per record (``FlowBatch``, ``CounterBatch``,
``EnrichedFlowBatch``, derived from ``flow_record.avsc`` etc.; see
:mod:`schemas.registry`). A batch is encoded and decoded a whole column at a
time (:mod:`schemas.varint`, :mod:`schemas.strings`), byte for byte what
fastavro writes; the decoder reads any valid Avro encoding of the batch
schemas and raises only ``CodecError`` on corrupt input.

The framing and schema names of :mod:`schemas.registry` are re-exported here,
so ``codec.encode_record`` / ``codec.CodecError`` etc. name the whole wire codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import NamedTuple

import numpy as np

from fabricflow.compiled import load

from .columns import dtype_for, load_avsc
from .registry import (
    BATCHES,
    HEADER_LEN,
    MAGIC,
    RECORD_SCHEMAS,
    CodecError,
    decode_record,
    derive_batch_schema,
    encode_record,
    error_reason,
    header,
    parsed,
    schema_fingerprint,
    schema_json,
    schema_of,
    write_batch_schemas,
    writer_schema,
)
from .strings import StringTable, decode_texts, encode_strings
from .varint import encode_long, encode_long_column

_compiled = load("schemas._batch_compiled")

__all__ = [  # the batch codec, and the framing and schema names of schemas.registry
    "BATCHES",
    "HEADER_LEN",
    "MAGIC",
    "RECORD_SCHEMAS",
    "CodecError",
    "Coded",
    "StringTable",
    "batch_plan",
    "batch_to_records",
    "coded_rows",
    "decode_batch",
    "decode_record",
    "derive_batch_schema",
    "encode_batch",
    "encode_record",
    "error_reason",
    "field_encodings",
    "header",
    "parsed",
    "schema_fingerprint",
    "schema_json",
    "schema_of",
    "write_batch_schemas",
]


@cache
def _plan(batch: str):
    """[(field, kind)] for a batch schema; kind in long|bool|fixed16|string|double."""
    return _plan_of(schema_json(batch), batch)


def _plan_of(schema: dict, batch: str):
    plan = []
    for f in schema["fields"]:
        it = f["type"]["items"]
        if it in ("int", "long"):
            kind = "long"
        elif it == "boolean":
            kind = "bool"
        elif it == "string":
            kind = "string"
        elif it == "double":
            kind = "double"
        elif (isinstance(it, dict) and it.get("type") == "fixed") or (isinstance(it, str) and it.endswith("Address16")):
            kind = "fixed16"
        else:
            raise TypeError(f"{batch}.{f['name']}: unsupported batch item type {it!r}")
        plan.append((f["name"], kind))
    return tuple(plan)


def _reused_long(col: np.ndarray, last: tuple[np.ndarray, bytes] | None) -> bytes | None:
    """The previous long field's bytes if ``col`` holds the same values, else None.

    Only tried after a column of wide varints (>= 3 bytes a value, e.g. times),
    which costs more to encode than to compare; the ends are compared first.
    """
    if last is None or len(last[1]) < 3 * len(col):
        return None
    prev, body = last
    same = prev.dtype == col.dtype and prev[0] == col[0] and prev[-1] == col[-1] and np.array_equal(prev, col)
    return body if same else None


Coded = Mapping[str, tuple[np.ndarray, StringTable]]  # string field -> (codes, table)


def coded_rows(coded: Coded | None, rows) -> dict | None:
    """The codes of ``rows`` (a slice, mask or indices) of every field of ``coded``."""
    if coded is None:
        return None
    return {k: (codes[rows], table) for k, (codes, table) in coded.items()}


def field_encodings(message: bytes, spans: Mapping[str, tuple[int, int]], batch: str) -> dict[str, bytes]:
    """The encoded fields of ``message`` (``spans`` from :func:`decode_batch`) that ``batch`` has too, with the
    same item type: ``encode_batch(batch, rows, verbatim=...)`` of the very rows of ``message`` copies them."""
    source = dict(_plan(schema_of(message)))
    out = {}
    for f, kind in _plan(batch):
        if source.get(f) == kind and f in spans:
            a, b = spans[f]
            out[f] = message[a:b]
    return out


def encode_batch(batch: str, arr: np.ndarray, coded: Coded | None = None, verbatim: Mapping[str, bytes] | None = None) -> bytes:
    """Encode a structured array (dtype_for(record schema)) as one Avro batch message.

    ``coded``: string field -> (codes, table) with ``arr[field]`` equal to
    ``table.strings[codes]``; those columns are encoded from the codes (same bytes).
    ``verbatim``: field -> its whole encoding (block counts, items, end) in
    another message of exactly these rows (:func:`field_encodings`), copied
    instead of encoding ``arr[field]``; the caller vouches that the values are equal.
    A long field equal to the one before it (the four times of an sFlow
    record) reuses that field's bytes.
    """
    n = len(arr)
    plan = _plan(batch)
    coded = coded or {}
    verbatim = verbatim or {}
    if any(len(codes) != n for codes, _ in coded.values()):
        raise ValueError("coded string columns must have one code per record")
    if n == 0:
        return header(batch) + b"\x00" * len(plan)
    parts = [header(batch)]
    count = encode_long(n)
    last_long = None  # (column, its bytes) of the previous long field
    for name, kind in plan:
        copied = verbatim.get(name)
        if copied is not None:
            parts.append(copied)
            last_long = None
            continue
        parts.append(count)
        if kind == "string" and name in coded:  # from the codes, without reading the column
            codes, table = coded[name]
            parts.append(table.encode(codes))
            parts.append(b"\x00")
            continue
        col = arr[name]
        if kind == "long":
            body = _reused_long(col, last_long) or encode_long_column(col)
            last_long = (col, body)
            parts.append(body)
        elif kind == "bool":
            parts.append(col.astype(np.uint8).tobytes())
        elif kind == "fixed16":
            parts.append(np.ascontiguousarray(col, dtype=np.uint8).tobytes())
        elif kind == "double":
            parts.append(col.astype("<f8").tobytes())
        else:
            parts.append(encode_strings(col))
        parts.append(b"\x00")
    return b"".join(parts)


def decode_batch(message: bytes, expect: str | None = None, spans: dict | None = None) -> np.ndarray:
    """Decode a batch message into a structured array of the record dtype.

    Accepts any valid Avro encoding of the batch schema (several blocks per
    array, negative block counts with sizes), not only what we write, and
    batches written with an earlier compatible schema version (fields added
    since take their defaults). ``spans``: a dict to receive field -> (start,
    end) of its whole encoding in ``message``. The column walk is compiled
    (:mod:`schemas._batch_compiled`); it raises only ``CodecError`` on corrupt
    input, with the text the readable reference (``schemas.reference.batch``) gives.
    """
    name = schema_of(message)
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    lay = _layout(name, bytes(message[2:HEADER_LEN]))
    buf = np.frombuffer(message, dtype=np.uint8)
    err = np.zeros(4, dtype=np.int64)
    n = _compiled.rows(buf, HEADER_LEN, lay.kinds[0], err) if len(lay.kinds) else 0
    if n < 0:
        raise _error(err, lay.plan)
    # np.zeros, not np.empty: numpy fills the object fields of an empty structured array one by one (~20x slower)
    out = np.zeros(n, dtype=lay.dtype)
    where = np.empty((len(lay.kinds), 2), dtype=np.int64)
    nstr = len(lay.strings)
    toffs = np.empty((nstr, n + 1), dtype=np.int32)
    text = np.empty(len(buf) if nstr else 0, dtype=np.uint8)
    tspans = np.empty((nstr, 2), dtype=np.int64)
    if _compiled.walk(buf, HEADER_LEN, lay.kinds, lay.offs, lay.widths, out, where, toffs, text, tspans, err) < 0:
        raise _error(err, lay.plan)
    for slot, fname in lay.strings:
        a, b = tspans[slot].tolist()
        out[fname] = decode_texts(text[a:b], toffs[slot], n)
    if n and lay.defaults:  # fields added since an earlier writer: their schema defaults
        for fname, default in lay.defaults:
            out[fname] = default
    if spans is not None:
        for (fname, _kind), (a, b) in zip(lay.plan, where.tolist()):
            spans[fname] = (a, b)
    return out


def _error(err: np.ndarray, plan: tuple) -> CodecError:
    code, field, a, b = err.view(np.uint64).tolist()  # a and b are counts: unsigned (a block count can be 2**63)
    return CodecError(_compiled.ERRORS[code].format(f=plan[field][0] if plan else "", a=a, b=b))


class _Layout(NamedTuple):
    """How the compiled walk decodes one writer's batches into the current record dtype."""

    plan: tuple  # the writer's (field, kind)
    kinds: np.ndarray
    offs: np.ndarray
    widths: np.ndarray
    strings: tuple  # (string slot, field) of the string fields the dtype has
    dtype: np.dtype
    defaults: tuple  # (field, default) of the dtype's fields the writer did not have


_LAYOUTS: dict[bytes, _Layout] = {}


def _layout(name: str, fp: bytes) -> _Layout:
    """The layout of batches with schema fingerprint ``fp`` (``name``'s current version or an earlier one)."""
    lay = _LAYOUTS.get(fp)
    if lay is None:
        old = writer_schema(MAGIC + fp)
        plan = _plan(name) if old is None else _plan_of(old, name)
        dtype = dtype_for(BATCHES[name])
        kinds, offs, widths = _compiled.layout(plan, dtype)
        strings = tuple((int(o), f) for (f, k), o in zip(plan, offs) if k == "string" and o >= 0)
        given = {f for f, _k in plan}
        defaults = []
        for fname, default in _defaults(name).items():
            if fname not in given:
                if isinstance(default, str) and dtype[fname].kind != "O":  # fixed: JSON code points
                    default = np.frombuffer(default.encode("latin-1"), dtype=np.uint8)
                defaults.append((fname, default))
        lay = _LAYOUTS[fp] = _Layout(plan, kinds, offs, widths, strings, dtype, tuple(defaults))
    return lay


def batch_plan(message: bytes) -> tuple[str, tuple, tuple]:
    """(batch name, the writer's (field, kind) plan, (field, default) of the fields added since that writer)
    of a batch message; for decoders other than :func:`decode_batch` (the readable reference)."""
    name = schema_of(message)
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    lay = _layout(name, bytes(message[2:HEADER_LEN]))
    return name, lay.plan, lay.defaults


@cache
def _defaults(batch: str) -> dict:
    """Field -> Avro default of the batch's current record schema (fields with one)."""
    return {f["name"]: f["default"] for f in load_avsc(BATCHES[batch])["fields"] if "default" in f}


def batch_to_records(arr: np.ndarray) -> list[dict]:
    """Per-record dicts (tests, tools and --stdout only: never on a hot path)."""
    names = arr.dtype.names
    rows = []
    for r in arr:
        d = {}
        for k in names:
            v = r[k]
            d[k] = bytes(bytearray(v)) if getattr(v, "shape", ()) == (16,) else v.item() if hasattr(v, "item") else v
        rows.append(d)
    return rows
