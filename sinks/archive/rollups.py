"""Rollups: one file's rows aggregated per minute and per hour (pure, columnar; no I/O).

The archive writer (:class:`sinks.archive.parquet.ParquetWriter`) writes, for every file of ``flows_enriched``
and ``counters_raw``, the rollups of that same file under the same file name in the derived datasets
(``traffic_1m`` / ``traffic_1h``, ``ports_1m`` / ``ports_1h``; ``fabricflow.streams.DERIVED``), so a
retry or a replay overwrites a rollup exactly as it overwrites the raw file, and summing rollup rows
over files gives the raw totals (exact integer sums). ``traffic_*``: per bucket and node / group /
rack / job / category / protocol / ``duplicate`` key, the sums of bytes, packets and flow records;
``ports_*``: per bucket, exporter and ifIndex, the first and last counters and speed / oper-down
figures. The columns: docs/archive.md, "Rollups".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from processors.logic.windows.groupby import GroupBy, combined_key
from sinks.archive import layout
from sinks.archive.arrow_schema import addr_text_array

_S = pa.string()
TRAFFIC_KEYS = ("bucket_ms", "src_node", "dst_node", "src_ip", "dst_ip", "src_group", "dst_group", "src_rack",
                "dst_rack", "src_job", "dst_job", "category", "export_protocol", "duplicate")
TRAFFIC_SUMS = ("bytes_est", "packets_est", "bytes", "packets", "flow_records")
TRAFFIC_SCHEMA = pa.schema(
    [pa.field("bucket_ms", pa.int64(), nullable=False, metadata={"doc": "bucket start (unix ms, UTC)"})]
    + [pa.field(n, _S, nullable=False) for n in TRAFFIC_KEYS[1:12]]
    + [pa.field("export_protocol", pa.int32(), nullable=False), pa.field("duplicate", pa.bool_(), nullable=False)]
    + [pa.field(n, pa.int64(), nullable=False) for n in TRAFFIC_SUMS],
    metadata={"fabricflow.rollup": "traffic"},
)

PORT_COUNTERS = ("in_octets", "out_octets", "in_ucast_pkts", "out_ucast_pkts", "in_errors", "out_errors",
                 "in_discards", "out_discards")
PORTS_SCHEMA = pa.schema(
    [pa.field("bucket_ms", pa.int64(), nullable=False), pa.field("exporter", _S, nullable=False),
     pa.field("if_index", pa.int64(), nullable=False), pa.field("samples", pa.int64(), nullable=False),
     pa.field("first_time_ms", pa.int64(), nullable=False), pa.field("last_time_ms", pa.int64(), nullable=False)]
    + [pa.field(f"first_{c}", pa.int64(), nullable=False) for c in PORT_COUNTERS]
    + [pa.field(f"last_{c}", pa.int64(), nullable=False) for c in PORT_COUNTERS]
    + [pa.field("min_if_speed", pa.int64(), nullable=False), pa.field("max_if_speed", pa.int64(), nullable=False),
       pa.field("oper_down_samples", pa.int64(), nullable=False)],
    metadata={"fabricflow.rollup": "ports"},
)

_KIND = {"flows_enriched": "traffic", "counters_raw": "ports"}


def schema(dataset: str) -> pa.Schema:
    """Arrow schema of a rollup dataset."""
    s = layout.spec(dataset)
    if s.derived_from is None:
        raise KeyError(f"{dataset!r} is not a rollup dataset")
    return TRAFFIC_SCHEMA if _KIND[s.derived_from] == "traffic" else PORTS_SCHEMA


def _bucket(ms: pa.ChunkedArray | pa.Array, bucket_ms: int) -> pa.Array:
    return pc.multiply(pc.divide(ms, pa.scalar(bucket_ms, pa.int64())), pa.scalar(bucket_ms, pa.int64()))


def _text(col) -> pa.Array:
    """Text of a binary(16) address column with nulls (''), formatting only its distinct values."""
    if len(col) == 0:
        return pa.array([], _S)
    return pc.fill_null(addr_text_array(col).cast(_S), "")


def _single(col) -> pa.Array:
    return (col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()) if isinstance(col, pa.ChunkedArray) else col


def _distinct_dictionary(col: pa.Array) -> bool:
    """``col`` is a dictionary array without nulls whose dictionary values are distinct (the archive's label
    columns: :func:`sinks.archive.arrow_schema.label_dictionary`)."""
    return (pa.types.is_dictionary(col.type) and col.null_count == 0
            and pc.count_distinct(col.dictionary).as_py() == len(col.dictionary))


def encode_column(col) -> pa.DictionaryArray:
    """Dictionary encoding of a column (nulls get an entry of their own), codes in order of first appearance.

    A dictionary column with distinct values is re-coded from its integer codes (no string hashed per row):
    the same codes and dictionary as encoding its strings."""
    col = _single(col)
    if pa.types.is_dictionary(col.type):
        if _distinct_dictionary(col):
            first = pc.dictionary_encode(col.indices)
            return pa.DictionaryArray.from_arrays(first.indices, col.dictionary.take(first.dictionary))
        col = col.cast(col.type.value_type)
    return pc.dictionary_encode(col, null_encoding="encode")


def _is_empty(col) -> pa.Array:
    """Boolean mask: the string (or string dictionary) column is ``""`` there."""
    col = _single(col)
    if pa.types.is_dictionary(col.type):
        return pc.equal(col.dictionary, "").take(col.indices)
    return pc.equal(col, "")


def _codes(enc: pa.DictionaryArray) -> np.ndarray:
    """Dense int64 codes of an encoded column."""
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _pick(enc: pa.DictionaryArray, rows: np.ndarray) -> pa.Array:
    """Values of ``rows``, gathered from the (small) dictionary rather than from the column."""
    return enc.dictionary.take(pa.array(enc.indices.to_numpy(zero_copy_only=False)[rows]))


def _key(codes: list[np.ndarray]) -> np.ndarray:
    """One int64 per row, equal for two rows iff every code is, ordered like the codes (first most significant)."""
    n = len(codes[0]) if codes else 0
    key = combined_key(codes) if n else np.zeros(n, np.int64)
    return key if key is not None else GroupBy(*codes).gid


def traffic(table: pa.Table, bucket_ms: int, coarser_ms: tuple[int, ...] = ()) -> list[pa.Table]:
    """Traffic rollups of a ``flows_enriched`` table (any rows) into buckets of ``bucket_ms`` and of each of
    ``coarser_ms`` (multiples of it), finest first.

    Columnar and sort-based: every key column becomes dense codes (one hash pass each), the codes one int64
    key (mixed radix), rows are ordered by key once and summed with ``np.add.reduceat`` (exact int64); the
    key columns are taken from one row of each group. Coarser rollups regroup the finer one's rows.
    """
    n = table.num_rows
    src_node, dst_node = table.column("src_node"), table.column("dst_node")
    dup = table.column("duplicate")
    keys = {
        "src_node": src_node, "dst_node": dst_node,
        # the address only for a side without an inventory node (bounded by the outside addresses seen)
        "src_a": pc.if_else(_is_empty(src_node), table.column("src_addr"), None),
        "dst_a": pc.if_else(_is_empty(dst_node), table.column("dst_addr"), None),
        **{k: table.column(k) for k in TRAFFIC_KEYS[5:12]},
        "export_protocol": table.column("export_protocol"),
        "duplicate": pc.fill_null(dup, False) if dup.null_count else dup,
    }
    time_ms = table.column(layout.spec("flows_enriched").time_column).to_numpy().astype(np.int64, copy=False)
    sums = {k: table.column(k).to_numpy().astype(np.int64, copy=False) for k in TRAFFIC_SUMS[:4]}
    sums["flow_records"] = np.ones(n, np.int64)
    keys = {k: encode_column(c) for k, c in keys.items()}
    rest = _key([_codes(c) for c in keys.values()])  # every key but the time bucket
    out = []
    rows = None  # representative input row of each group of the current (coarsest so far) rollup
    for b in (bucket_ms, *coarser_ms):
        if rows is None:
            g = GroupBy(time_ms // b, rest)
            agg = {k: g.sum(v) for k, v in sums.items()}
            rows = g.first
        else:
            g = GroupBy(time_ms[rows] // b, rest[rows])
            agg = {k: g.sum(v) for k, v in agg.items()}
            rows = rows[g.first]
        cols = {"bucket_ms": pa.array(time_ms[rows] // b * b, pa.int64())}
        for k in ("src_node", "dst_node", *TRAFFIC_KEYS[5:]):
            cols[k] = _pick(keys[k], rows)
        cols["src_ip"], cols["dst_ip"] = _text(_pick(keys["src_a"], rows)), _text(_pick(keys["dst_a"], rows))
        cols.update({k: pa.array(v, pa.int64()) for k, v in agg.items()})
        out.append(pa.table({f.name: cols[f.name] for f in TRAFFIC_SCHEMA}).cast(TRAFFIC_SCHEMA))
    return out


def ports(table: pa.Table, bucket_ms: int) -> pa.Table:
    """Port rollup of a ``counters_raw`` table into buckets of ``bucket_ms``."""
    tcol = layout.spec("counters_raw").time_column
    t = pa.table({
        "bucket_ms": _bucket(table.column(tcol), bucket_ms),
        "exporter_addr": table.column("exporter_addr"),
        "if_index": table.column("if_index"),
        "time": table.column(tcol),
        **{c: table.column(c) for c in PORT_COUNTERS},
        "if_speed": table.column("if_speed"),
        "down": pc.cast(pc.invert(table.column("if_oper_up")), pa.int64()),
    })
    # stable order by time so "first"/"last" (input order, one thread) are the earliest/latest sample
    t = t.take(pc.sort_indices(t, [("time", "ascending")]))
    keys = ["bucket_ms", "exporter_addr", "if_index"]
    aggs = [("time", "count"), ("time", "min"), ("time", "max")]
    aggs += [(c, "first") for c in PORT_COUNTERS] + [(c, "last") for c in PORT_COUNTERS]
    aggs += [("if_speed", "min"), ("if_speed", "max"), ("down", "sum")]
    g = t.group_by(keys, use_threads=False).aggregate(aggs)
    cols = {"bucket_ms": g.column("bucket_ms"), "exporter": _text(g.column("exporter_addr")),
            "if_index": g.column("if_index"), "samples": g.column("time_count"),
            "first_time_ms": g.column("time_min"), "last_time_ms": g.column("time_max"),
            **{f"first_{c}": g.column(f"{c}_first") for c in PORT_COUNTERS},
            **{f"last_{c}": g.column(f"{c}_last") for c in PORT_COUNTERS},
            "min_if_speed": g.column("if_speed_min"), "max_if_speed": g.column("if_speed_max"),
            "oper_down_samples": g.column("down_sum")}
    out = pa.table({f.name: cols[f.name] for f in PORTS_SCHEMA}).cast(PORTS_SCHEMA)
    return out.sort_by([("bucket_ms", "ascending"), ("exporter", "ascending"), ("if_index", "ascending")])


def derive(dataset: str, table: pa.Table) -> dict[str, pa.Table]:
    """Every rollup of one file of ``dataset`` (``{}`` when nothing derives from it): rollup dataset -> rows."""
    specs = layout.derived_of(dataset)
    if not specs:
        return {}
    out: dict[str, pa.Table] = {}
    if _KIND[dataset] == "traffic":
        specs = sorted(specs, key=lambda s: s.bucket_ms)  # each coarser rollup from the finer one: fewer rows
        for s, t in zip(specs, traffic(table, specs[0].bucket_ms, tuple(s.bucket_ms for s in specs[1:]))):
            out[s.name] = t
    else:
        for s in specs:
            out[s.name] = ports(table, s.bucket_ms)
    return out


def _regroup_traffic(t: pa.Table) -> pa.Table:
    """Traffic rollup rows (any files, any buckets) summed per key: exact, sort-based like :func:`traffic`."""
    if t.num_rows == 0:
        return TRAFFIC_SCHEMA.empty_table()
    enc = {k: encode_column(t.column(k)) for k in TRAFFIC_KEYS}
    g = GroupBy(*[_codes(e) for e in enc.values()])
    sums = {k: g.sum(t.column(k).to_numpy().astype(np.int64, copy=False)) for k in TRAFFIC_SUMS}
    rows = g.first
    cols = {k: _pick(e, rows) for k, e in enc.items()}
    cols.update({k: pa.array(v, pa.int64()) for k, v in sums.items()})
    return pa.table({f.name: cols[f.name] for f in TRAFFIC_SCHEMA}).cast(TRAFFIC_SCHEMA)


def _regroup_ports(t: pa.Table) -> pa.Table:
    """Port rollup rows summed per (bucket, exporter, ifIndex): first/last counters of the earliest/latest sample."""
    if t.num_rows == 0:
        return PORTS_SCHEMA.empty_table()
    keys = ["bucket_ms", "exporter", "if_index"]
    a = t.take(pc.sort_indices(t, [("first_time_ms", "ascending")])).group_by(keys, use_threads=False).aggregate(
        [("samples", "sum"), ("first_time_ms", "min"), ("min_if_speed", "min"), ("max_if_speed", "max"),
         ("oper_down_samples", "sum")] + [(f"first_{c}", "first") for c in PORT_COUNTERS])
    b = t.take(pc.sort_indices(t, [("last_time_ms", "ascending")])).group_by(keys, use_threads=False).aggregate(
        [("last_time_ms", "max")] + [(f"last_{c}", "last") for c in PORT_COUNTERS])
    j = a.join(b, keys)
    ren = {"samples_sum": "samples", "first_time_ms_min": "first_time_ms", "last_time_ms_max": "last_time_ms",
           "min_if_speed_min": "min_if_speed", "max_if_speed_max": "max_if_speed",
           "oper_down_samples_sum": "oper_down_samples"}
    for c in PORT_COUNTERS:
        ren[f"first_{c}_first"], ren[f"last_{c}_last"] = f"first_{c}", f"last_{c}"
    j = j.rename_columns([ren.get(c, c) for c in j.column_names])
    out = j.select(PORTS_SCHEMA.names).cast(PORTS_SCHEMA)
    return out.sort_by([("bucket_ms", "ascending"), ("exporter", "ascending"), ("if_index", "ascending")])


def merge(dataset: str, tables: list[pa.Table]) -> pa.Table:
    """Rows of several files of rollup ``dataset`` as one file's rows (what they sum to; exact)."""
    sch = schema(dataset)
    t = pa.concat_tables([x.select(sch.names).cast(sch) for x in tables]) if tables else sch.empty_table()
    t = t.combine_chunks()
    return _regroup_traffic(t) if sch is TRAFFIC_SCHEMA else _regroup_ports(t)
