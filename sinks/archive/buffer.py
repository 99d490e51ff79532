"""Rows buffered by event hour until their hour closes, and the flush plans made from them (the
exactly-once core).

The consumer loop adds rows in offset order, asks for a flush plan (:mod:`sinks.archive.flush`), has its
files written (:mod:`sinks.archive.parquet`) and commits the plan's offsets only once they are durable;
keys come from the data, so a retry overwrites. No clock and no I/O here but through the written index
(:mod:`sinks.archive.index`). The guarantees and the argument are in docs/archive.md, "Exactly-once design".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from schemas.codec import CodedBatch
from sinks.archive import layout
from sinks.archive.arrow_schema import conform, table_from_columns
from sinks.archive.flush import FileToWrite, FlushPlan, row_count
from sinks.archive.index import WrittenIndex

DEFAULT_GRACE_MS = 5 * 60_000
DEFAULT_IDLE_MS = 2 * 60_000
DEFAULT_MAX_ROWS = 1_000_000
DEFAULT_MAX_CHUNK_AGE_MS = 15 * 60_000
DEFAULT_LATE_FLUSH_MS = 60_000
DEFAULT_MAX_FUTURE_MS = layout.HOUR_MS


def batch_dtype(avsc: str) -> np.dtype | None:
    """numpy dtype of a dataset's decoded batches (None for record-only schemas)."""
    from schemas.codec import BATCHES  # the codec loads its compiled walk: only when a buffer is made
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
        n = row_count(batch)
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
        lo, m = int(t.min()), int(t.max())
        if m > lo + self.max_future_ms:  # some row may be that far ahead of the median: leave such rows out
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
