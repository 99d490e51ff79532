"""The archive sink service: Kafka topics -> hourly Parquet archive; hourly summaries -> Kafka.

One confluent-kafka consumer (group ``fabricflow-archive``, manual commits)
reads every archived topic (flows.raw, flows.enriched, counters.raw, matrix,
incast, straggler, link_health, alerts, patterns, summaries; not the DLQ),
decodes each message with :mod:`schemas.codec` (batches stay the decoded numpy
arrays; records become Arrow tables) and feeds :class:`sinks.archive.ArchiveSink`.
The consumer thread, per poll (and every ``FLUSH_EVERY_MESSAGES`` of a large one)::

    sink.add(...)                      # whole messages, offset order
    plan = sink.flush_plan(now_ms)     # hour closed / size / age / idle
    queue the plan's new files         # writer threads: build table, Parquet, PUT
    for each job the writer finished, in order:
        consumer.commit(job offsets)   # its files (and every earlier job's) are durable
        sink.confirm(job files)

* Writer threads (:class:`sinks.writer.WriteQueue`, ``archive.write_queue_rows``;
  0 = write on the consumer thread as before): files start in plan order on two
  threads and jobs (one plan's new files) are reported strictly in plan order,
  so the decode of new messages overlaps the Parquet encoding and upload of
  closed hours. Exactly-once holds as with synchronous writes: a job's commit
  offsets were computed when it was planned and are valid once every file
  planned until then is durable; files still in flight stay in the buffers'
  pending sets, so a plan made meanwhile carries them (never committed past),
  and the commit is made on the consumer thread only after the writer reported
  the job and all jobs before it written. The first failed write halts the
  queue (later jobs are reported skipped and never committed), the error is
  counted and logged, consumption pauses, and after the retry delay the next
  plan queues every unconfirmed file again. Rebalance and shutdown wait for
  the jobs in flight before committing or giving partitions up; offsets of a
  lost partition are never committed.
* Undecodable messages (not Avro single-object, unknown or wrong schema,
  corrupt) are counted (``fabricflow_sink_undecodable_messages_total``),
  logged rate-limited and skipped; their offsets ARE committed with the
  others (the buffer advances past them), otherwise one bad message would
  hold the partition's commit back forever.
* Rebalance: on revoke the partition's buffers are force-flushed, written and
  committed, then dropped; on assign the consumer resumes from the committed
  offset (librdkafka does that) and a buffer starts at the first offset it
  receives. Replayed rows already in the archive are dropped by the
  buffers' :class:`sinks.archive.FsWrittenIndex`.
* The high watermark is never used (the embedded broker reports it wrongly):
  lag is counted as consumed minus committed offsets.
* Hourly summaries: flows.enriched batches and the detector event topics feed
  a :class:`sinks.summaries.SummaryBook`; when the flows' event-time
  watermark passes an hour's end + ``archive.grace_s`` the hour's summary is
  produced to summaries.hourly (key = hour start ms). Summaries live in
  memory: an hour whose rows were partly consumed before a restart is
  summarised from what this process read and flagged with the quality figure
  ``summary_partial = 1``.
* Test hook (never set it in production): ``FABRICFLOW_SINK_CRASH_AT`` =
  ``before_write`` | ``mid_write`` | ``after_write`` | ``after_commit`` |
  ``in_flight`` (consumer thread, right after queueing the plan's files while
  the writer thread writes them) with ``FABRICFLOW_SINK_CRASH_AFTER=N``
  (default 1) makes the process ``os._exit(99)`` at that step of the N-th plan
  that has files (``before_write``/``mid_write`` run on the writer thread).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge

from fabricflow.logs import RateLimitedLog
from schemas import codec
from sinks import layout
from sinks.archive import DEFAULT_MAX_ROWS, ArchiveSink, FlushPlan, FsWrittenIndex, ParquetWriter, batch_dtype
from sinks.arrow_schema import table_from_columns, table_from_dicts
from sinks.fs import archive_filesystem
from sinks.summaries import SummaryBook
from sinks.writer import FAILED, OK, WriteJob, WriteQueue

log = logging.getLogger("fabricflow.sink")

DEFAULT_GROUP = "fabricflow-archive"
DEFAULT_METRICS_PORT = 9182
DEFAULT_WRITE_QUEUE_ROWS = 1_000_000
CRASH_STEPS = ("before_write", "mid_write", "after_write", "after_commit", "in_flight")
CRASH_EXIT_CODE = 99
COMMIT_INTERVAL_S = 1.0
FLUSH_EVERY_MESSAGES = 64  # plan (and queue due files) at least this often while a large poll is handled
PARTIAL_METRIC = "summary_partial"


@dataclass(frozen=True)
class Route:
    """One archived topic: its dataset, wire schema and whether messages are columnar batches."""

    topic_key: str
    topic: str
    dataset: str
    schema: str
    batch: bool
    event_kind: str | None = None  # SummaryBook kind for detector topics


# topic key in TopicNames -> (dataset, wire schema, SummaryBook event kind)
ARCHIVED: tuple[tuple[str, str, str, str | None], ...] = (
    ("flows_raw", "flows_raw", "flow_batch", None),
    ("flows_enriched", "flows_enriched", "flow_enriched_batch", None),
    ("counters_raw", "counters_raw", "counter_batch", None),
    ("matrix", "matrix_windows", "matrix_cell", None),
    ("incast", "incast_events", "incast_event", "incast"),
    ("straggler", "straggler_scores", "straggler_score", "straggler"),
    ("link_health", "link_health", "link_health", "link"),
    ("alerts", "alerts", "alert", "alert"),
    ("patterns", "patterns", "pattern", None),
    ("summaries", "summaries_hourly", "summary_hourly", None),
)


def routes_for(kafka) -> dict[str, Route]:
    """Topic name -> :class:`Route` for every archived topic of ``kafka.topics``."""
    names = kafka.topics
    out = {}
    for key, dataset, schema, kind in ARCHIVED:
        topic = getattr(names, key)
        out[topic] = Route(key, topic, dataset, schema, schema in codec.BATCHES, kind)
    return out


class SinkMetrics:
    """Prometheus metrics of the archive sink (own registry; serve with :func:`ingest.metrics.serve_metrics`)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.messages = Counter("fabricflow_sink_messages_total", "Kafka messages consumed", ["dataset"], registry=r)
        self.rows_in = Counter("fabricflow_sink_rows_received_total", "Rows decoded from Kafka messages", ["dataset"], registry=r)
        self.rows = Counter("fabricflow_sink_rows_written_total", "Rows written to Parquet", ["dataset"], registry=r)
        self.files = Counter("fabricflow_sink_files_written_total", "Parquet files written", ["dataset"], registry=r)
        self.duplicates = Counter("fabricflow_sink_rows_duplicate_total", "Re-read rows already in the archive (dropped)", ["dataset"], registry=r)
        self.late = Counter("fabricflow_sink_rows_late_total", "Rows for an already closed hour (written to late files)", ["dataset"], registry=r)
        self.undecodable = Counter("fabricflow_sink_undecodable_messages_total", "Messages skipped: not decodable with the topic's schema", ["dataset", "reason"], registry=r)
        self.errors = Counter("fabricflow_sink_errors_total", "Errors by stage (write, commit, produce, kafka)", ["stage"], registry=r)
        self.commits = Counter("fabricflow_sink_commits_total", "Synchronous offset commits", registry=r)
        self.lag = Gauge("fabricflow_sink_commit_lag_records", "Kafka records consumed but not yet committed", ["dataset"], registry=r)
        self.buffered = Gauge("fabricflow_sink_buffered_rows", "Rows buffered, not yet written", ["dataset"], registry=r)
        self.summaries = Counter("fabricflow_sink_summaries_total", "Hourly summaries produced", ["partial"], registry=r)
        self.summary_late = Counter("fabricflow_sink_summary_late_rows_total", "Flow rows for an hour whose summary was already produced", registry=r)
        self.last_loop = time.monotonic()

    def healthy(self, max_age_s: float = 30.0) -> bool:
        return time.monotonic() - self.last_loop < max_age_s


def _reason(err: Exception) -> str:
    """Bounded reason label for an undecodable message."""
    msg = str(err)
    if isinstance(err, codec.CodecError):
        if "single-object" in msg:
            return "not_avro"
        if "unknown schema" in msg:
            return "unknown_schema"
        if msg.startswith("expected") or "is not a batch schema" in msg:
            return "wrong_schema"
        if "empty message" in msg:
            return "empty"
        return "corrupt"
    return "corrupt"


class _Crash:
    """The ``FABRICFLOW_SINK_CRASH_AT`` test hook."""

    def __init__(self, environ=os.environ):
        self.step = environ.get("FABRICFLOW_SINK_CRASH_AT") or None
        if self.step is not None and self.step not in CRASH_STEPS:
            raise ValueError(f"FABRICFLOW_SINK_CRASH_AT must be one of {', '.join(CRASH_STEPS)}, got {self.step!r}")
        self.after = int(environ.get("FABRICFLOW_SINK_CRASH_AFTER", "1"))
        self.plans = 0

    def at(self, step: str, plan: int | None = None) -> None:
        """Crash at ``step`` of plan number ``plan`` (default: the latest plan counted)."""
        n = self.plans if plan is None else plan
        if self.step == step and n >= self.after:
            log.error("test hook: crashing at %s of plan %d", step, n)
            logging.shutdown()
            os._exit(CRASH_EXIT_CODE)


class ArchiveService:
    """Consume the archived topics and write the hourly Parquet archive (see the module docstring).

    ``fs``/``root`` default to :func:`sinks.fs.archive_filesystem` of the settings;
    ``metrics_port`` defaults to ``archive.metrics_port`` if the settings have one,
    else 9182 (0 disables). ``clock`` returns unix seconds (processing time).
    """

    def __init__(
        self,
        settings,
        *,
        group_id: str = DEFAULT_GROUP,
        fs=None,
        root: str | None = None,
        metrics_port: int | None = None,
        batch_messages: int = 1000,
        max_rows: int = DEFAULT_MAX_ROWS,
        summaries: bool = True,
        clock=time.time,
        write_queue_rows: int | None = None,
    ) -> None:
        self.settings = settings
        a = settings.archive
        if fs is None:
            fs, root = archive_filesystem(a)
        self.fs, self.root = fs, root
        self.writer = ParquetWriter(fs, root)
        if write_queue_rows is None:
            write_queue_rows = getattr(a, "write_queue_rows", DEFAULT_WRITE_QUEUE_ROWS)
        self.write_queue_rows = write_queue_rows  # 0: write on the consumer thread
        self._wq: WriteQueue | None = None
        self._inflight: set[tuple] = set()  # idents of files queued for the writer thread, not yet reported
        self._lost: set[tuple[str, int]] = set()  # partitions lost: never commit for them
        self.group_id = group_id
        self.routes = routes_for(settings.kafka)
        self._dtypes = {r.topic: batch_dtype(codec.BATCHES[r.schema]) for r in self.routes.values() if r.batch}
        self.by_dataset = {r.dataset: r for r in self.routes.values()}
        self.grace_ms = int(a.grace_s * 1000)
        self.sink = ArchiveSink(
            index_factory=lambda d, p: FsWrittenIndex(self.fs, self.root, d, p),
            grace_ms=self.grace_ms, idle_ms=int(a.idle_flush_s * 1000), max_rows=max_rows,
        )
        self.batch_messages = batch_messages
        self.clock = clock
        self.metrics = SinkMetrics()
        self.metrics_port = metrics_port if metrics_port is not None else getattr(a, "metrics_port", DEFAULT_METRICS_PORT)
        self.metrics_bind = getattr(a, "metrics_bind", settings.ingest.metrics_bind)
        self.ratelog = RateLimitedLog(log)
        self.crash = _Crash()
        self.summaries_enabled = summaries
        self.book = SummaryBook(grace_ms=self.grace_ms)
        self._enriched_wm: dict[int, tuple[int, float]] = {}  # partition -> (event-time watermark, last add)
        self.idle_s = a.idle_flush_s
        self._partial_through: int | None = None  # hours <= this may miss rows consumed before a restart
        self._resumed: set[tuple[str, int]] = set()  # partitions resumed from a commit, first message not yet seen
        self._committed: dict[tuple[str, int], int] = {}  # next offset to read, as committed
        self._assigned: set[tuple[str, int]] = set()
        self._handed_over: dict[tuple[str, int], int] = {}  # offset this process committed when it gave a partition up
        self._assigned_once = False
        self._paused = False
        self._retry_at = 0.0
        self._retry_s = 1.0
        self._last_commit = 0.0
        self._stopping = False
        self.consumer: Consumer | None = None
        self.producer: Producer | None = None
        self.http = None
        self.report = {"messages": 0, "rows_in": 0, "rows_written": 0, "files_written": 0, "undecodable": 0,
                       "duplicates": 0, "summaries": 0, "commits": 0, "plans": 0}

    # ------------------------------------------------------------------ kafka plumbing

    def _consumer_config(self) -> dict:
        k = self.settings.kafka
        conf = k.client_config()
        conf.update({
            "client.id": f"{k.client_id}-archive",
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": k.session_timeout_ms,
            "heartbeat.interval.ms": max(100, k.session_timeout_ms // 3),
            # flow batches are ~100 B/row (~400 kB per 4096-row message): fetch many per request
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "fetch.max.bytes": 64 * 1024 * 1024,
        })
        return conf

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

    def _on_assign(self, consumer, partitions) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        log.info("assigned %d partitions", len(tps))
        self._assigned.update(tps)
        self._lost.difference_update(tps)
        self._assigned_once = True
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as e:
            log.warning("cannot read committed offsets: %s", e)
            committed = []
        for p in committed:
            tp = (p.topic, p.partition)
            if p.offset >= 0:
                self._committed[tp] = p.offset
                route = self.routes.get(p.topic)
                # Resumed from a commit this process did not make up to its own last row: the summary
                # hours open then may lack rows read before.
                if route is not None and (route.dataset == "flows_enriched" or route.event_kind) \
                        and self._handed_over.get(tp) != p.offset:
                    self._resumed.add(tp)

    def _on_revoke(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        log.info("revoked %d partitions: flushing them", len(tps))
        plan = FlushPlan()
        now = self._now_ms()
        for topic, part in tps:
            route = self.routes.get(topic)
            buf = self.sink.buffers.get((route.dataset, part)) if route else None
            if buf is not None:
                plan.extend(buf.flush_plan(now, force=True))
        if plan.files or plan.safe_offsets:
            self._execute(plan, force=True)
        self.drain()  # the partitions' files are durable and committed before they are given up
        self._forget(tps, committed=True)

    def _on_lost(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        log.warning("lost %d partitions: dropping their buffers (the new owner re-reads them)", len(tps))
        self._lost.update(tps)
        self.drain()  # files in flight land before anyone (this process included) lists their hour again
        self._forget(tps)

    def _forget(self, tps, committed: bool = False) -> None:
        for topic, part in tps:
            route = self.routes.get(topic)
            buf = self.sink.buffers.get((route.dataset, part)) if route else None
            if committed and buf is not None and self._committed.get((topic, part)) == buf.consumed + 1:
                self._handed_over[(topic, part)] = buf.consumed + 1
            if route is not None:
                self.sink.drop(route.dataset, part)
                if route.dataset == "flows_enriched":
                    self._enriched_wm.pop(part, None)
                self.metrics.buffered.labels(route.dataset).set(0)
            self._committed.pop((topic, part), None)
            self._assigned.discard((topic, part))
            self._resumed.discard((topic, part))

    # ------------------------------------------------------------------ input

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _add(self, route: Route, partition: int, table, offsets) -> None:
        buf = self.sink.buffer(route.dataset, partition)
        dup0, late0 = buf.rows_duplicate, buf.rows_late
        buf.add(table, offsets)
        d = route.dataset
        n = len(table) if isinstance(table, np.ndarray) else table.num_rows
        self.metrics.rows_in.labels(d).inc(n)
        self.report["rows_in"] += n
        if buf.rows_duplicate > dup0:
            self.metrics.duplicates.labels(d).inc(buf.rows_duplicate - dup0)
            self.report["duplicates"] += buf.rows_duplicate - dup0
        if buf.rows_late > late0:
            self.metrics.late.labels(d).inc(buf.rows_late - late0)
        if d == "flows_enriched" and buf.watermark is not None:
            self._enriched_wm[partition] = (buf.watermark, time.monotonic())

    def _note_resume(self, route: Route, partition: int, table) -> None:
        """First rows of a partition resumed from a commit: hours up to theirs may lack earlier rows."""
        tp = (route.topic, partition)
        if tp not in self._resumed or len(table) == 0:
            return
        self._resumed.discard(tp)
        col = layout.spec(route.dataset).time_column
        t_max = int(table[col].max()) if isinstance(table, np.ndarray) else int(pc.max(table[col]).as_py())
        h = int(layout.hour_index(t_max))
        self._partial_through = h if self._partial_through is None else max(self._partial_through, h)

    def _bad(self, route: Route, partition: int, offset: int, err: Exception) -> None:
        reason = _reason(err)
        self.metrics.undecodable.labels(route.dataset, reason).inc()
        self.report["undecodable"] += 1
        self.ratelog.warning(f"undecodable:{route.topic}", "skipping undecodable message %s[%d]@%d (%s): %s",
                             route.topic, partition, offset, reason, err)
        self.sink.buffer(route.dataset, partition, start_offset=offset).advance(offset)

    def _flush_records(self, route: Route, partition: int, rows: list[dict], offsets: list[int]) -> None:
        """Add consecutive record messages of one partition as one table (one row per message)."""
        if not rows:
            return
        avsc = layout.spec(route.dataset).avsc
        try:
            table = table_from_dicts(rows, avsc)
        except Exception:  # find the bad message(s); the rest go in offset order
            good_rows, good_offs = [], []
            for r, o in zip(rows, offsets):
                try:
                    table_from_dicts([r], avsc)
                except Exception as e:
                    self._flush_records(route, partition, good_rows, good_offs)
                    good_rows, good_offs = [], []
                    self._bad(route, partition, o, codec.CodecError(f"record does not fit {avsc}: {e}"))
                    continue
                good_rows.append(r)
                good_offs.append(o)
            self._flush_records(route, partition, good_rows, good_offs)
            return
        self._note_resume(route, partition, table)
        self._add(route, partition, table, offsets)
        if self.summaries_enabled and route.event_kind:
            for r in rows:  # detector outputs: low volume
                self.book.add_event(route.event_kind, r)

    def handle(self, messages) -> None:
        """Decode and buffer a list of consumed messages (any topics and partitions, offset order per partition)."""
        pending: dict[tuple[str, int], tuple[Route, list, list]] = {}
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.metrics.errors.labels("kafka").inc()
                    self.ratelog.warning(f"kafka:{err.code()}", "consumer error: %s", err)
                continue
            route = self.routes.get(m.topic())
            if route is None:
                continue
            part, off = m.partition(), m.offset()
            buf = self.sink.buffer(route.dataset, part, start_offset=off)
            self.metrics.messages.labels(route.dataset).inc()
            self.report["messages"] += 1
            key = (route.topic, part)
            if off <= (pending[key][2][-1] if key in pending else buf.consumed):
                continue  # already handled (re-delivery within this process)
            value = m.value()
            if route.batch:
                try:
                    if not value:
                        raise codec.CodecError("empty message")
                    arr = codec.decode_batch(value, expect=route.schema)
                    if arr.dtype != self._dtypes[route.topic]:  # buffers keep decoded arrays of the record dtype as is
                        arr = table_from_columns(arr, codec.BATCHES[route.schema], text_addresses=False)
                except Exception as e:
                    self._bad(route, part, off, e)
                    continue
                self._note_resume(route, part, arr)
                self._add(route, part, arr, off)
                table = arr
                if self.summaries_enabled and route.dataset == "flows_enriched" and len(table):
                    late0 = self.book.late_rows
                    self.book.add_flows(table)
                    if self.book.late_rows > late0:
                        self.metrics.summary_late.inc(self.book.late_rows - late0)
                continue
            try:
                if not value:
                    raise codec.CodecError("empty message")
                rec = codec.decode_record(value, expect=route.schema)
            except Exception as e:
                if key in pending:  # keep offset order: earlier good records first
                    r, rows, offs = pending.pop(key)
                    self._flush_records(r, part, rows, offs)
                self._bad(route, part, off, e)
                continue
            entry = pending.setdefault(key, (route, [], []))
            entry[1].append(rec)
            entry[2].append(off)
        for (topic, part), (route, rows, offs) in pending.items():
            self._flush_records(route, part, rows, offs)

    # ------------------------------------------------------------------ output

    def _commit(self, offsets: dict[tuple[str, int], int]) -> bool:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            res = self.consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            self.metrics.errors.labels("commit").inc()
            self.ratelog.warning("commit", "offset commit failed: %s", e)
            return False
        ok = True
        for tp in res or []:
            if tp.error is not None:
                ok = False
                self.metrics.errors.labels("commit").inc()
                self.ratelog.warning("commit", "offset commit failed for %s[%d]: %s", tp.topic, tp.partition, tp.error)
            else:
                self._committed[(tp.topic, tp.partition)] = tp.offset
        self.metrics.commits.inc()
        self.report["commits"] += 1
        self._last_commit = time.monotonic()
        return ok

    def _commits_of(self, plan: FlushPlan) -> dict[tuple[str, int], int]:
        commits = {}
        for (dataset, part), off in plan.commit_offsets.items():
            tp = (self.by_dataset[dataset].topic, part)
            if off > self._committed.get(tp, -1):
                commits[tp] = off
        return commits

    def _execute(self, plan: FlushPlan, force: bool = False) -> bool:
        """Write the plan's files, commit its offsets, confirm it (with the writer thread: queue the
        files not yet queued; :meth:`_collect` commits and confirms once they are durable).
        False when a write failed."""
        commits = self._commits_of(plan)
        if not plan.files:  # nothing unconfirmed, nothing in flight: every offset planned is durable
            if commits and (force or time.monotonic() - self._last_commit >= COMMIT_INTERVAL_S):
                self._commit(commits)
            return True
        if self.write_queue_rows > 0:
            return self._submit(plan, commits, force)
        self.crash.plans += 1
        self.report["plans"] += 1
        self.crash.at("before_write")
        for i, f in enumerate(plan.files):
            try:
                self.writer.write(f)
            except Exception as e:
                self._write_error(f, e)
                return False
            self._written(f)
            if i == 0:
                self.crash.at("mid_write")
        self.crash.at("after_write")
        if commits:
            self._commit(commits)  # files are durable: confirm even if the commit failed (re-reads are de-duplicated)
        self.crash.at("after_commit")
        self.sink.confirm(plan)
        self._write_ok()
        return True

    def _written(self, f) -> None:
        self.metrics.files.labels(f.dataset).inc()
        self.metrics.rows.labels(f.dataset).inc(f.num_rows)
        self.report["files_written"] += 1
        self.report["rows_written"] += f.num_rows

    def _write_error(self, f, e: BaseException) -> None:
        self.metrics.errors.labels("write").inc()
        self.ratelog.warning("write", "writing %s failed (nothing committed past it; retrying in %.0fs): %r",
                             f.key(self.writer.root) if f is not None else "?", self._retry_s, e)
        self._write_failed()

    # -- writer thread

    def _queue(self) -> WriteQueue:
        if self._wq is None:
            self._wq = WriteQueue(self.writer.write, max_rows=self.write_queue_rows,
                                  before=lambda job: self.crash.at("before_write", job.seq),
                                  on_file=lambda job, i: i == 0 and self.crash.at("mid_write", job.seq))
        return self._wq

    def _submit(self, plan: FlushPlan, commits: dict, force: bool) -> bool:
        wq = self._queue()
        # No _collect() between planning and here: a job reported now would drop its files from
        # _inflight while the plan still lists them, and they would be written a second time.
        if wq.halted:  # a write failed: nothing more is queued until every earlier job is reported
            return False
        files = [f for f in plan.files if f.ident not in self._inflight]
        if files:
            job = wq.submit(plan, files, commits)
            self._inflight.update(f.ident for f in files)
            self.crash.plans = job.seq
            self.report["plans"] += 1
            self.crash.at("in_flight", job.seq)
        if force:
            self.drain()
        return not (self._wq.halted or self._retry_at > time.monotonic())

    def _collect(self) -> None:
        """Commit and confirm the jobs the writer thread finished, in order; report a failure.

        After a failed write the queue stays halted (later jobs are skipped, not written)
        until every job submitted before is reported here; then it accepts jobs again, and
        the next plan (after the retry delay) queues the failed files anew.
        """
        wq = self._wq
        if wq is None:
            return
        while True:
            jobs = wq.finished()
            for job in jobs:
                self._inflight.difference_update(f.ident for f in job.files)
                if job.status == OK:
                    self._job_written(job)
                elif job.status == FAILED:
                    self._write_error(job.failed_file, job.error)
                    log.debug("write failure", exc_info=job.error)
            if not (wq.halted and wq.pending == 0):
                return
            if not jobs:
                wq.resume()
                return

    def _job_written(self, job: WriteJob) -> None:
        for f in job.files:
            self._written(f)
        self.crash.at("after_write", job.seq)
        commits = {tp: off for tp, off in job.commits.items()
                   if tp not in self._lost and off > self._committed.get(tp, -1)}
        if commits:
            self._commit(commits)  # files are durable: confirm even if the commit failed (re-reads are de-duplicated)
        self.crash.at("after_commit", job.seq)
        self.sink.confirm(FlushPlan(job.files))
        self._write_ok()

    def drain(self) -> None:
        """Wait until every queued file is written (or failed), then commit and confirm."""
        if self._wq is not None:
            self._wq.wait_idle()
            self._collect()

    def _write_failed(self) -> None:
        self._retry_at = time.monotonic() + self._retry_s
        self._retry_s = min(self._retry_s * 2, 30.0)
        if not self._paused and self.consumer is not None and self._assigned:
            self.consumer.pause([TopicPartition(t, p) for t, p in self._assigned])
            self._paused = True

    def _write_ok(self) -> None:
        self._retry_s = 1.0
        if self._paused and self.consumer is not None:
            self.consumer.resume([TopicPartition(t, p) for t, p in self._assigned])
            self._paused = False

    def flush(self, force: bool = False) -> None:
        """Plan, write, commit and confirm whatever is due (everything with ``force``); then summaries."""
        self._collect()
        if not force and time.monotonic() < self._retry_at:
            return
        self._execute(self.sink.flush_plan(self._now_ms(), force=force), force=force)
        self._emit_summaries()
        self._update_gauges()

    def summary_watermark(self) -> int | None:
        """Event time up to which flows.enriched is complete: the slowest partition that received rows
        within ``archive.idle_flush_s`` (idle partitions do not hold summaries back), else the latest."""
        if not self._enriched_wm:
            return None
        now = time.monotonic()
        active = [wm for wm, t in self._enriched_wm.values() if now - t < self.idle_s]
        return min(active) if active else max(wm for wm, _ in self._enriched_wm.values())

    def _emit_summaries(self) -> None:
        wm = self.summary_watermark()
        if not self.summaries_enabled or wm is None or not self.book.hours:
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

    def _update_gauges(self) -> None:
        buffered: dict[str, int] = {}
        lag: dict[str, int] = {}
        for (dataset, part), buf in self.sink.buffers.items():
            buffered[dataset] = buffered.get(dataset, 0) + buf.buffered_rows
            tp = (self.by_dataset[dataset].topic, part)
            lag[dataset] = lag.get(dataset, 0) + max(0, buf.consumed + 1 - self._committed.get(tp, buf.consumed + 1))
        for d in self.by_dataset:
            self.metrics.buffered.labels(d).set(buffered.get(d, 0))
            self.metrics.lag.labels(d).set(lag.get(d, 0))

    # ------------------------------------------------------------------ run

    def stop(self, *_args) -> None:
        """Ask the loop to stop (signal handler): it flushes, commits and returns."""
        self._stopping = True

    def run(self, max_seconds: float | None = None, stop_event: threading.Event | None = None,
            idle_exit_s: float | None = None) -> dict:
        """Consume until stopped (SIGTERM/SIGINT, ``stop_event``, ``max_seconds``, or ``idle_exit_s`` without
        a message after the first assignment); then flush everything, commit and close. Returns counters."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.stop)
        try:
            from fabricflow.topics import ensure_topics

            ensure_topics(self.settings.kafka)
        except Exception as e:  # topics may be managed elsewhere
            log.warning("cannot ensure topics exist: %s", e)
        if self.metrics_port:
            from ingest.metrics import serve_metrics

            self.http = serve_metrics(self.metrics, self.metrics_bind, self.metrics_port)
            log.info("metrics on http://%s:%d/metrics", self.metrics_bind, self.metrics_port)
        self.consumer = Consumer(self._consumer_config())
        self.consumer.subscribe(list(self.routes), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        log.info("archiving %d topics to %s (group %s)", len(self.routes), self.settings.archive.url, self.group_id)
        start = time.monotonic()
        last_msg = None
        try:
            while not self._stopping:
                now = time.monotonic()
                if stop_event is not None and stop_event.is_set():
                    break
                if max_seconds is not None and now - start >= max_seconds:
                    break
                if idle_exit_s is not None and self._assigned_once:
                    last_msg = last_msg or now
                    if now - last_msg >= idle_exit_s:
                        break
                msgs = self.consumer.consume(self.batch_messages, timeout=0.2)
                self.metrics.last_loop = time.monotonic()
                for i in range(0, len(msgs), FLUSH_EVERY_MESSAGES):  # files due are queued while decoding goes on
                    self.handle(msgs[i:i + FLUSH_EVERY_MESSAGES])
                    self.flush()
                if any(m.error() is None for m in msgs):
                    last_msg = time.monotonic()
                if not msgs:
                    self.flush()
            log.info("stopping: flushing buffers")
            self._retry_at = 0.0
            self.flush(force=True)
            self.sink.buffers.clear()  # flushed and committed; nothing left for the revoke during close()
        finally:
            if self._wq is not None:
                self._wq.close()  # anything still queued (after an error) is written, never committed
                self._wq = None
            try:
                self.consumer.close()
            except Exception as e:  # pragma: no cover - close after a broker loss
                log.warning("consumer close: %s", e)
            if self.producer is not None:
                self.producer.flush(10)
                self.producer = None  # destroyed: no client threads left behind
            if self.http is not None:
                self.http.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return dict(self.report)
