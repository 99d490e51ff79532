"""Hourly Parquet archive writer: buffering by event hour, flush plans, atomic writes (the exactly-once core).

The consumer loop adds rows in offset order, asks for a flush plan, writes its files and commits the
plan's offsets only once they are durable; keys come from the data, so a retry overwrites. Pure-ish:
:class:`HourlyBuffer` has no clock and no I/O but through its index; :class:`ParquetWriter` does the
I/O. The guarantees and the argument are in docs/archive.md, "Exactly-once design".
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.codec import CodedBatch
from sinks import layout
from sinks.arrow_schema import ADDR_TYPE, TEXT_ADDR_TYPE, arrow_schema, conform, table_from_columns, table_from_parts

DEFAULT_GRACE_MS = 5 * 60_000
DEFAULT_IDLE_MS = 2 * 60_000
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_MAX_CHUNK_AGE_MS = 15 * 60_000
DEFAULT_LATE_FLUSH_MS = 60_000
DEFAULT_MAX_FUTURE_MS = layout.HOUR_MS
ROW_GROUP_SIZE = 128 * 1024


# ----------------------------------------------------------------------------- plan


def _rows(part) -> int:
    return part.num_rows if isinstance(part, pa.Table) else len(part)


def build_table(parts: list, avsc: str) -> pa.Table:
    """One Arrow table (one chunk per column, derived text columns added) from buffered parts.

    Parts are Arrow tables of the dataset's base columns or numpy structured arrays of
    ``schemas.columns.dtype_for(avsc)``, in offset order. All-numpy parts are scattered once into
    contiguous columns (:func:`sinks.arrow_schema.table_from_parts`) and wrapped without further
    copies; the text columns are built once per file, from its distinct addresses.
    """
    if parts and all(isinstance(p, (np.ndarray, CodedBatch)) for p in parts):
        if len({p.rows.dtype if isinstance(p, CodedBatch) else p.dtype for p in parts}) == 1:
            return table_from_parts(parts, avsc)
        parts = [p.to_array() if isinstance(p, CodedBatch) else p for p in parts]
    tables = [p if isinstance(p, pa.Table) else table_from_columns(p, avsc, text_addresses=False) for p in parts]
    if not tables:
        return arrow_schema(avsc).empty_table()
    t = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return conform(t.combine_chunks(), avsc)


@dataclass(eq=False)
class FileToWrite:
    """One object to write: the rows of one event hour from one Kafka partition.

    ``parts`` are the buffered pieces (see :func:`build_table`); :attr:`table` builds the
    file's table on first use (in the writer, off the consumer thread) and keeps it.
    """

    dataset: str
    hour: int
    partition: int
    first_offset: int
    last_offset: int
    parts: list
    late: bool = False
    _table: pa.Table | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.parts, pa.Table):
            self.parts = [self.parts]
        self.num_rows = sum(_rows(p) for p in self.parts)

    @property
    def table(self) -> pa.Table:
        t = self._table
        if t is None:
            t = self._table = build_table(self.parts, layout.spec(self.dataset).avsc)
            self.parts = []  # the table holds the rows now
        return t

    def key(self, root: str) -> str:
        return layout.object_key(root, self.dataset, self.hour, self.partition, self.first_offset, self.last_offset)

    @property
    def ident(self) -> tuple:
        return (self.dataset, self.hour, self.partition, self.first_offset, self.last_offset)


@dataclass
class FlushPlan:
    """Files to write, and per (dataset, partition) the last offset durable once they are written."""

    files: list[FileToWrite] = field(default_factory=list)
    safe_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def commit_offsets(self) -> dict[tuple[str, int], int]:
        """Kafka commit values (next offset to read) = ``safe_offset + 1``; -1 safe means nothing yet."""
        return {k: v + 1 for k, v in self.safe_offsets.items() if v >= 0}

    def extend(self, other: FlushPlan) -> None:
        self.files.extend(other.files)
        self.safe_offsets.update(other.safe_offsets)


# ----------------------------------------------------------------------------- written index


def _merge(intervals: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    iv = sorted(intervals)
    starts: list[int] = []
    ends: list[int] = []
    for a, b in iv:
        if starts and a <= ends[-1] + 1:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


class WrittenIndex:
    """Offset intervals already durable per event hour, for one (dataset, partition). In memory."""

    def __init__(self) -> None:
        self._iv: dict[int, list[tuple[int, int]]] = {}
        self._merged: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _load(self, hour: int) -> list[tuple[int, int]]:
        return []

    def intervals(self, hour: int) -> list[tuple[int, int]]:
        if hour not in self._iv:
            self._iv[hour] = list(self._load(hour))
        return self._iv[hour]

    def add(self, hour: int, first: int, last: int) -> None:
        self.intervals(hour).append((first, last))
        self._merged.pop(hour, None)

    def covered(self, hour: int, offsets: np.ndarray) -> np.ndarray:
        """Boolean mask: which offsets (rows of ``hour``) are already in a written file."""
        iv = self.intervals(hour)
        if not iv:
            return np.zeros(len(offsets), dtype=bool)
        if hour not in self._merged:
            self._merged[hour] = _merge(iv)
        starts, ends = self._merged[hour]
        i = np.searchsorted(starts, offsets, side="right") - 1
        ok = i >= 0
        res = np.zeros(len(offsets), dtype=bool)
        res[ok] = offsets[ok] <= ends[i[ok]]
        return res


class FsWrittenIndex(WrittenIndex):
    """:class:`WrittenIndex` loaded lazily from the archive listing (one listing per hour seen)."""

    def __init__(self, fs, root: str, dataset: str, partition: int, *, repair: bool = True) -> None:
        super().__init__()
        self.fs = _fs(fs)
        self.root = _root(self.fs, root)
        self.dataset = dataset
        self.partition = partition
        self.listings = 0
        self.derived = [d.name for d in layout.derived_of(dataset)] if repair else []
        self.repaired: list[str] = []  # files of this partition whose rollups were rebuilt

    def _names(self, dataset: str, hour: int) -> list[str]:
        d = f"{self.root}/{dataset}/{layout.hour_dir(hour)}"
        self.listings += 1
        try:
            self.fs.invalidate_cache(d)
            names = self.fs.ls(d, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            base = posixpath.basename(n)
            k = layout.parse_key(n)
            if k is not None and k.partition == self.partition and not base.startswith("."):
                out.append(base)
        return out

    def _has_rollup(self, names: set[str], merged: list[tuple[int, int]], name: str) -> bool:
        if name in names:
            return True
        k = layout.parse_key(f"{layout.hour_dir(0)}/{name}")
        return any(a <= k.first_offset and k.last_offset <= b for a, b in merged)

    def _load(self, hour: int) -> list[tuple[int, int]]:
        names = self._names(self.dataset, hour)
        if names and self.derived:
            # A file written without all of its rollups (crash between the two): rebuild them now, before
            # the re-read rows it holds are dropped and committed past (nothing would re-read them later).
            # A file whose rollups were merged (sinks.compaction) has them.
            have = []
            for d in self.derived:
                rn = self._names(d, hour)
                ks = [layout.parse_key(f"{layout.hour_dir(hour)}/{n}") for n in rn]
                have.append((set(rn), [(k.first_offset, k.last_offset) for k in ks if k.merged]))
            missing = [n for n in names if not all(self._has_rollup(h, m, n) for h, m in have)]
            if missing:
                w = ParquetWriter(self.fs, self.root)
                for n in missing:
                    w.repair_rollups(self.dataset, hour, n)
                    self.repaired.append(n)
        d = f"{self.root}/{self.dataset}/{layout.hour_dir(hour)}/"
        return [(k.first_offset, k.last_offset) for k in (layout.parse_key(d + n) for n in names)]


# ----------------------------------------------------------------------------- buffer


def batch_dtype(avsc: str) -> np.dtype | None:
    """numpy dtype of a dataset's decoded batches (None for record-only schemas)."""
    from schemas.codec import BATCHES
    from schemas.columns import dtype_for

    return dtype_for(avsc) if avsc in BATCHES.values() else None


def _take(batch, idx: np.ndarray):
    """Rows ``idx`` of a table or structured array."""
    return batch.take(pa.array(idx)) if isinstance(batch, pa.Table) else batch[idx]


@dataclass
class _Chunk:
    hour: int
    late: bool
    parts: list = field(default_factory=list)
    first: int = -1
    last: int = -1
    rows: int = 0
    opened_at: int | None = None


class HourlyBuffer:
    """Rows of one (dataset, Kafka partition), grouped by event hour until their hour closes.

    An hour closes when the event-time watermark (largest event time seen,
    ignoring rows more than ``max_future_ms`` ahead of their batch's median)
    passes hour end + ``grace_ms``. Rows for a closed hour are *late*: they go to
    a new file of that hour (flushed after ``late_flush_ms``), never into an
    existing one. A chunk is also flushed when it reaches ``max_rows``, when it
    has been open ``max_chunk_age_ms``, or when no rows arrived for ``idle_ms``
    (processing time, from the ``now_ms`` given to :meth:`flush_plan`).
    ``start_offset`` is the offset consumption starts from (the committed one).
    """

    def __init__(
        self,
        dataset: str,
        partition: int,
        *,
        index: WrittenIndex | None = None,
        start_offset: int = 0,
        grace_ms: int = DEFAULT_GRACE_MS,
        idle_ms: int = DEFAULT_IDLE_MS,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_chunk_age_ms: int = DEFAULT_MAX_CHUNK_AGE_MS,
        late_flush_ms: int = DEFAULT_LATE_FLUSH_MS,
        max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
    ) -> None:
        self.spec = layout.spec(dataset)
        self.dataset = dataset
        self._dtype = batch_dtype(self.spec.avsc)
        self.partition = partition
        self.index = index if index is not None else WrittenIndex()
        self.grace_ms = grace_ms
        self.idle_ms = idle_ms
        self.max_rows = max_rows
        self.max_chunk_age_ms = max_chunk_age_ms
        self.late_flush_ms = late_flush_ms
        self.max_future_ms = max_future_ms
        self.watermark: int | None = None
        self.consumed = start_offset - 1  # last offset handed to add()
        self._chunks: dict[int, _Chunk] = {}
        self._pending: dict[tuple, FileToWrite] = {}
        self._added = False
        self._last_activity: int | None = None
        self.rows_in = 0
        self.rows_duplicate = 0
        self.rows_late = 0

    # -- input

    def is_closed(self, hour: int) -> bool:
        return self.watermark is not None and (hour + 1) * layout.HOUR_MS + self.grace_ms <= self.watermark

    def advance(self, offset: int) -> None:
        """Record that messages up to ``offset`` were consumed (e.g. empty ones)."""
        self.consumed = max(self.consumed, int(offset))

    def add(self, batch, offsets) -> None:
        """Buffer ``batch``; ``offsets`` is the Kafka offset of each row (or one int for all).

        ``batch`` is an Arrow table of the dataset's columns (derived text columns optional:
        they are rebuilt per file), decoded ``flows.enriched.v2`` rows (``schemas.codec.CodedBatch``,
        kept as they are: their label codes become the file's columns) or a numpy structured array
        (``schemas.columns.dtype_for``
        of the dataset's schema, as ``schemas.codec.decode_batch`` returns it: kept as is, by
        reference, so it must not be modified afterwards; converted to Arrow only when its file
        is built).

        Calls must come in offset order and every row of one Kafka message must
        be in the same call (rows of one message share its offset): a message
        split across calls could straddle a flush and defeat replay de-duplication.
        """
        n = _rows(batch)
        offs = np.full(n, offsets, dtype=np.int64) if np.isscalar(offsets) else np.asarray(offsets, dtype=np.int64)
        if len(offs) != n:
            raise ValueError(f"{len(offs)} offsets for {n} rows")
        if n == 0:
            if np.isscalar(offsets):
                self.advance(int(offsets))
            return
        if offs[0] <= self.consumed or (n > 1 and np.any(np.diff(offs) < 0)):
            raise ValueError(
                f"offsets must increase across add() calls (consumed up to {self.consumed}, got {offs[0]}); "
                "give all rows of one Kafka message in one call"
            )
        if isinstance(batch, np.ndarray):
            if batch.dtype != self._dtype:
                batch = table_from_columns(batch, self.spec.avsc, text_addresses=False)
        elif not isinstance(batch, CodedBatch):
            batch = conform(batch, self.spec.avsc, text_addresses=False)
        if not isinstance(batch, pa.Table):
            t = batch[self.spec.time_column].astype(np.int64, copy=False)
        else:
            t = batch.column(self.spec.time_column).to_numpy().astype(np.int64, copy=False)
        hours = layout.hour_index(t)
        self._advance_watermark(t)
        self.rows_in += n
        hmin, hmax = int(hours.min()), int(hours.max())
        if hmin == hmax:
            self._add_hour(hmin, batch, offs)
        else:
            order = np.argsort(hours, kind="stable")
            sh = hours[order]
            cut = np.flatnonzero(np.diff(sh)) + 1
            for idx in np.split(order, cut):
                self._add_hour(int(hours[idx[0]]), _take(batch, idx), offs[idx])
        self.consumed = max(self.consumed, int(offs[-1]))
        self._added = True

    def _advance_watermark(self, t: np.ndarray) -> None:
        med = int(np.median(t)) if len(t) > 64 else int(np.sort(t)[len(t) // 2])
        ok = t[t <= med + self.max_future_ms]
        m = int(ok.max()) if len(ok) else med
        self.watermark = m if self.watermark is None else max(self.watermark, m)

    def _add_hour(self, hour: int, table: pa.Table, offs: np.ndarray) -> None:
        dup = self.index.covered(hour, offs)
        if dup.any():
            self.rows_duplicate += int(dup.sum())
            keep = ~dup
            if not keep.any():
                return
            table = _take(table, np.flatnonzero(keep))
            offs = offs[keep]
        ch = self._chunks.get(hour)
        if ch is None:
            late = self.is_closed(hour)
            ch = self._chunks[hour] = _Chunk(hour, late, first=int(offs[0]))
        if ch.late:
            self.rows_late += len(offs)
        ch.parts.append(table)
        ch.last = int(offs[-1])
        ch.rows += len(offs)

    # -- output

    def _due(self, ch: _Chunk, now_ms: int | None, idle: bool, force: bool) -> bool:
        if force or idle or ch.rows >= self.max_rows:
            return True
        age = None if (now_ms is None or ch.opened_at is None) else now_ms - ch.opened_at
        if self.is_closed(ch.hour):
            return (not ch.late) or (age is not None and age >= self.late_flush_ms)
        return age is not None and age >= self.max_chunk_age_ms

    def flush_plan(self, now_ms: int | None = None, *, force: bool = False) -> FlushPlan:
        """Move every due chunk to the plan; ``force`` flushes everything (shutdown, revoke).

        Files planned earlier but not yet :meth:`confirm`-ed are planned again (same keys).
        """
        idle = False
        if now_ms is not None:
            if self._added or self._last_activity is None:
                self._last_activity = now_ms
            elif now_ms - self._last_activity >= self.idle_ms:
                idle = True
            for ch in self._chunks.values():
                if ch.opened_at is None:
                    ch.opened_at = now_ms
        self._added = False
        for hour in sorted(self._chunks):
            ch = self._chunks[hour]
            if self._due(ch, now_ms, idle, force):
                del self._chunks[hour]
                f = FileToWrite(self.dataset, hour, self.partition, ch.first, ch.last, ch.parts, ch.late)
                self._pending[f.ident] = f
        return FlushPlan(list(self._pending.values()), {(self.dataset, self.partition): self.safe_offset})

    @property
    def safe_offset(self) -> int:
        """Last offset all of whose rows are durable once the planned files are written."""
        if self._chunks:
            return min(ch.first for ch in self._chunks.values()) - 1
        return self.consumed

    def confirm(self, plan: FlushPlan) -> None:
        """Mark the plan's files of this buffer as durable."""
        for f in plan.files:
            if f.dataset == self.dataset and f.partition == self.partition and self._pending.pop(f.ident, None):
                self.index.add(f.hour, f.first_offset, f.last_offset)

    @property
    def buffered_rows(self) -> int:
        return sum(ch.rows for ch in self._chunks.values())


class ArchiveSink:
    """Many :class:`HourlyBuffer`, one per (dataset, partition), created on first use.

    ``index_factory(dataset, partition)`` returns the :class:`WrittenIndex` of a
    new buffer (e.g. ``lambda d, p: FsWrittenIndex(fs, root, d, p)``).
    """

    def __init__(self, index_factory=None, **buffer_kwargs) -> None:
        self.index_factory = index_factory or (lambda d, p: WrittenIndex())
        self.buffer_kwargs = buffer_kwargs
        self.buffers: dict[tuple[str, int], HourlyBuffer] = {}

    def buffer(self, dataset: str, partition: int, start_offset: int = 0) -> HourlyBuffer:
        key = (dataset, partition)
        if key not in self.buffers:
            self.buffers[key] = HourlyBuffer(
                dataset, partition, index=self.index_factory(dataset, partition),
                start_offset=start_offset, **self.buffer_kwargs,
            )
        return self.buffers[key]

    def add(self, dataset: str, partition: int, table: pa.Table, offsets) -> None:
        self.buffer(dataset, partition).add(table, offsets)

    def flush_plan(self, now_ms: int | None = None, *, force: bool = False) -> FlushPlan:
        plan = FlushPlan()
        for b in self.buffers.values():
            plan.extend(b.flush_plan(now_ms, force=force))
        return plan

    def confirm(self, plan: FlushPlan) -> None:
        for b in self.buffers.values():
            b.confirm(plan)

    def drop(self, dataset: str, partition: int) -> None:
        """Forget a buffer (partition revoked): flush it first with ``force`` if it should be kept."""
        self.buffers.pop((dataset, partition), None)


# ----------------------------------------------------------------------------- writer


def _fs(fs):
    if fs is None:
        import fsspec

        return fsspec.filesystem("file")
    return fs


def _is_local(fs) -> bool:
    proto = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in proto or "local" in proto


def _root(fs, root: str) -> str:
    r = fs._strip_protocol(str(root)) if hasattr(fs, "_strip_protocol") else str(root)
    return r.rstrip("/") or "/"


def _flat(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) for f in schema)


def parquet_column_options(schema: pa.Schema) -> dict:
    """``use_dictionary`` / ``write_statistics`` for a file of ``schema``.

    Dictionary encoding only for string, dictionary and binary(16) columns: numeric
    columns (random sizes, ports, times) compress better and faster as plain + zstd.
    Statistics on every column except the derived address text columns (their min/max
    never prunes anything and costs more than the rest of the file). Schemas with nested
    columns keep pyarrow's defaults (leaf paths differ from the column names).
    """
    if not _flat(schema):
        return {"use_dictionary": True, "write_statistics": True}
    dict_cols = [f.name for f in schema
                 if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type) or f.type == ADDR_TYPE]
    stats = [f.name for f in schema if f.type != TEXT_ADDR_TYPE]
    return {"use_dictionary": dict_cols, "write_statistics": stats}


class ParquetWriter:
    """Writes planned files as Parquet (zstd, ~128k-row groups) to an fsspec filesystem.

    The file is encoded in memory (pyarrow, without the GIL), then stored. Local
    filesystems: write ``.<name>.tmp`` beside the target, fsync, rename, fsync the
    directory. Object stores (s3fs): one PUT (``pipe_file``; a completed multipart
    upload for large files) is atomic, so the object is written in place. Returns once
    durable. Safe to use from one writer thread while another thread plans files.
    """

    def __init__(self, fs, root: str, *, compression: str = "zstd", compression_level: int | None = None,
                 row_group_size: int = ROW_GROUP_SIZE) -> None:
        self.fs = _fs(fs)
        self.root = _root(self.fs, root)
        self.local = _is_local(self.fs)
        self.compression = compression
        self.compression_level = compression_level
        self.row_group_size = row_group_size
        self.files_written = 0
        self.rows_written = 0
        self.rollup_rows_written = 0
        self.rollup_seconds = 0.0  # time spent aggregating and writing rollups

    def _write_table(self, table: pa.Table, sink) -> None:
        pq.write_table(table, sink, compression=self.compression, compression_level=self.compression_level,
                       row_group_size=self.row_group_size, **parquet_column_options(table.schema))

    def encode(self, table: pa.Table) -> pa.Buffer:
        """The Parquet file of ``table`` as one buffer."""
        out = pa.BufferOutputStream()
        self._write_table(table, out)
        return out.getvalue()

    def write(self, f: FileToWrite) -> str:
        """Write one file; returns its key."""
        key = f.key(self.root)
        table = f.table
        meta = dict(table.schema.metadata or {})
        meta.update({b"fabricflow.dataset": f.dataset.encode(), b"fabricflow.partition": str(f.partition).encode(),
                     b"fabricflow.offsets": f"{f.first_offset}-{f.last_offset}".encode()})
        self.write_table(key, table.replace_schema_metadata(meta))
        self.files_written += 1
        self.rows_written += f.num_rows
        self.write_rollups(f.dataset, f.hour, posixpath.basename(key), table, meta)
        return key

    def write_rollups(self, dataset: str, hour: int, name: str, table: pa.Table, meta: dict | None = None) -> list[str]:
        """Write the rollups of one file of ``dataset`` (``sinks.rollups``) under the same file name.

        Called after the file itself is durable and before :meth:`write` returns, so a file counts as
        written (committed past, confirmed) only with its rollups. A crash in between leaves a file without
        some rollup: :class:`FsWrittenIndex` finds it when the re-read rows of its hour arrive and calls
        :meth:`repair_rollups` before anything is committed past them.
        """
        from sinks import rollups

        keys = []
        t0 = time.perf_counter()
        derived = rollups.derive(dataset, table)
        for rd, rt in derived.items():
            k = f"{self.root}/{rd}/{layout.hour_dir(hour)}/{name}"
            m = dict(meta or {})
            m.update({b"fabricflow.dataset": rd.encode(), b"fabricflow.derived_from": dataset.encode()})
            self.write_table(k, rt.replace_schema_metadata({**(rt.schema.metadata or {}), **m}))
            keys.append(k)
            self.rollup_rows_written += rt.num_rows
        if derived:
            self.rollup_seconds += time.perf_counter() - t0
        return keys

    def repair_rollups(self, dataset: str, hour: int, name: str) -> list[str]:
        """Rebuild the rollups of an already written file of ``dataset`` from the file itself."""
        key = f"{self.root}/{dataset}/{layout.hour_dir(hour)}/{name}"
        with self.fs.open(key, "rb") as fh:
            table = pq.read_table(fh)
        meta = {k: v for k, v in (table.schema.metadata or {}).items() if k.startswith(b"fabricflow.")}
        return self.write_rollups(dataset, hour, name, table, meta)

    def write_table(self, key: str, table: pa.Table) -> None:
        """Atomically write ``table`` at ``key`` (full key, no protocol)."""
        d, name = posixpath.split(key)
        data = self.encode(table)
        if self.local:
            os.makedirs(d, exist_ok=True)
            tmp = posixpath.join(d, f".{name}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(memoryview(data))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, key)
            dfd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        else:
            self.fs.pipe_file(key, data.to_pybytes())
            self.fs.invalidate_cache(d)

    def write_plan(self, plan: FlushPlan) -> list[str]:
        """Write every file of ``plan`` (in order); returns the keys."""
        return [self.write(f) for f in plan.files]


def dataset_schema(dataset: str) -> pa.Schema:
    """Arrow schema of a dataset's files (rollups: :mod:`sinks.rollups`)."""
    s = layout.spec(dataset)
    if s.derived_from is not None:
        from sinks import rollups

        return rollups.schema(dataset)
    return arrow_schema(s.avsc)


def empty_table(dataset: str) -> pa.Table:
    """A zero-row table of a dataset's Arrow schema."""
    return dataset_schema(dataset).empty_table()
