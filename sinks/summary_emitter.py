"""Hourly summaries from the archive sink's stream: feed a :class:`SummaryBook`, produce closed hours.

An hour is produced to summaries.hourly once the flows.enriched watermark (its slowest active partition)
passes the hour's end + ``archive.grace_s``. Summaries live in memory: an hour open when a partition was
resumed from a commit this process did not make is flagged ``summary_partial = 1`` (docs/archive.md).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow.compute as pc
from confluent_kafka import KafkaException, Producer

from fabricflow.logs import RateLimitedLog
from schemas import codec
from sinks import layout
from sinks.archive_metrics import SinkMetrics
from sinks.summaries import SummaryBook

log = logging.getLogger("fabricflow.sink")

PARTIAL_METRIC = "summary_partial"

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
        self.idle_s = a.idle_flush_s
        self.producer: Producer | None = None
        self._enriched_wm: dict[int, tuple[int, float]] = {}  # partition -> (event-time watermark, last add)
        self._partial_through: int | None = None  # hours <= this may miss rows consumed before a restart
        self._resumed: set[TP] = set()  # partitions resumed from a commit, first message not yet seen
        self._handed_over: dict[TP, int] = {}  # offset this process committed when it gave a partition up

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
        t_max = int(table[col].max()) if isinstance(table, np.ndarray) else int(pc.max(table[col]).as_py())
        h = int(layout.hour_index(t_max))
        self._partial_through = h if self._partial_through is None else max(self._partial_through, h)

    def enriched_watermark(self, partition: int, watermark: int) -> None:
        self._enriched_wm[partition] = (watermark, time.monotonic())

    def add_flows(self, table) -> None:
        if not self.enabled or not len(table):
            return
        late0 = self.book.late_rows
        self.book.add_flows(table)
        if self.book.late_rows > late0:
            self.metrics.summary_late.inc(self.book.late_rows - late0)

    def add_events(self, kind: str | None, rows: list[dict]) -> None:
        if self.enabled and kind:
            for r in rows:  # detector outputs: low volume
                self.book.add_event(kind, r)

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
        if not self.enabled or wm is None or not self.book.hours:
            return
        partial = {}
        if self._partial_through is not None:
            partial = {h * layout.HOUR_MS: {PARTIAL_METRIC: 1.0} for h in self.book.hours if h <= self._partial_through}
        out = self.book.close(wm, partial)
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
        k = self.settings.kafka
        p = self.settings.ingest.producer
        conf = k.client_config()
        conf.update({
            "client.id": f"{k.client_id}-archive-summaries",
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": p.compression,
        })
        return conf
