"""Hourly summaries from the archive sink's stream: feed a :class:`SummaryBook`, produce closed hours.

An hour is produced to summaries.hourly once the flows.enriched watermark (its slowest active partition)
passes the hour's end + ``archive.grace_s``, with the data-quality figures of ingest.quality.v1 for that
hour (:class:`sinks.archive.summaries.QualityHours`: loss ratio, records lost, records without a sampling rate, skew). Summaries live in memory: an hour open when a partition was
resumed from a commit this process did not make is flagged ``summary_partial = 1`` (docs/archive.md).
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaException, Producer

from fabricflow.kafka import producer_config
from fabricflow.logs import RateLimitedLog
from schemas import codec
from schemas.codec import CodedBatch
from sinks.archive import layout
from sinks.archive.metrics import SinkMetrics
from sinks.archive.summaries import QualityHours, SummaryBook, coded_summary_columns, summary_columns

log = logging.getLogger("fabricflow.sink")

PARTIAL_METRIC = "summary_partial"
#: Enriched rows gathered before they are added to the summaries: one Arrow group-by per chunk instead of one
#: per message (per-call overhead dominated at ~4k-row messages: 2.8 -> ~1.1 CPU-s per 1 M rows).
CHUNK_ROWS = 65_536

TP = tuple[str, int]


class SummaryEmitter:
    """The summaries side of the archive sink; ``enabled`` False keeps only the bookkeeping of resumes."""

    def __init__(self, settings, metrics: SinkMetrics, report: dict, ratelog: RateLimitedLog, *, enabled: bool = True):
        a = settings.archive
        self.settings = settings
        self.metrics = metrics
        self.report = report
        self.ratelog = ratelog
        self.enabled = enabled
        self.book = SummaryBook(grace_ms=int(a.grace_s * 1000))
        self.quality = QualityHours()  # ingest.quality.v1 rows by hour and exporter
        self.idle_s = a.idle_flush_s
        self.producer: Producer | None = None
        self._enriched_wm: dict[int, tuple[int, float]] = {}  # partition -> (event-time watermark, last add)
        self._partial_through: int | None = None  # hours <= this may miss rows consumed before a restart
        self._resumed: set[TP] = set()  # partitions resumed from a commit, first message not yet seen
        self._handed_over: dict[TP, int] = {}  # offset this process committed when it gave a partition up
        self._pending: list = []  # enriched batches not yet added to the book (same order as received)
        self._pending_rows = 0
        self._pending_min_ms: int | None = None  # earliest event time among them

    # -- partitions

    def assigned(self, tp: TP, route, committed: int) -> None:
        """A partition resumes from ``committed``: if this process did not commit that offset when it gave the
        partition up, the summary hours open then may lack rows read before."""
        if route is not None and (route.dataset == "flows_enriched" or route.event_kind) \
                and self._handed_over.get(tp) != committed:
            self._resumed.add(tp)

    def handed_over(self, tp: TP, offset: int) -> None:
        self._handed_over[tp] = offset

    def forget(self, tp: TP, route) -> None:
        if route is not None and route.dataset == "flows_enriched":
            self._enriched_wm.pop(tp[1], None)
        self._resumed.discard(tp)

    # -- input

    def note_rows(self, route, partition: int, table) -> None:
        """First rows of a partition resumed from a commit: hours up to theirs may lack earlier rows."""
        tp = (route.topic, partition)
        if tp not in self._resumed or len(table) == 0:
            return
        self._resumed.discard(tp)
        col = layout.spec(route.dataset).time_column
        t_max = int(pc.max(table[col]).as_py()) if isinstance(table, pa.Table) else int(table[col].max())
        h = int(layout.hour_index(t_max))
        self._partial_through = h if self._partial_through is None else max(self._partial_through, h)

    def enriched_watermark(self, partition: int, watermark: int) -> None:
        self._enriched_wm[partition] = (watermark, time.monotonic())

    def add_flows(self, table) -> None:
        """Gather an enriched batch (numpy structured array or Arrow table) as the narrow Arrow table a summary
        reads; added to the book by chunks of :data:`CHUNK_ROWS` rows, and always before an hour they may belong
        to is closed (:meth:`emit`)."""
        if not self.enabled or not len(table):
            return
        if isinstance(table, CodedBatch):  # kept as decoded: one table per chunk (coded_summary_columns)
            t, lo = table, int(table.rows["time_end_ms"].min())
        else:
            t = summary_columns(table)
            lo = int(pc.min(t["time_end_ms"]).as_py())
        self._pending.append(t)
        self._pending_rows += len(t)
        self._pending_min_ms = lo if self._pending_min_ms is None else min(self._pending_min_ms, lo)
        if self._pending_rows >= CHUNK_ROWS:
            self._add_pending()

    def _add_pending(self) -> None:
        if not self._pending:
            return
        parts, self._pending = self._pending, []
        self._pending_rows, self._pending_min_ms = 0, None
        late0 = self.book.late_rows
        coded = [p for p in parts if isinstance(p, CodedBatch)]
        if coded and len(coded) == len(parts):
            self.book.add_flows(coded_summary_columns(coded))
        else:
            tables = [summary_columns(p) if isinstance(p, CodedBatch) else p for p in parts]
            self.book.add_flows(pa.concat_tables(tables) if len(tables) > 1 else tables[0])
        if self.book.late_rows > late0:
            self.metrics.summary_late.inc(self.book.late_rows - late0)

    def add_events(self, kind: str | None, rows: list[dict]) -> None:
        if self.enabled and kind:
            for r in rows:  # detector outputs: low volume
                self.book.add_event(kind, r)

    def add_quality(self, rows: list[dict]) -> None:
        """IngestQuality records (ingest.quality.v1): the quality figures of their hours' summaries."""
        if self.enabled:
            self.quality.add(rows)

    # -- output

    def watermark(self) -> int | None:
        """Event time up to which flows.enriched is complete: the slowest partition that received rows
        within ``archive.idle_flush_s`` (idle partitions do not hold summaries back), else the latest."""
        if not self._enriched_wm:
            return None
        now = time.monotonic()
        active = [wm for wm, t in self._enriched_wm.values() if now - t < self.idle_s]
        return min(active) if active else max(wm for wm, _ in self._enriched_wm.values())

    def emit(self) -> None:
        """Produce the summaries of the hours the watermark closed."""
        wm = self.watermark()
        if not self.enabled or wm is None:
            return
        if self._pending_min_ms is not None:
            closable = (wm - self.book.grace_ms) // layout.HOUR_MS - 1  # as SummaryBook.close decides
            if layout.hour_index(self._pending_min_ms) <= closable or any(h <= closable for h in self.book.hours):
                self._add_pending()  # rows of an hour about to close go in first (else they would count as late)
        if not self.book.hours:
            return
        partial = {}
        if self._partial_through is not None:
            partial = {h * layout.HOUR_MS: {PARTIAL_METRIC: 1.0} for h in self.book.hours if h <= self._partial_through}
        quality = {h * layout.HOUR_MS: {**self.quality.figures(h), **partial.get(h * layout.HOUR_MS, {})}
                   for h in self.book.hours}
        out = self.book.close(wm, quality)
        self.quality.drop_through(self.book.closed_through)
        if not out:
            return
        topic = self.settings.kafka.topics.summaries
        if self.producer is None:
            self.producer = Producer(self._producer_config())
        failed = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)

        for s in out:
            try:
                self.producer.produce(topic, key=str(s["hour_start_ms"]).encode(),
                                      value=codec.encode_record("summary_hourly", s), on_delivery=on_delivery)
            except (KafkaException, BufferError) as e:
                failed.append(e)
                continue
            is_partial = any(q["metric"] == PARTIAL_METRIC for q in s["quality"])
            self.metrics.summaries.labels("true" if is_partial else "false").inc()
            self.report["summaries"] += 1
            log.info("summary of hour %s: %d flow records%s", layout.hour_dir(s["hour_start_ms"] // layout.HOUR_MS),
                     s["flow_records"], " (partial)" if is_partial else "")
        self.producer.flush(10)
        for e in failed:
            self.metrics.errors.labels("produce").inc()
            self.ratelog.warning("produce", "producing a summary failed: %s", e)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(10)
            self.producer = None  # destroyed: no client threads left behind

    def _producer_config(self) -> dict:
        """Every fabricflow producer's settings (:func:`fabricflow.kafka.producer_config`), with its own client
        id and a short linger: a few summaries an hour, sent as soon as the hour is written."""
        k = self.settings.kafka
        return producer_config(k, self.settings.ingest.producer, **{"client.id": f"{k.client_id}-archive-summaries",
                                                                    "linger.ms": 5})
