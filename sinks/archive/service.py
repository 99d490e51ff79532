"""The archive sink service: Kafka topics -> hourly Parquet archive (and hourly summaries -> Kafka).

One consumer (manual commits) reads every archived topic of the stream catalog, decodes each message and
feeds :class:`sinks.archive.buffer.ArchiveSink`; :class:`sinks.archive.commit_ledger.CommitLedger` writes the files and
commits; :class:`sinks.archive.summary_emitter.SummaryEmitter` produces the hourly summaries. This module is the
loop, the rebalance callbacks and the decoding. Design and guarantees: docs/archive.md.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException

from fabricflow import streams
from fabricflow.kafka import consumer_config
from fabricflow.logs import RateLimitedLog
from fabricflow.service import Service
from schemas import codec
from schemas.matrix import SCHEMA as MATRIX_V2, MatrixWindow, decode_window
from sinks.archive import layout
from sinks.archive.buffer import DEFAULT_MAX_ROWS, ArchiveSink, batch_dtype
from sinks.archive.flush import FlushPlan
from sinks.archive.index import FsWrittenIndex
from sinks.archive.parquet import ParquetWriter
from sinks.archive.metrics import SinkMetrics
from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from sinks.archive.commit_ledger import CommitLedger
from sinks.archive.compaction import CompactionSchedule
from sinks.archive.fs import ArchiveUnavailable, archive_filesystem
from sinks.archive.retention import RetentionSchedule, retention_policy
from sinks.archive.summary_emitter import SummaryEmitter

__all__ = ["ArchiveService", "Route", "routes_for"]

log = logging.getLogger("fabricflow.sink")

DEFAULT_GROUP = "fabricflow-archive"
DEFAULT_METRICS_PORT = 9182
DEFAULT_WRITE_QUEUE_ROWS = 1_000_000
FLUSH_EVERY_MESSAGES = 64  # plan (and queue due files) at least this often while a large poll is handled
FLUSH_EVERY_S = 0.1  # ... and otherwise at most this often (a plan, the summaries and the gauges cost ~0.1 ms)


def _storage_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return isinstance(e, (OSError, ConnectionError, TimeoutError)) or mod.startswith(("botocore", "aiobotocore", "aiohttp", "s3fs"))


@dataclass(frozen=True)
class Route:
    """One archived topic: its dataset, wire schema and whether messages are columnar batches."""

    topic_key: str
    topic: str
    dataset: str
    schema: str
    batch: bool
    event_kind: str | None = None  # SummaryBook kind for detector topics


def routes_for(kafka) -> dict[str, Route]:
    """Topic name -> :class:`Route` for every archived stream of the catalog (:mod:`fabricflow.streams`)."""
    out = {}
    for s in streams.DATASETS.values():
        topic = streams.topic_of(kafka, s)
        out[topic] = Route(s.name, topic, s.dataset, s.schema, s.batch, s.event_kind)
    return out


def matrix_table(w: MatrixWindow) -> pa.Table:
    """The ``matrix_windows`` rows (``matrix_cell`` columns) of one ``matrix.windows.v2`` message: the names as
    Arrow dictionaries over its label table (no string per cell), the values as they are."""
    n = len(w)
    labels = pa.array(w.labels, type=pa.string(), from_pandas=False)
    cols = {"window_start_ms": np.full(n, w.window_start_ms, np.int64),
            "window_end_ms": np.full(n, w.window_end_ms, np.int64),
            "level": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([w.level])),
            **{f: pa.DictionaryArray.from_arrays(pa.array(getattr(w, f), pa.int32()), labels)
               for f in ("src", "dst", "category")},
            **w.values}
    return table_from_columns(cols, "matrix_cell", text_addresses=False)


class ArchiveService:
    """Consume the archived topics and write the hourly Parquet archive (docs/archive.md).

    ``fs``/``root`` default to :func:`sinks.archive.fs.archive_filesystem` of the settings;
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
        on_step=None,
    ) -> None:
        self.settings = settings
        a = settings.archive
        injected_fs = fs is not None
        if fs is None:
            fs, root = archive_filesystem(a, write=True)
        self.fs, self.root = fs, root
        self.writer = ParquetWriter(fs, root)
        if write_queue_rows is None:
            write_queue_rows = getattr(a, "write_queue_rows", DEFAULT_WRITE_QUEUE_ROWS)
        self.group_id = group_id
        self.routes = routes_for(settings.kafka)
        self._dtypes = {r.topic: batch_dtype(codec.record_of(r.schema)) for r in self.routes.values() if r.batch}
        self.by_dataset = {r.dataset: r for r in self.routes.values()}
        self.sink = ArchiveSink(
            index_factory=lambda d, p: FsWrittenIndex(self.fs, self.root, d, p),
            grace_ms=int(a.grace_s * 1000), idle_ms=int(a.idle_flush_s * 1000), max_rows=max_rows,
            max_chunk_age_ms=int(a.max_file_age_s * 1000),
        )
        self.batch_messages = batch_messages
        self.clock = clock
        self.metrics = SinkMetrics()
        self._counted: dict[str, tuple] = {}  # dataset -> its (messages, rows_in) children: no labels() per message
        # retention on a schedule (archive.retention_interval_s); a bad retention_days fails here, at start
        fresh_client = not injected_fs and a.url.startswith("s3://")  # s3fs: one client per thread
        self.retention = RetentionSchedule(
            (lambda: archive_filesystem(a, write=True)[0]) if fresh_client else (lambda: self.fs),
            self.root, retention_policy(a.retention_days), a.retention_interval_s, log, self.metrics,
        )
        # rollup compaction on a schedule (archive.compaction_interval_s), never at once with retention
        self.compaction = CompactionSchedule(
            self.retention.fs_factory, self.root, self._committed_by_dataset, a.compaction_interval_s, log,
            self.metrics, grace_ms=int(a.grace_s * 1000), lookback_h=a.compaction_lookback_h,
            clock=lambda: int(self.clock() * 1000), lock=self.retention.lock,
        )
        self.metrics_port = metrics_port if metrics_port is not None else getattr(a, "metrics_port", DEFAULT_METRICS_PORT)
        self.metrics_bind = getattr(a, "metrics_bind", settings.ingest.metrics_bind)
        self.ratelog = RateLimitedLog(log)
        self.report = {"messages": 0, "rows_in": 0, "rows_written": 0, "files_written": 0, "undecodable": 0,
                       "duplicates": 0, "summaries": 0, "commits": 0, "plans": 0}
        self.consumer: Consumer | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._assigned_once = False
        self.ledger = CommitLedger(self.writer, self.sink, self.metrics, self.report,
                                   topic_of=lambda dataset: self.by_dataset[dataset].topic,
                                   consumer=lambda: self.consumer, assigned=lambda: self._assigned,
                                   write_queue_rows=write_queue_rows, ratelog=self.ratelog, on_step=on_step)
        self.summaries = SummaryEmitter(settings, self.metrics, self.report, self.ratelog, enabled=summaries)
        self.service = Service("archive sink", self.metrics.registry)

    def _committed_by_dataset(self) -> dict[tuple[str, int], int]:
        """(dataset, partition) -> committed offset of the partitions assigned now (for the compaction thread:
        copies, taken in one step each; every row below an offset is in a durable file)."""
        committed, assigned = self.ledger.committed.copy(), self._assigned.copy()
        return {(self.routes[t].dataset, p): o for (t, p), o in committed.items()
                if (t, p) in assigned and t in self.routes}

    # ------------------------------------------------------------------ kafka plumbing

    def _consumer_config(self) -> dict:
        # flow batches are ~100 B/row (~400 kB per 4096-row message): fetch many per request; files are written
        # minutes after their rows arrive, so the broker may hold a fetch until 1 MB is there (at most 250 ms):
        # fewer, larger fetches and polls instead of one per small message at moderate rates
        return consumer_config(self.settings.kafka, self.group_id, "archive",
                               **{"max.partition.fetch.bytes": 16 * 1024 * 1024, "fetch.max.bytes": 64 * 1024 * 1024,
                                  "fetch.min.bytes": 1024 * 1024, "fetch.wait.max.ms": 250})

    def _on_assign(self, consumer, partitions) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        log.info("assigned %d partitions", len(tps))
        self._assigned.update(tps)
        self.ledger.lost.difference_update(tps)
        self._assigned_once = True
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as e:
            log.warning("cannot read committed offsets: %s", e)
            committed = []
        for p in committed:
            tp = (p.topic, p.partition)
            if p.offset >= 0:
                self.ledger.committed[tp] = p.offset
                self.summaries.assigned(tp, self.routes.get(p.topic), p.offset)
        self.service.mark_ready(f"consuming {len(tps)} partitions of {len(self.routes)} topics as a member of "
                                f"consumer group {self.group_id}, archive {self.settings.archive.url}")

    def _on_revoke(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        log.info("revoked %d partitions: flushing them", len(tps))
        try:
            plan = FlushPlan()
            now = self._now_ms()
            for topic, part in tps:
                route = self.routes.get(topic)
                buf = self.sink.buffers.get((route.dataset, part)) if route else None
                if buf is not None:
                    plan.extend(buf.flush_plan(now, force=True))  # may list the archive (written index)
            if plan.files or plan.safe_offsets:
                self.ledger.execute(plan, force=True)
            self.drain()  # the partitions' files are durable and committed before they are given up
        except Exception as e:  # the object store is down: give them up uncommitted, as if lost
            # An exception out of a rebalance callback ends the process (seen with the object store stopped
            # during a rebalance, bench/chaos.py s3-stop). Nothing past the last commit is confirmed, so the
            # next owner re-reads it and overwrites any file written meanwhile (keys come from offsets).
            self.metrics.errors.labels("write").inc()
            log.warning("revoked partitions not flushed (%s: %s): their buffers are dropped uncommitted and re-read "
                        "by the next owner", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            self._on_lost(consumer, partitions)
            return
        self._forget(tps, committed=True)

    def _on_lost(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        log.warning("lost %d partitions: dropping their buffers (the new owner re-reads them)", len(tps))
        self.ledger.lost.update(tps)
        self.drain()  # files in flight land before anyone (this process included) lists their hour again
        self._forget(tps)

    def _forget(self, tps, committed: bool = False) -> None:
        for topic, part in tps:
            route = self.routes.get(topic)
            buf = self.sink.buffers.get((route.dataset, part)) if route else None
            if committed and buf is not None and self.ledger.committed.get((topic, part)) == buf.consumed + 1:
                self.summaries.handed_over((topic, part), buf.consumed + 1)
            if route is not None:
                self.sink.drop(route.dataset, part)
                self.metrics.buffered.labels(route.dataset).set(0)
            self.summaries.forget((topic, part), route)
            self.ledger.committed.pop((topic, part), None)
            self._assigned.discard((topic, part))

    # ------------------------------------------------------------------ input

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _counters(self, dataset: str) -> tuple:
        """The (messages, rows received) counters of ``dataset``, bound once."""
        c = self._counted.get(dataset)
        if c is None:
            c = self._counted[dataset] = (self.metrics.messages.labels(dataset), self.metrics.rows_in.labels(dataset))
        return c

    def _add(self, route: Route, partition: int, table, offsets) -> None:
        buf = self.sink.buffer(route.dataset, partition)
        dup0, late0 = buf.rows_duplicate, buf.rows_late
        buf.add(table, offsets)
        d = route.dataset
        n = table.num_rows if isinstance(table, pa.Table) else len(table)
        self._counters(d)[1].inc(n)
        self.report["rows_in"] += n
        if buf.rows_duplicate > dup0:
            self.metrics.duplicates.labels(d).inc(buf.rows_duplicate - dup0)
            self.report["duplicates"] += buf.rows_duplicate - dup0
        if buf.rows_late > late0:
            self.metrics.late.labels(d).inc(buf.rows_late - late0)
        if d == "flows_enriched" and buf.watermark is not None:
            self.summaries.enriched_watermark(partition, buf.watermark)

    def _bad(self, route: Route, partition: int, offset: int, err: Exception) -> None:
        reason = codec.error_reason(err)
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
        self.summaries.note_rows(route, partition, table)
        self._add(route, partition, table, offsets)
        self.summaries.add_events(route.event_kind, rows)
        if route.dataset == "ingest_quality":
            self.summaries.add_quality(rows)

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
            self._counters(route.dataset)[0].inc()
            self.report["messages"] += 1
            key = (route.topic, part)
            if off <= (pending[key][2][-1] if key in pending else buf.consumed):
                continue  # already handled (re-delivery within this process)
            value = m.value()
            if route.schema == MATRIX_V2:  # one window, level and shard: its cells as one table, no dict per cell
                try:
                    if not value:
                        raise codec.CodecError("empty message")
                    table = matrix_table(decode_window(value))
                except Exception as e:
                    self._bad(route, part, off, e)
                    continue
                self.summaries.note_rows(route, part, table)
                self._add(route, part, table, off)
                continue
            if route.batch:
                try:
                    if not value:
                        raise codec.CodecError("empty message")
                    if route.schema in codec.CODED_BATCHES:  # buffered with its codes: no str per row
                        arr = codec.decode_coded(value)
                    else:
                        arr = codec.decode_batch(value, expect=route.schema)
                        if arr.dtype != self._dtypes[route.topic]:  # buffers keep decoded arrays of the record dtype
                            arr = table_from_columns(arr, codec.record_of(route.schema), text_addresses=False)
                except Exception as e:
                    self._bad(route, part, off, e)
                    continue
                self.summaries.note_rows(route, part, arr)
                self._add(route, part, arr, off)
                if route.dataset == "flows_enriched":
                    self.summaries.add_flows(arr)
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

    def flush(self, force: bool = False) -> None:
        """Plan, write, commit and confirm whatever is due (everything with ``force``); then summaries."""
        self.ledger.collect()
        if not force and time.monotonic() < self.ledger.retry_at:
            return
        self.ledger.execute(self.sink.flush_plan(self._now_ms(), force=force), force=force)
        self.summaries.emit()
        self._update_gauges()

    def drain(self) -> None:
        """Wait until every queued file is written (or failed), then commit and confirm."""
        self.ledger.drain()

    def _update_gauges(self) -> None:
        buffered: dict[str, int] = {}
        lag: dict[str, int] = {}
        for (dataset, part), buf in self.sink.buffers.items():
            buffered[dataset] = buffered.get(dataset, 0) + buf.buffered_rows
            tp = (self.by_dataset[dataset].topic, part)
            lag[dataset] = lag.get(dataset, 0) + max(0, buf.consumed + 1 - self.ledger.committed.get(tp, buf.consumed + 1))
        for d in self.by_dataset:
            self.metrics.buffered.labels(d).set(buffered.get(d, 0))
            self.metrics.lag.labels(d).set(lag.get(d, 0))

    # ------------------------------------------------------------------ run

    def stop(self, *_args) -> None:
        """Ask the loop to stop (signal handler): it flushes, commits and returns."""
        self.service.request_stop()

    def run(self, max_seconds: float | None = None, stop_event: threading.Event | None = None,
            idle_exit_s: float | None = None) -> dict:
        """Consume until stopped (SIGTERM/SIGINT, ``stop_event``, ``max_seconds``, or ``idle_exit_s`` without
        a message after the first assignment); then flush everything, commit and close. Returns counters.

        First waits for Kafka and the object store (:class:`fabricflow.readiness.Unreachable`, one line, when
        either does not answer within its ``wait_timeout_s``)."""
        svc = self.service
        with svc.signals():
            svc.wait_for_kafka(self.settings.kafka)
            svc.wait_for_object_store(self.settings.archive, fs=self.fs)
            svc.ensure_topics(self.settings.kafka, required=False)  # topics may be managed elsewhere
            self.retention.start()
            svc.on_stop(self.retention.stop, "retention schedule")
            self.compaction.start()
            svc.on_stop(self.compaction.stop, "compaction schedule")
            if self.metrics_port:
                svc.serve_http(self.metrics_bind, self.metrics_port)
            try:
                self._consume(max_seconds, stop_event, idle_exit_s)
            finally:
                svc.stop()
        return dict(self.report)

    def _consume(self, max_seconds, stop_event, idle_exit_s) -> None:
        self.consumer = Consumer(self._consumer_config())
        self.consumer.subscribe(list(self.routes), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        log.info("archiving %d topics to %s (group %s)", len(self.routes), self.settings.archive.url, self.group_id)
        start = time.monotonic()
        last_msg = None
        last_flush = 0.0
        try:
            while not self.service.stopping:
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
                self.service.beat()
                for i in range(0, len(msgs), FLUSH_EVERY_MESSAGES):  # files due are queued while decoding goes on
                    large = i + FLUSH_EVERY_MESSAGES < len(msgs)
                    try:
                        self.handle(msgs[i:i + FLUSH_EVERY_MESSAGES])
                    except Exception as e:
                        # the written index is read while messages are added: the consumer has moved past
                        # them, so this cannot be retried in place; exiting is safe (commits follow writes)
                        if _storage_error(e):
                            raise ArchiveUnavailable(
                                f"the object store did not answer while reading the archive index "
                                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); exiting: "
                                "a restart waits for it and resumes from the committed offsets") from None
                        raise
                    if large or time.monotonic() - last_flush >= FLUSH_EVERY_S:
                        self.flush()
                        last_flush = time.monotonic()
                if any(m.error() is None for m in msgs):
                    last_msg = time.monotonic()
                if not msgs and time.monotonic() - last_flush >= FLUSH_EVERY_S:
                    self.flush()
                    last_flush = time.monotonic()
            log.info("stopping: flushing buffers")
            self.ledger.retry_at = 0.0
            self.flush(force=True)
            self.sink.buffers.clear()  # flushed and committed; nothing left for the revoke during close()
        finally:
            self.ledger.close()  # anything still queued (after an error) is written, never committed
            try:
                self.consumer.close()
            except Exception as e:  # pragma: no cover - close after a broker loss
                log.warning("consumer close: %s", e)
            self.summaries.close()

