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

import numpy as np

from fabricflow.compiled import load

from .columns import dtype_for, empty_flows, load_avsc
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
from .strings import StringTable, decode_strings, encode_strings
from .varint import Message, decode_varints, encode_long, encode_long_column, read_long

__all__ = [  # the batch codec, and the framing and schema names of schemas.registry
    "BATCHES",
    "HEADER_LEN",
    "MAGIC",
    "RECORD_SCHEMAS",
    "CodecError",
    "Coded",
    "StringTable",
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


def decode_batch(message: bytes, expect: str | None = None, spans: dict | None = None,
                 jit: bool | None = None) -> np.ndarray:
    """Decode a batch message into a structured array of the record dtype.

    Accepts any valid Avro encoding of the batch schema (several blocks per
    array, negative block counts with sizes), not only what we write.
    ``spans``: a dict to receive field -> (start, end) of its whole encoding in ``message``.
    ``jit``: batches without strings in the current schema version go through the numba walk
    (:mod:`schemas._batch_jit`) when numba is installed (default); False: the numpy walk, the reference.
    Both give the same rows; anything the numba walk does not accept is the numpy walk's to decode or reject.
    """
    name = schema_of(message)
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    old = writer_schema(message)  # an earlier compatible version of the batch's record schema
    if old is None and jit is not False:
        out = _decode_jit(name, message, spans)
        if out is not None:
            return out
    plan = _plan(name) if old is None else _old_plan(name, bytes(message[2:HEADER_LEN]), old)
    m = Message(message)
    mv = memoryview(message)
    buf = m.buf
    size = len(buf)
    pos = HEADER_LEN
    cols: dict[str, np.ndarray] = {}
    n_expected: int | None = None
    last_long = (0, 0, None)  # (start, end, values) of the previous long block
    for fname, kind in plan:
        chunks = []
        total = 0
        fstart = pos
        while True:
            cnt, pos = read_long(mv, pos)
            if cnt == 0:
                break
            if cnt < 0:
                cnt = -cnt
                _, pos = read_long(mv, pos)  # block size in bytes, not needed
            if cnt > size:
                raise CodecError(f"{fname}: block count {cnt} larger than the message")
            if kind == "long":
                start, end, prev = last_long
                if prev is not None and len(prev) == cnt and message[pos : pos + end - start] == message[start:end]:
                    vals, pos = prev, pos + end - start  # the same bytes as the block before (sFlow's four times)
                else:
                    begin = pos
                    vals, pos = decode_varints(m, pos, cnt)
                    last_long = (begin, pos, vals)
            elif kind == "bool":
                if pos + cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + cnt] != 0
                pos += cnt
            elif kind == "fixed16":
                if pos + 16 * cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + 16 * cnt].reshape(cnt, 16)
                pos += 16 * cnt
            elif kind == "double":
                if pos + 8 * cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = np.frombuffer(message, dtype="<f8", count=cnt, offset=pos)
                pos += 8 * cnt
            else:
                vals, pos = decode_strings(m, pos, cnt, fname)
            chunks.append(vals)
            total += cnt
        if n_expected is None:
            n_expected = total
        elif total != n_expected:
            raise CodecError(f"{fname}: {total} elements, expected {n_expected}")
        cols[fname] = np.concatenate(chunks) if len(chunks) > 1 else (chunks[0] if chunks else None)
        if spans is not None:
            spans[fname] = (fstart, pos)
    if pos != size:
        raise CodecError(f"{size - pos} trailing bytes")
    # np.zeros, not np.empty: numpy fills the object fields of an empty structured array one by one (~20x slower)
    out = np.zeros(n_expected or 0, dtype=dtype_for(BATCHES[name]))
    if n_expected:
        for fname, col in cols.items():
            if fname in out.dtype.names:
                out[fname] = col
        if old is not None:  # fields added since that writer: their schema defaults
            for fname, default in _defaults(name).items():
                if fname not in cols:
                    if isinstance(default, str) and out.dtype[fname].kind != "O":  # fixed: JSON code points
                        default = np.frombuffer(default.encode("latin-1"), dtype=np.uint8)
                    out[fname] = default
    return out


@cache
def _jit_layout(name: str):
    """(the compiled walk's module, kinds, offsets, widths, dtype) for batch ``name``; None: numpy walk only."""
    compiled = load("schemas._batch_compiled")
    dtype = dtype_for(BATCHES[name])
    lay = compiled.layout(_plan(name), dtype)
    return None if lay is None or not len(lay[0]) else (compiled, *lay, dtype)


def _decode_jit(name: str, message: bytes, spans: dict | None) -> np.ndarray | None:
    """The rows of ``message`` by the numba walk, or None when the numpy walk must decode (or reject) it."""
    lay = _jit_layout(name)
    if lay is None:
        return None
    jit, kinds, offs, widths, dtype = lay
    buf = np.frombuffer(message, dtype=np.uint8)
    n = jit.rows(buf, HEADER_LEN, kinds[0])
    if n < 0:
        return None
    out = np.zeros(n, dtype=dtype)
    where = np.zeros((len(kinds), 2), dtype=np.int64)
    if jit.walk(buf, HEADER_LEN, kinds, offs, widths, out.view(np.uint8), dtype.itemsize, n, where) < 0:
        return None
    if spans is not None:
        for (fname, _k), (a, b) in zip(_plan(name), where.tolist()):
            spans[fname] = (a, b)
    return out


def warm_up() -> None:
    """Compile (or load from numba's cache) the numba walk now, not on the first batch a service decodes."""
    decode_batch(encode_batch("flow_batch", empty_flows(2)))


_OLD_PLANS: dict[bytes, tuple] = {}


def _old_plan(name: str, fp: bytes, writer) -> tuple:
    plan = _OLD_PLANS.get(fp)
    if plan is None:
        plan = _OLD_PLANS[fp] = _plan_of(writer, name)
    return plan


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
