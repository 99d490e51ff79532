"""Arrow schemas derived from the Avro schemas, and Arrow tables built from our columns.

The ``.avsc`` files stay the one source of truth: every Avro field becomes one Arrow field of the
same name and order; a schema with 16-byte address fields also gets a dictionary-encoded text column
per address (``src_addr -> src_ip``...). Type mapping and column names: docs/archive.md.
No I/O here beyond reading the ``.avsc`` files through :mod:`schemas.columns`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.columns import addr_strs, load_avsc
from schemas.registry import LABEL_FIELDS

_PRIMITIVE = {
    "int": pa.int32(),
    "long": pa.int64(),
    "boolean": pa.bool_(),
    "double": pa.float64(),
    "float": pa.float32(),
    "string": pa.string(),
    "bytes": pa.binary(),
}

#: Derived text column name for each address field.
ADDRESS_TEXT_NAMES = {"exporter_addr": "exporter", "src_addr": "src_ip", "dst_addr": "dst_ip", "next_hop": "next_hop_ip",
                      "bgp_next_hop": "bgp_next_hop_ip"}
#: Arrow type of the derived text columns.
TEXT_ADDR_TYPE = pa.dictionary(pa.int32(), pa.string())
ADDR_TYPE = pa.binary(16)


def text_name(address_field: str) -> str:
    """Name of the derived text column for an address field."""
    return ADDRESS_TEXT_NAMES.get(address_field, f"{address_field}_text")


def _qualify(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _arrow_type(t, named: dict, namespace: str | None) -> tuple[pa.DataType, bool]:
    """(arrow type, nullable) for one Avro type; registers named types in ``named``."""
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        if len(non_null) != 1:
            raise TypeError(f"only [null, T] unions are supported, got {t!r}")
        at, _ = _arrow_type(non_null[0], named, namespace)
        return at, "null" in t
    if isinstance(t, str):
        if t in _PRIMITIVE:
            return _PRIMITIVE[t], False
        for key in (_qualify(t, namespace), t):
            if key in named:
                return named[key], False
        raise TypeError(f"unknown Avro type reference {t!r}")
    if not isinstance(t, dict):
        raise TypeError(f"bad Avro type {t!r}")
    kind = t.get("type")
    ns = t.get("namespace", namespace)
    if kind in _PRIMITIVE:
        return _PRIMITIVE[kind], False
    if kind == "fixed":
        at = pa.binary(int(t["size"]))
    elif kind == "enum":
        at = pa.string()
    elif kind == "array":
        item, item_null = _arrow_type(t["items"], named, ns)
        at = pa.list_(pa.field("item", item, nullable=item_null))
    elif kind == "map":
        val, _ = _arrow_type(t["values"], named, ns)
        at = pa.map_(pa.string(), val)
    elif kind == "record":
        fields = []
        for f in t["fields"]:
            ft, fnull = _arrow_type(f["type"], named, ns)
            fields.append(pa.field(f["name"], ft, nullable=fnull))
        at = pa.struct(fields)
    else:
        raise TypeError(f"no Arrow mapping for Avro type {t!r}")
    if "name" in t:
        named[_qualify(t["name"], ns)] = at
        named[t["name"]] = at
    return at, False


def _avsc(avsc: str | Mapping) -> dict:
    if isinstance(avsc, Mapping):
        return dict(avsc)
    return load_avsc(avsc)


def address_fields(avsc: str | Mapping) -> list[str]:
    """Names of the 16-byte address fields of a schema."""
    schema = arrow_schema(avsc, text_addresses=False)
    return [f.name for f in schema if f.type == ADDR_TYPE]


def _build_schema(avsc: Mapping, text_addresses: bool) -> pa.Schema:
    named: dict = {}
    ns = avsc.get("namespace")
    fields = []
    for f in avsc["fields"]:
        at, nullable = _arrow_type(f["type"], named, ns)
        meta = {"doc": f["doc"]} if f.get("doc") else None
        fields.append(pa.field(f["name"], at, nullable=nullable, metadata=meta))
    if text_addresses:
        for f in list(fields):
            if f.type == ADDR_TYPE:
                fields.append(
                    pa.field(text_name(f.name), TEXT_ADDR_TYPE, nullable=False,
                             metadata={"doc": f"text form of {f.name} (derived)"})
                )
    meta = {"avro_record": f"{ns}.{avsc['name']}" if ns else avsc["name"]}
    return pa.schema(fields, metadata=meta)


@cache
def _cached_schema(name: str, text_addresses: bool) -> pa.Schema:
    return _build_schema(_avsc(name), text_addresses)


def arrow_schema(avsc: str | Mapping, *, text_addresses: bool = True) -> pa.Schema:
    """Arrow schema for ``schemas/avro/<avsc>.avsc`` (or a parsed schema dict).

    With ``text_addresses`` (default) the derived address text columns are appended.
    """
    if isinstance(avsc, Mapping):
        return _build_schema(avsc, text_addresses)
    return _cached_schema(avsc, text_addresses)


# ----------------------------------------------------------------------------- addresses


def addr_text_array(addrs: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """Text form of a binary(16) address column, dictionary-encoded.

    Hashes the column once (C++), formats only the distinct addresses in Python.
    """
    if isinstance(addrs, pa.ChunkedArray):
        addrs = addrs.combine_chunks() if addrs.num_chunks != 1 else addrs.chunk(0)
    enc = pc.dictionary_encode(addrs)
    texts = pa.array(addr_strs(enc.dictionary.to_pylist()), type=pa.string())
    return pa.DictionaryArray.from_arrays(enc.indices, texts)


def addr_array(col: np.ndarray) -> pa.FixedSizeBinaryArray:
    """binary(16) Arrow array over an (n, 16) uint8 column (one copy at most)."""
    c = np.ascontiguousarray(col, dtype=np.uint8)
    if c.ndim != 2 or c.shape[1] != 16:
        raise ValueError(f"address column must have shape (n, 16), got {c.shape}")
    return pa.FixedSizeBinaryArray.from_buffers(ADDR_TYPE, c.shape[0], [None, pa.py_buffer(c)])


# ----------------------------------------------------------------------------- tables


def _add_text_columns(arrays: dict, schema: pa.Schema) -> None:
    for f in schema:
        if f.type == ADDR_TYPE:
            tn = text_name(f.name)
            if schema.get_field_index(tn) >= 0:
                arrays[tn] = addr_text_array(arrays[f.name])


_SCATTER_ROWS = 4096  # rows per block when splitting structured arrays into columns (~1 MB: stays in cache)


def table_from_parts(parts: list, avsc: str | Mapping, *, text_addresses: bool = True) -> pa.Table:
    """:func:`table_from_columns` of the concatenation of structured arrays (one dtype), without an
    intermediate structured array: rows are scattered into contiguous columns block by block, each
    block once while it is in cache (faster than one strided pass over everything per column).

    Parts may instead all be decoded ``flows.enriched.v2`` rows (``schemas.codec.CodedBatch``): each label
    column is then a dictionary column straight from the codes (:func:`label_dictionary`: the parts' label tables
    made distinct once, the codes re-pointed with one numpy gather; no string per row anywhere).
    """
    coded = hasattr(parts[0], "labels")
    rows = [p.rows for p in parts] if coded else parts
    dt = rows[0].dtype
    n = sum(len(p) for p in rows)
    cols = {name: np.empty((n, *dt[name].shape), dtype=dt[name].base) for name in dt.names}
    base = {}  # label field -> code offset of each part's table in the concatenated tables
    if coded:
        offsets = np.cumsum([0] + [len(p.labels) for p in parts[:-1]])
        base = {f: offsets for f in LABEL_FIELDS if f in cols}
        for f in base:
            cols[f] = np.empty(n, dtype=np.int64)
    a = 0
    for i, p in enumerate(rows):
        for s in range(0, len(p), _SCATTER_ROWS):
            blk = p[s:s + _SCATTER_ROWS]
            b = a + len(blk)
            for name, out in cols.items():
                out[a:b] = blk[name]
                if name in base:
                    out[a:b] += base[name][i]
            a = b
    if coded:
        labels = pc.dictionary_encode(pa.array(np.concatenate([p.labels for p in parts]), type=pa.string(),
                                               from_pandas=False))
        unique = labels.indices.to_numpy(zero_copy_only=False)  # concatenated code -> code of its distinct string
        for f in base:
            cols[f] = label_dictionary(unique[cols[f]], labels.dictionary)
    return table_from_columns(cols, avsc, text_addresses=text_addresses)


def label_dictionary(codes: np.ndarray, values: pa.Array) -> pa.DictionaryArray:
    """A label column as an Arrow dictionary of the distinct ``values`` it uses (``values`` distinct; ``codes``
    index them): written to Parquet as is, its dictionary becomes the column chunk's dictionary page (no string
    per row is made or hashed); readers get the same strings as from a plain string column."""
    used = np.bincount(codes, minlength=len(values)) > 0 if len(codes) else np.zeros(len(values), bool)
    keep = np.flatnonzero(used)
    remap = np.cumsum(used, dtype=np.int32) - 1
    return pa.DictionaryArray.from_arrays(pa.array(remap[codes], pa.int32()), values.take(pa.array(keep)))


def table_from_columns(columns, avsc: str | Mapping, *, text_addresses: bool = True) -> pa.Table:
    """Arrow table from a numpy structured array (``schemas.columns.dtype_for(avsc)``)
    or a mapping of column name -> 1-D array ((n, 16) uint8 for addresses).

    Numeric columns are wrapped with at most one contiguous copy; ``object``
    string columns are converted by Arrow in C; an Arrow dictionary of strings given for a string field
    stays a dictionary (the table's field then has that type). Missing fields raise KeyError.
    """
    schema = arrow_schema(avsc, text_addresses=text_addresses)
    names = columns.dtype.names if isinstance(columns, np.ndarray) else list(columns)
    arrays: dict = {}
    for f in schema:
        if f.type == TEXT_ADDR_TYPE and f.name not in names:
            continue  # derived below
        if f.name not in names:
            raise KeyError(f"column {f.name!r} of {schema.metadata[b'avro_record'].decode()} is missing")
        col = columns[f.name]
        if isinstance(col, (pa.Array, pa.ChunkedArray)):
            arrays[f.name] = col if col.type == f.type or _dictionary_of(col.type, f.type) else col.cast(f.type)
        elif f.type == ADDR_TYPE:
            arrays[f.name] = addr_array(col)
        elif pa.types.is_string(f.type):
            arrays[f.name] = pa.array(np.asarray(col, dtype=object), type=pa.string(), from_pandas=False)
        elif pa.types.is_primitive(f.type):
            c = np.ascontiguousarray(col, dtype=f.type.to_pandas_dtype())
            arrays[f.name] = pa.array(c, type=f.type)
        else:
            arrays[f.name] = pa.array(list(col), type=f.type)
    if text_addresses:
        _add_text_columns(arrays, schema)
    fields = [f if arrays[f.name].type == f.type else f.with_type(arrays[f.name].type) for f in schema]
    return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=pa.schema(fields, metadata=schema.metadata))


def _dictionary_of(t: pa.DataType, value_type: pa.DataType) -> bool:
    """``t`` is a dictionary of ``value_type`` strings (kept as given: the file stores it as a dictionary column)."""
    return pa.types.is_string(value_type) and pa.types.is_dictionary(t) and t.value_type == value_type


def table_from_dicts(rows: Iterable[Mapping], avsc: str | Mapping, *, text_addresses: bool = True) -> pa.Table:
    """Arrow table from Avro-shaped dicts (detector outputs: low volume).

    Every Avro field without a default must be present in every row (KeyError
    otherwise; a field with a default takes it where a row leaves it out, as an
    Avro reader would); addresses as 16-byte ``bytes``; enums as their symbol
    string; maps as dicts.
    """
    schema = arrow_schema(avsc, text_addresses=text_addresses)
    defaults = {f["name"]: f["default"] for f in _avsc(avsc)["fields"] if "default" in f}
    rows = list(rows)
    base = [f for f in schema if not (f.type == TEXT_ADDR_TYPE and text_addresses)]
    for i, r in enumerate(rows):
        missing = [f.name for f in base if f.name not in r and f.name not in defaults]
        if missing:
            raise KeyError(f"row {i} lacks field(s) {missing}")
    arrays: dict = {}
    for f in base:
        if f.name in defaults:  # a default of null (an optional record) is a default too
            d = defaults[f.name]
            values = [r.get(f.name, d) for r in rows]
        else:
            values = [r[f.name] for r in rows]
        if not f.nullable and any(v is None for v in values):
            raise ValueError(f"field {f.name!r} is not nullable")
        if pa.types.is_map(f.type):
            values = [list(v.items()) if isinstance(v, Mapping) else v for v in values]
        arrays[f.name] = pa.array(values, type=f.type)
    if text_addresses:
        _add_text_columns(arrays, schema)
    return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)


def conform(table: pa.Table, avsc: str | Mapping, *, text_addresses: bool = True) -> pa.Table:
    """``table`` with exactly the columns of ``arrow_schema(avsc, text_addresses=...)``: derived text
    columns added if missing (or left out with ``text_addresses=False``)."""
    schema = arrow_schema(avsc, text_addresses=text_addresses)
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    arrays = {n: table.column(n) for n in table.column_names}
    if text_addresses:
        _add_text_columns(arrays, schema)
    out = []
    for f in schema:
        if f.name not in arrays:
            raise KeyError(f"column {f.name!r} is missing")
        c = arrays[f.name]
        out.append(c if c.type == f.type else c.cast(f.type))
    return pa.Table.from_arrays(out, schema=schema)
