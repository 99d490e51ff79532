"""Compaction of rollup files: the many files of one hour and Kafka partition merged into one.

The writer derives one rollup file from every raw file (:mod:`sinks.archive.rollups`), so a busy hour has
hundreds of ``traffic_1h`` files; a compaction merges those of one (dataset, hour, partition) into
``merged-p<partition>-o<first>-<last>.parquet`` with the exact sums of the inputs, then deletes them.
Exactly once without a manifest: a merged file covers every file whose offsets lie within its range,
readers skip covered files (:func:`sinks.archive.layout.live_files`), and only files below the partition's
*committed* offset are merged. One compaction at a time per archive. The archive sink runs it itself
(:class:`CompactionSchedule`, every ``archive.compaction_interval_s``); ``fabricflow sink compact``
does the same from the group's committed offsets. Why it is correct: docs/archive.md, "Rollups".
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import pyarrow.parquet as pq

from sinks.archive import layout, rollups
from sinks.archive.fs import filesystem, root_path
from sinks.archive.parquet import ParquetWriter
from sinks.archive.retention import Schedule


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
                 min_files: int = 2, writer=None, listing: list[str] | None = None) -> Merged | None:
    """Merge the live rollup files of (``dataset``, ``hour``, ``partition``) whose last offset is below
    ``committed`` (the archive sink's committed Kafka offset of that partition: the next offset it reads).

    Writes the merged file, then deletes the files it covers. Does nothing when fewer than ``min_files``
    files qualify (a single merged file is already compact). ``listing``: the hour directory's files, when
    the caller has just listed it. Returns what it did.
    """
    fs = filesystem(fs)
    root = root_path(fs, root)
    if layout.spec(dataset).derived_from is None:
        raise ValueError(f"{dataset} is not a rollup dataset")
    d = f"{root}/{dataset}/{layout.hour_dir(hour)}"
    mine = [p for p in (_list(fs, d) if listing is None else listing) if (k := layout.parse_key(p)) is not None and k.partition == partition]
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
            datasets: list[str] | None = None, since_hour: int | None = None,
            errors: list | None = None) -> list[Merged]:
    """Compact every hour before ``before_hour`` (an hour index: closed hours only) of every rollup dataset,
    for each (source dataset, partition) in ``committed`` (its committed offset).

    ``since_hour``: leave older hours alone (a scheduled run looks back a bounded span: each hour directory
    is listed once per run). ``errors``: collect ``(dataset, hour, partition, exception)`` of a failed hour
    and go on with the rest (without it the first failure raises).
    """
    fs = filesystem(fs)
    root = root_path(fs, root)
    names = datasets or [d.name for d in layout.DATASETS.values() if d.derived_from]
    first_day = None if since_hour is None else since_hour // 24
    out = []
    for name in names:
        src = layout.spec(name).derived_from
        parts = {p: c for (ds, p), c in committed.items() if ds == src}
        if not parts:
            continue
        for day_dir in _list(fs, f"{root}/{name}"):
            day = layout.parse_day_dir(day_dir.rstrip("/"))
            if day is None or (first_day is not None and day < first_day) or day * 24 >= before_hour:
                continue
            for hdir in _list(fs, day_dir):
                hour = layout.parse_hour_dir(hdir)
                if hour is None or hour >= before_hour or (since_hour is not None and hour < since_hour):
                    continue
                listing = None
                for p, c in sorted(parts.items()):
                    try:
                        listing = _list(fs, hdir) if listing is None else listing
                        m = compact_hour(fs, root, name, hour, p, c, listing=listing)
                    except Exception as e:
                        if errors is None:
                            raise
                        errors.append((name, hour, p, e))
                        listing = None
                        continue
                    if m is not None:
                        out.append(m)
                        listing = None  # it deleted files: list again for the next partition
    return out


class CompactionSchedule(Schedule):
    """Runs :func:`compact` every ``interval_s`` in a daemon thread of the archive sink.

    ``committed()`` returns the sink's committed offsets, (source dataset, partition) -> offset, of the
    partitions it is assigned now (a copy): only files below them are merged, so writes going on meanwhile
    are safe (docs/archive.md, "Rollups"). Hours closed by ``grace_ms`` and at most ``lookback_h`` hours old are
    compacted. Each run counts ``compaction_runs``, ``compaction_files`` (rollup files merged away) and, per
    failed hour, ``compaction_errors``; a failure logs one line and that hour is retried at the next run.
    """

    name = "archive-compaction"

    def __init__(self, fs_factory, root: str, committed, interval_s: float, log, metrics=None, *,
                 grace_ms: int = 300_000, lookback_h: int = 48, first_after_s: float = 120.0, clock=None,
                 lock=None):
        import time

        super().__init__(interval_s, first_after_s, lock)
        self.fs_factory, self.root, self.committed = fs_factory, root, committed
        self.log, self.metrics = log, metrics
        self.grace_ms, self.lookback_h = grace_ms, lookback_h
        self.clock = clock or (lambda: int(time.time() * 1000))

    def run_once(self) -> list[Merged] | None:
        """One compaction pass; None when it failed as a whole (logged and counted)."""
        m = self.metrics
        before = (self.clock() - self.grace_ms) // layout.HOUR_MS
        errors: list = []
        try:
            done = compact(self.fs_factory(), self.root, self.committed(), before_hour=before,
                           since_hour=before - self.lookback_h, errors=errors)
        except Exception as e:  # noqa: BLE001 - the sink must go on; the next run retries
            if m is not None:
                m.compaction_errors.inc()
            self.log.warning("archive compaction failed (retried in %.0f s): %s: %s", self.interval_s,
                             type(e).__name__, e)
            return None
        if m is not None:
            m.compaction_runs.inc()
            m.compaction_files.inc(sum(x.inputs for x in done))
            if errors:
                m.compaction_errors.inc(len(errors))
        if errors:
            name, hour, part, e = errors[0]
            self.log.warning("archive compaction: %d hour(s) failed, retried in %.0f s; first: %s %s p%d: %s: %s",
                             len(errors), self.interval_s, name, layout.hour_dir(hour), part, type(e).__name__, e)
        if done:
            self.log.info("archive compaction: merged %d rollup file(s) into %d", sum(x.inputs for x in done), len(done))
        return done
