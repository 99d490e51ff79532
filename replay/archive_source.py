"""Replay from the hourly Parquet archive: the flows_raw / counters_raw (and discards_raw) files of a time range, in the
canonical order (hour, then the files' (partition, first offset) keys, then event-time slices)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from schemas.columns import dtype_for

from .core import COUNTER_TIME, DEFAULT_SLICE_MS, DISCARD_TIME, FLOW_TIME, ReplayError, iso_utc, slice_batches, time_range


def columns_from_table(table: pa.Table, avsc: str) -> np.ndarray:
    """Inverse of ``sinks.archive.arrow_schema.table_from_columns``: Arrow table -> ``dtype_for(avsc)`` array.

    Extra columns (derived address text, Hive partition columns) are ignored;
    a missing Avro column raises :class:`KeyError`. Column-at-a-time, no per-row work.
    """
    dt = dtype_for(avsc)
    n = table.num_rows
    out = np.zeros(n, dtype=dt)
    if n == 0:
        return out
    names = set(table.column_names)
    for name in dt.names:
        if name not in names:
            raise KeyError(f"column {name!r} of {avsc} is missing")
        col = table.column(name)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        ft = dt[name]
        if ft.shape == (16,):
            if col.null_count:
                raise ValueError(f"column {name!r} has nulls")
            if not pa.types.is_fixed_size_binary(col.type) or col.type.byte_width != 16:
                col = col.cast(pa.binary(16))
            buf = col.buffers()[1]
            data = np.frombuffer(buf, dtype=np.uint8, count=(col.offset + n) * 16)
            out[name] = data[col.offset * 16:].reshape(n, 16)
        elif ft == np.dtype(object):
            if pa.types.is_dictionary(col.type):
                col = col.cast(pa.string())
            vals = col.to_numpy(zero_copy_only=False)
            if col.null_count:
                vals = np.where(vals == None, "", vals)  # noqa: E711
            out[name] = vals
        else:
            if col.null_count:
                raise ValueError(f"column {name!r} has nulls")
            out[name] = col.to_numpy(zero_copy_only=False).astype(ft, copy=False)
    return out


def open_archive(archive_settings):
    """(fs, root) of ``archive.url`` via ``sinks.archive.fs``; a missing local directory is an error (not created)."""
    from sinks.archive.fs import ArchiveUrlError, archive_filesystem

    url = archive_settings.url
    if url.startswith("file://"):
        path = os.path.abspath(url[len("file://"):] or ".")
        if not os.path.isdir(path):
            raise ReplayError(f"archive missing: no directory {path} (archive.url {url})")
    try:
        return archive_filesystem(archive_settings)
    except ArchiveUrlError as e:
        raise ReplayError(str(e)) from None


@dataclass
class ArchiveSource:
    """Files of flows_raw / counters_raw in [frm_ms, to_ms); iterate :meth:`flow_batches` / :meth:`counter_batches`."""

    fs: Any
    root: str
    frm_ms: int
    to_ms: int
    files: dict[str, list[str]]
    slice_ms: int = DEFAULT_SLICE_MS
    on_file: Callable[[int], None] | None = None
    rows_read: dict[str, int] = field(default_factory=lambda: {"flows_raw": 0, "counters_raw": 0})

    def total_rows(self) -> int:
        """Rows in the selected files (Parquet footers; before the [from, to) row filter)."""
        import pyarrow.parquet as pq

        n = 0
        for fl in self.files.values():
            for f in fl:
                with self.fs.open(f, "rb") as fh:
                    n += pq.ParquetFile(fh).metadata.num_rows
        return n

    def _batches(self, dataset: str, avsc: str, time_col: str) -> Iterator[np.ndarray]:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from sinks.archive import layout

        by_hour: dict[int, list[tuple]] = {}
        for f in self.files.get(dataset, []):
            k = layout.parse_key(f)
            by_hour.setdefault(k.hour, []).append((k.partition, k.first_offset, k.last_offset, f))
        names = list(dtype_for(avsc).names)
        for hour in sorted(by_hour):
            parts = []
            for _p, _a, _b, f in sorted(by_hour[hour]):
                with self.fs.open(f, "rb") as fh:
                    t = pq.read_table(fh, columns=names)
                if self.on_file is not None:
                    self.on_file(t.num_rows)
                tc = t.column(time_col)
                keep = pc.and_(pc.greater_equal(tc, self.frm_ms), pc.less(tc, self.to_ms))
                t = t.filter(keep)
                if t.num_rows:
                    parts.append(columns_from_table(t, avsc))
            if parts:
                rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
                self.rows_read[dataset] = self.rows_read.get(dataset, 0) + len(rows)
                yield from slice_batches(rows, time_col, self.slice_ms)

    def flow_batches(self) -> Iterator[np.ndarray]:
        return self._batches("flows_raw", "flow_record", FLOW_TIME)

    def counter_batches(self) -> Iterator[np.ndarray]:
        return self._batches("counters_raw", "counter_sample", COUNTER_TIME)

    def discard_batches(self) -> Iterator[np.ndarray]:
        """sFlow dropped-packet notifications (the drop reasons of link events); none when not archived."""
        return self._batches("discards_raw", "discarded_packet", DISCARD_TIME)


def archive_source(fs, root: str, frm, to, *, slice_ms: int = DEFAULT_SLICE_MS) -> ArchiveSource:
    """Locate the flows_raw / counters_raw files of [frm, to) (listing only the days in range).

    Raises :class:`ReplayError` for an empty or inverted range, a missing archive,
    no raw datasets, or no data in range.
    """
    from query.errors import ArchiveError, DatasetMissing
    from query.reports import ArchiveQuery

    if frm is None or to is None:
        raise ReplayError("an archive replay needs --from and --to")
    lo, hi = time_range(frm, to)
    try:
        q = ArchiveQuery(fs, root)
    except ArchiveError as e:
        raise ReplayError(f"archive missing: {e}") from None
    raw = [d for d in ("flows_raw", "counters_raw") if d in q.datasets]
    if not raw:
        raise ReplayError(f"archive missing or empty: {q.root!r} has no flows_raw or counters_raw data "
                          f"(present: {', '.join(q.datasets) or 'none'})")
    files: dict[str, list[str]] = {}
    for d in raw:
        try:
            files[d] = q.files(d, lo, hi)
        except DatasetMissing:
            files[d] = []
    if not any(files.values()):
        spans = []
        for d in raw:
            have = q.available(d)
            spans.append(f"{d}: {have[0]} .. {have[1]}" if have else f"{d}: nothing")
        raise ReplayError(f"no raw data between {iso_utc(lo)} and {iso_utc(hi)} (the archive has {'; '.join(spans)})")
    if "discards_raw" in q.datasets:
        try:
            files["discards_raw"] = q.files("discards_raw", lo, hi)
        except DatasetMissing:
            pass
    return ArchiveSource(q.fs, q.root, lo, hi, files, slice_ms)
