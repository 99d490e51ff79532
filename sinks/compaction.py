"""Compaction of rollup files: the many files of one hour and Kafka partition merged into one.

The writer derives one rollup file from every raw file (``sinks.rollups``), so
an hour of a busy partition has as many ``traffic_1h`` files as raw files
(hundreds at 200k records/s with 1M-row files), each with most of the hour's
keys: the hourly rollup would be hardly smaller than the per-minute one. A
compaction merges them::

    traffic_1h/dt=.../hour=HH/part-p003-o<a>-<b>.parquet   \
    traffic_1h/dt=.../hour=HH/part-p003-o<c>-<d>.parquet    } -> merged-p003-o<a>-<f>.parquet
    traffic_1h/dt=.../hour=HH/part-p003-o<e>-<f>.parquet   /

Exactly once, with no manifest: a merged file covers every file of its
(dataset, hour, partition) whose offsets lie within its [first, last] range;
readers skip covered files (:func:`sinks.layout.live_files`), so a reader
between the merged file's write and the inputs' deletion, or after a crash in
between, counts each row once, and a compaction run again merges what is
left. Correct because only files whose last offset is below the partition's
*committed* offset are merged: every row before that offset is in a durable
file, and no file written later has a range within the merged one (a restart
resumes from the committed offset; re-read rows already archived are dropped).
A plain file whose range straddles the merged range (a restart re-chunked the
hour) is not covered and still counts. The merged rows are the exact sums of
the inputs (:func:`sinks.rollups.merge`), so totals do not change.

One compaction at a time per archive (like retention). A query that lists
files just before a compaction deletes them may fail to open one: run it again.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pyarrow.parquet as pq

from sinks import layout, rollups


@dataclass(frozen=True)
class Merged:
    """One merged file: where, how many files it replaced, rows before and after."""

    path: str
    inputs: int
    rows_in: int
    rows_out: int


def _list(fs, d: str) -> list[str]:
    try:
        fs.invalidate_cache(d)
        return [n for n in fs.ls(d, detail=False) if not posixpath.basename(n).startswith((".", "_"))]
    except FileNotFoundError:
        return []


def compact_hour(fs, root: str, dataset: str, hour: int, partition: int, committed: int, *,
                 min_files: int = 2, writer=None) -> Merged | None:
    """Merge the live rollup files of (``dataset``, ``hour``, ``partition``) whose last offset is below
    ``committed`` (the archive sink's committed Kafka offset of that partition: the next offset it reads).

    Writes the merged file, then deletes the files it covers. Does nothing when fewer than ``min_files``
    files qualify (a single merged file is already compact). Returns what it did.
    """
    from sinks.archive import ParquetWriter, _fs, _root

    fs = _fs(fs)
    root = _root(fs, root)
    if layout.spec(dataset).derived_from is None:
        raise ValueError(f"{dataset} is not a rollup dataset")
    d = f"{root}/{dataset}/{layout.hour_dir(hour)}"
    mine = [p for p in _list(fs, d) if (k := layout.parse_key(p)) is not None and k.partition == partition]
    live = layout.live_files(mine)
    inputs = [p for p in live if layout.parse_key(p).last_offset < committed]
    if len(inputs) < min_files:
        return None
    keys = [layout.parse_key(p) for p in inputs]
    tables = []
    for p in inputs:
        with fs.open(p, "rb") as fh:
            tables.append(pq.read_table(fh))
    merged = rollups.merge(dataset, tables)
    lo, hi = min(k.first_offset for k in keys), max(k.last_offset for k in keys)
    out = f"{d}/{layout.merged_name(partition, lo, hi)}"
    w = writer or ParquetWriter(fs, root)
    meta = {b"fabricflow.dataset": dataset.encode(), b"fabricflow.partition": str(partition).encode(),
            b"fabricflow.offsets": f"{lo}-{hi}".encode(), b"fabricflow.merged_files": str(len(inputs)).encode()}
    w.write_table(out, merged.replace_schema_metadata({**(merged.schema.metadata or {}), **meta}))
    # the merged file is durable: now every file it covers (inputs, and stale leftovers of an earlier run)
    for p in mine:
        k = layout.parse_key(p)
        if p != out and lo <= k.first_offset and k.last_offset <= hi:
            try:
                fs.rm(p)
            except FileNotFoundError:
                pass
    return Merged(out, len(inputs), sum(t.num_rows for t in tables), merged.num_rows)


def compact(fs, root: str, committed: dict[tuple[str, int], int], *, before_hour: int,
            datasets: list[str] | None = None) -> list[Merged]:
    """Compact every hour before ``before_hour`` (an hour index: closed hours only) of every rollup dataset,
    for each (source dataset, partition) in ``committed`` (its committed offset)."""
    from sinks.archive import _fs, _root

    fs = _fs(fs)
    root = _root(fs, root)
    names = datasets or [d.name for d in layout.DATASETS.values() if d.derived_from]
    out = []
    for name in names:
        src = layout.spec(name).derived_from
        parts = {p: c for (ds, p), c in committed.items() if ds == src}
        if not parts:
            continue
        for day_dir in _list(fs, f"{root}/{name}"):
            for hdir in _list(fs, day_dir):
                hour = layout.parse_hour_dir(hdir)
                if hour is None or hour >= before_hour:
                    continue
                for p, c in parts.items():
                    m = compact_hour(fs, root, name, hour, p, c)
                    if m is not None:
                        out.append(m)
    return out
