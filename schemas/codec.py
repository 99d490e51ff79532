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
import pyarrow as pa

from fabricflow.compiled import load

from .columns import dtype_for, load_avsc
from .registry import (
    BATCHES,
    CODED_BATCHES,
    HEADER_LEN,
    LABEL_FIELDS,
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
    "CODED_BATCHES",
    "CodedBatch",
    "HEADER_LEN",
    "LABEL_FIELDS",
    "MAGIC",
    "RECORD_SCHEMAS",
    "CodecError",
    "Coded",
    "StringTable",
    "batch_plan",
    "batch_to_records",
    "coded_rows",
    "decode_batch",
    "decode_coded",
    "encode_coded",
    "decode_record",
    "derive_batch_schema",
    "encode_batch",
    "encode_record",
    "error_reason",
    "field_encodings",
    "header",
    "parsed",
    "record_of",
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
    coded = coded or {}
    if any(len(codes) != n for codes, _ in coded.values()):
        raise ValueError("coded string columns must have one code per record")
    return b"".join(_encode_fields([header(batch)], _plan(batch), arr, n, coded, verbatim or {}, {}))


def _encode_fields(parts: list, plan, arr, n: int, coded: Coded, verbatim: Mapping[str, bytes],
                   columns: Mapping[str, np.ndarray]) -> list:
    """``parts`` with the encodings of the fields of ``plan`` appended (see :func:`encode_batch`); ``columns``:
    field -> the column to encode instead of ``arr[field]``."""
    if n == 0:
        parts.append(b"\x00" * len(plan))
        return parts
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
        col = columns[name] if name in columns else arr[name]
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
    return parts


def decode_batch(message: bytes, expect: str | None = None, spans: dict | None = None) -> np.ndarray:
    """Decode a batch message into a structured array of the record dtype.

    Accepts any valid Avro encoding of the batch schema (several blocks per
    array, negative block counts with sizes), not only what we write, and
    batches written with an earlier compatible schema version (fields added
    since take their defaults). ``spans``: a dict to receive field -> (start,
    end) of its whole encoding in ``message``. The column walk is compiled
    (:mod:`schemas._batch_compiled`); it raises only ``CodecError`` on corrupt
    input, with the text the readable reference (``schemas.reference.batch``) gives.

    A dictionary-coded message (``flow_enriched_batch_v2``) decodes to the records of the batch it codes
    (``flow_enriched`` rows, label strings gathered from its table); ``expect`` names either form, and either
    form is accepted for it. Hot paths read coded messages with :func:`decode_coded` instead.
    """
    name = schema_of(message)
    if expect is not None and name != expect and CODED_BATCHES.get(name, name) != CODED_BATCHES.get(expect, expect):
        raise CodecError(f"expected {expect}, got {name}")
    if name in CODED_BATCHES:
        return decode_coded(message, spans=spans).to_array()
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    lay = _layout(name, bytes(message[2:HEADER_LEN]))
    out, where, text, toffs, tspans = _walk(message, lay, HEADER_LEN)
    n = len(out)
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


def _walk(message: bytes, lay: _Layout, pos: int):
    """(rows, field spans, text, text offsets, text spans) of the compiled walk over the fields of ``lay`` from ``pos``."""
    buf = np.frombuffer(message, dtype=np.uint8)
    err = np.zeros(4, dtype=np.int64)
    n = _compiled.rows(buf, pos, lay.kinds[0], err) if len(lay.kinds) else 0
    if n < 0:
        raise _error(err, lay.plan)
    # np.zeros, not np.empty: numpy fills the object fields of an empty structured array one by one (~20x slower)
    out = np.zeros(n, dtype=lay.dtype)
    where = np.empty((len(lay.kinds), 2), dtype=np.int64)
    nstr = len(lay.strings)
    toffs = np.empty((nstr, n + 1), dtype=np.int32)
    text = np.empty(len(buf) if nstr else 0, dtype=np.uint8)
    tspans = np.empty((nstr, 2), dtype=np.int64)
    if _compiled.walk(buf, pos, lay.kinds, lay.offs, lay.widths, out, where, toffs, text, tspans, err) < 0:
        raise _error(err, lay.plan)
    return out, where, text, toffs, tspans


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
        dtype = dtype_for(BATCHES[name]) if name in BATCHES else CODED_DTYPE
        if name in CODED_BATCHES:  # the labels table is read before the walk
            plan = plan[1:]
        kinds, offs, widths = _compiled.layout(plan, dtype)
        strings = tuple((int(o), f) for (f, k), o in zip(plan, offs) if k == "string" and o >= 0)
        given = {f for f, _k in plan}
        defaults = []
        for fname, default in (_defaults(name) if name in BATCHES else {}).items():
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


# --------------------------------------------------------------------------- dictionary-coded batches (v2)

_ENRICHED_DTYPE = dtype_for(BATCHES["flow_enriched_batch"])
#: Rows of a ``flow_enriched_batch_v2`` message: the ``flow_enriched`` fields, label fields as int32 codes.
CODED_DTYPE = np.dtype([(f, np.int32 if f in LABEL_FIELDS else _ENRICHED_DTYPE[f]) for f in _ENRICHED_DTYPE.names])
_FLOW_FIELDS = [f for f in _ENRICHED_DTYPE.names if f not in LABEL_FIELDS]


def _label_block() -> int | None:
    """Byte offset of the label codes in a ``CODED_DTYPE`` row when they are consecutive int32 fields (one
    (rows, fields) view checks them all with two reductions), else None."""
    offs = [CODED_DTYPE.fields[f][1] for f in LABEL_FIELDS]
    return offs[0] if offs == list(range(offs[0], offs[0] + 4 * len(offs), 4)) else None


_LABEL_OFFSET = _label_block()


def record_of(batch: str) -> str:
    """The per-record schema of a batch schema, dictionary-coded or not (``flow_enriched_batch_v2`` ->
    ``flow_enriched``)."""
    return BATCHES[CODED_BATCHES.get(batch, batch)]


class CodedBatch:
    """Decoded ``flow_enriched_batch_v2`` rows: the rows with label codes, and the message's label table.

    Reads like a ``flow_enriched`` array where the archive and the summaries read one: ``len``,
    ``batch["field"]`` (a label column is gathered from the table: no new string objects), and a slice,
    mask or index array gives those rows with the same table. :meth:`dictionary` gives a label column as an
    Arrow dictionary (no string per row); :meth:`to_array` the ``flow_enriched`` structured array.
    """

    __slots__ = ("rows", "labels", "_label_array")
    dtype = _ENRICHED_DTYPE

    def __init__(self, rows: np.ndarray, labels: np.ndarray, label_array: pa.Array | None = None):
        self.rows = rows  # CODED_DTYPE
        self.labels = labels  # object array of str: the label table
        self._label_array = label_array  # the table as Arrow strings, made once (label_array)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.labels.take(self.rows[key]) if key in LABEL_FIELDS else self.rows[key]
        return CodedBatch(self.rows[key], self.labels, self._label_array)

    def column(self, field: str) -> np.ndarray:
        """A label column as an object array (one gather: the strings are the table's)."""
        return self.labels.take(self.rows[field])

    def dictionary(self, field: str) -> pa.DictionaryArray:
        """A label column as an Arrow dictionary array of its codes over the label table."""
        return pa.DictionaryArray.from_arrays(pa.array(self.rows[field]), self.label_array())

    def label_array(self) -> pa.Array:
        """The label table as an Arrow string array (converted once per table)."""
        if self._label_array is None:
            self._label_array = pa.array(self.labels, type=pa.string(), from_pandas=False)
        return self._label_array

    def to_array(self) -> np.ndarray:
        """The ``flow_enriched`` structured array of these rows."""
        out = np.zeros(len(self.rows), dtype=_ENRICHED_DTYPE)
        out[_FLOW_FIELDS] = self.rows[_FLOW_FIELDS]
        for f in LABEL_FIELDS:
            out[f] = self.labels.take(self.rows[f])
        return out

    @classmethod
    def from_array(cls, arr: np.ndarray) -> CodedBatch:
        """The coded form of ``flow_enriched`` rows (codes made from the strings: for v1 messages and tools)."""
        labels, codes = _message_labels(arr, None)
        rows = np.zeros(len(arr), dtype=CODED_DTYPE)
        rows[_FLOW_FIELDS] = arr[_FLOW_FIELDS]
        for f, c in codes.items():
            rows[f] = c
        return cls(rows, labels)


class _Strings(NamedTuple):  # a label table given as its strings (StringTable's ``strings``)
    strings: np.ndarray


def _message_labels(arr, coded: Coded | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the distinct label strings of the rows, field -> codes into them) for every field of
    :data:`LABEL_FIELDS`. ``coded``: field -> (codes, table) as the enricher gathered them (tables shared by
    several fields, e.g. the node table of src_node and dst_node); other fields are coded from their strings.
    Only the strings some row uses go into the message, each once."""
    coded = dict(coded or {})
    for f in LABEL_FIELDS:
        if f not in coded:
            d = pa.array([_label_text(x) for x in arr[f].tolist()], pa.string()).dictionary_encode()
            coded[f] = (d.indices.to_numpy(zero_copy_only=False), _Strings(d.dictionary.to_numpy(zero_copy_only=False)))
    by_table: dict[int, tuple[np.ndarray, list[str]]] = {}
    for f in LABEL_FIELDS:
        strings = coded[f][1].strings
        by_table.setdefault(id(strings), (strings, []))[1].append(f)
    labels: list[str] = []
    index: dict[str, int] = {}
    out = {}
    for strings, fields in by_table.values():
        used = np.zeros(len(strings), dtype=bool)
        for f in fields:
            used[coded[f][0]] = True
        idx = np.flatnonzero(used)
        remap = np.zeros(len(strings), dtype=np.int32)
        mapped = []
        for v in strings.take(idx).tolist():
            v = _label_text(v)
            j = index.get(v)
            if j is None:
                j = index[v] = len(labels)
                labels.append(v)
            mapped.append(j)
        remap[idx] = mapped
        for f in fields:
            out[f] = remap.take(coded[f][0])
    table = np.empty(len(labels), dtype=object)
    table[:] = labels
    return table, out


def _label_text(x) -> str:
    return "" if x is None else x if isinstance(x, str) else str(x)


def encode_coded(batch: str, arr, coded: Coded | None = None, verbatim: Mapping[str, bytes] | None = None) -> bytes:
    """Encode ``flow_enriched`` rows (a structured array or ``LabeledFlows``) as one dictionary-coded message
    of ``batch`` (``flow_enriched_batch_v2``): the label table of the strings the rows use, then every field,
    label fields as codes. ``coded`` and ``verbatim`` as for :func:`encode_batch` (with ``coded``, no label
    column is read)."""
    n = len(arr)
    if coded is not None and any(len(codes) != n for codes, _ in coded.values()):
        raise ValueError("coded string columns must have one code per record")
    labels, codes = _message_labels(arr, coded)
    parts = [header(batch)]
    if len(labels):
        parts += [encode_long(len(labels)), encode_strings(labels)]
    parts.append(b"\x00")
    return b"".join(_encode_fields(parts, _plan(batch)[1:], arr, n, {}, verbatim or {}, codes))


def _read_labels(m: bytes, pos: int) -> tuple[np.ndarray, int]:
    """The ``labels`` array at ``pos`` (any valid Avro blocking) and the position after it (the compiled
    walk's ``strings``: no Python work per label but its string object)."""
    err = np.zeros(4, dtype=np.int64)
    out = _compiled.strings(np.frombuffer(m, dtype=np.uint8), pos, err)
    if out is None:
        raise _error(err, (("labels", "string"),))
    return out


def decode_coded(message: bytes, spans: dict | None = None) -> CodedBatch:
    """A ``flow_enriched_batch_v2`` message as rows with label codes and its label table, without a string
    object per row; a ``flow_enriched_batch`` (v1) message is coded from its strings. Raises only
    ``CodecError`` (label codes outside the table included). ``spans`` as for :func:`decode_batch`."""
    name = schema_of(message)
    if name == "flow_enriched_batch":
        return CodedBatch.from_array(decode_batch(message, spans=spans))
    if name not in CODED_BATCHES:
        raise CodecError(f"expected flow_enriched_batch_v2, got {name}")
    m = bytes(message)
    labels, pos = _read_labels(m, HEADER_LEN)
    lay = _layout(name, m[2:HEADER_LEN])
    rows, where, *_ = _walk(m, lay, pos)
    if len(rows):
        if _LABEL_OFFSET is not None:  # every code at once; the field is named below only for a bad message
            block = np.ndarray((len(rows), len(LABEL_FIELDS)), np.int32, buffer=rows, offset=_LABEL_OFFSET,
                               strides=(rows.strides[0], 4))
            ok = int(block.min()) >= 0 and int(block.max()) < len(labels)
        else:
            ok = False
        for f in () if ok else LABEL_FIELDS:
            c = rows[f]
            if int(c.min()) < 0 or int(c.max()) >= len(labels):
                raise CodecError(f"{f}: label code outside the {len(labels)} labels")
    if spans is not None:
        spans["labels"] = (HEADER_LEN, pos)
        for (fname, _kind), (a, b) in zip(lay.plan, where.tolist()):
            spans[fname] = (a, b)
    return CodedBatch(rows, labels)
