"""The flow-metrics service: Kafka (processors' outputs, counter samples) -> Prometheus /metrics.

Thin wiring around :class:`sinks.metrics.state.MetricsState`: one confluent-kafka consumer (group
``metrics.group``, manual commits) applies every message under a lock (malformed ones are counted and
skipped), and an HTTP server serves ``/metrics`` and ``/healthz``. A scrape takes the values and the
offsets they reflect in one step and has the consumer thread commit those offsets before the response
is written, so a restart neither double counts nor loses what a scrape showed; a new group starts
``metrics.start_lookback_s`` back. In process: ``MetricsService(settings).start()`` (``.url``,
``.stop()``); ``fabricflow sink metrics`` runs :meth:`MetricsService.run` in the foreground.
Restart semantics and one sink per group: docs/metrics.md.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from fabricflow import streams
from fabricflow.kafka import consumer_config
from fabricflow.logs import RateLimitedLog
from fabricflow.service import Service
from processors.config_files import InventoryWatcher
from processors.logic.enrich.inventory import Inventory

from .decode import STREAM_OF
from .membership import JOBS_SNAPSHOT_MS
from .state import KINDS, MetricsState

log = logging.getLogger("fabricflow.metrics")

HEALTHY_LOOP_S = 30.0
COMMIT_WAIT_S = 10.0  # a scrape waits this long for the consumer thread to commit its offsets


class MetricsService:
    """Consume the output topics, serve /metrics; ``start``/``stop`` in process, ``run`` in the foreground."""

    def __init__(
        self,
        settings,
        *,
        inventory: Inventory | None = None,
        bind: str | None = None,
        port: int | None = None,
        group: str | None = None,
        batch_messages: int = 2000,
        clock=time.time,
    ):
        self.settings = settings
        m = settings.metrics
        self.bind = bind if bind is not None else m.bind
        self.port = port if port is not None else m.port
        self.group = group or m.group
        self.batch_messages = batch_messages
        self.clock = clock
        self.lookback_ms = int(m.start_lookback_s * 1000)
        self.watcher: InventoryWatcher | None = None
        if inventory is None:
            path = m.inventory or settings.processors.inventory
            if path:
                self.watcher = InventoryWatcher(path, settings.processors.inventory_reload_s)
                inventory = self.watcher.inventory
        self.topic_kind = {streams.topic_of(settings.kafka, STREAM_OF[k]): k for k in KINDS}
        self.state = MetricsState(inventory, m.series_budget, {k: t for t, k in self.topic_kind.items()},
                                  duplicate_horizon_s=m.duplicate_horizon_s)
        self.state.live_jobs.pod_addresses = settings.processors.jobs.kubernetes.pod_addresses
        self.registry = CollectorRegistry()
        self.registry.register(self.state)
        self.lock = threading.Lock()
        self.ratelog = RateLimitedLog(log)
        self.applied: dict[tuple[str, int], int] = {}  # (topic, partition) -> next offset not yet applied
        self._commit_q: queue.Queue = queue.Queue()  # (offsets, done event) from scrapes to the consumer thread
        self._committed: dict[tuple[str, int], int] = {}
        self._fresh: set[tuple[str, int]] = set()  # partitions without a committed offset at assignment
        self.start_ms = int(clock() * 1000)
        self.consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self.service = Service("metrics sink", self.registry, stall_s=HEALTHY_LOOP_S)
        self.service.add_check("consumer", lambda: self._thread is None or self._thread.is_alive() or "consumer thread died")
        self.report = {"messages": 0, "scrapes": 0, "commits": 0, "errors": 0}

    # ------------------------------------------------------------------ HTTP

    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}/metrics"

    def healthy(self) -> bool:
        return self.service.healthy()

    def scrape(self) -> bytes:
        """The /metrics body; the offsets of the messages it reflects are committed before it is returned."""
        with self.lock:  # the values and their offsets in one step
            body = self.state.exposition()
            self.state.scraped()
            offsets = dict(self.applied)
        self.report["scrapes"] += 1
        if offsets and not self._request_commit(offsets):
            self.ratelog.warning("scrape-commit", "offsets of a scrape not committed in time (a later scrape will)")
        return body

    def _request_commit(self, offsets: dict[tuple[str, int], int]) -> bool:
        """Have the consumer thread commit ``offsets`` (librdkafka calls stay on that thread); True once done."""
        if self._thread is None or not self._thread.is_alive():
            return False
        done = threading.Event()
        self._commit_q.put((offsets, done))
        return done.wait(COMMIT_WAIT_S)

    def _start_http(self) -> None:
        self.service.serve_http(self.bind, self.port, scrape=self.scrape, required=True)
        self.port = self.service.http.server_port  # port 0: the one the system chose
        log.info("flow metrics on %s", self.url)

    # ------------------------------------------------------------------ Kafka

    def _consumer_config(self) -> dict:
        return consumer_config(self.settings.kafka, self.group, "metrics")

    def _on_assign(self, consumer, partitions) -> None:
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as e:
            log.warning("cannot read committed offsets (treating partitions as resumed): %s", e)
            committed = [TopicPartition(p.topic, p.partition, 0) for p in partitions]
        fresh = [p for p in committed if p.offset < 0]
        for p in fresh:
            self._fresh.add((p.topic, p.partition))
        for p in committed:
            if p.offset >= 0:
                self._committed[(p.topic, p.partition)] = p.offset
        log.info("assigned %d partitions (%d without committed offsets: messages older than %.0f s skipped)",
                 len(partitions), len(fresh), self.lookback_ms / 1000)
        self.service.mark_ready(f"serving {self.url}, consuming {len(partitions)} partitions as a member of consumer "
                                f"group {self.group}")
        if fresh and self.lookback_ms >= 0:
            self._seek_fresh(consumer, partitions, {(p.topic, p.partition) for p in fresh})

    def _seek_fresh(self, consumer, partitions, fresh) -> None:
        """Start fresh partitions near the lookback time where the broker can say where that is (optional)."""
        since = self.start_ms - self.lookback_ms
        try:
            found = consumer.offsets_for_times([TopicPartition(t, p, self._since(t, since)) for t, p in fresh], timeout=5)
        except KafkaException as e:
            log.info("offsets_for_times unavailable (%s): reading fresh partitions from the start", e)
            return
        at = {(p.topic, p.partition): p.offset for p in found if p.error is None and p.offset > 0}
        if not at:
            return
        for p in partitions:
            if (p.topic, p.partition) in at:
                p.offset = at[(p.topic, p.partition)]
        consumer.assign(partitions)

    def _since(self, topic: str, since_ms: int) -> int:
        """Where a fresh partition starts: the lookback, and for the job membership one snapshot period more
        (every holding is published at least hourly: the last snapshot before the lookback is read)."""
        return since_ms - JOBS_SNAPSHOT_MS if self.topic_kind.get(topic) == "jobs" else since_ms

    def _on_revoke(self, consumer, partitions) -> None:
        # Scrapes committed what they showed; messages applied since are read again by the next owner (with
        # several instances in one group they may then be shown twice: run one instance, docs/metrics.md).
        self._serve_commits(consumer)
        with self.lock:
            for p in partitions:
                tp = (p.topic, p.partition)
                self.applied.pop(tp, None)
                self._fresh.discard(tp)

    def _serve_commits(self, consumer) -> None:
        """Commit the offsets scrapes asked for (consumer thread)."""
        while True:
            try:
                offsets, done = self._commit_q.get_nowait()
            except queue.Empty:
                return
            self._commit(consumer, offsets)
            done.set()

    def _commit(self, consumer, offsets: dict[tuple[str, int], int]) -> None:
        due = {tp: off for tp, off in offsets.items() if off > self._committed.get(tp, -1)}
        if not due:
            return
        try:
            res = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in due.items()], asynchronous=False)
        except KafkaException as e:
            self.report["errors"] += 1
            self.ratelog.warning("commit", "offset commit failed (retried at the next scrape): %s", e)
            return
        for tp in res or []:
            if tp.error is None:
                self._committed[(tp.topic, tp.partition)] = tp.offset
        self.report["commits"] += 1

    def handle(self, messages) -> None:
        """Apply consumed messages (any topics, offset order per partition) to the state."""
        now = self.clock()
        since = self.start_ms - self.lookback_ms
        groups: dict[str, list] = {}
        offsets: dict[tuple[str, int], int] = {}
        skipped: dict[str, int] = {}
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.report["errors"] += 1
                    self.ratelog.warning(f"kafka:{err.code()}", "consumer error: %s", err)
                continue
            topic, part = m.topic(), m.partition()
            kind = self.topic_kind.get(topic)
            if kind is None:
                continue
            tp = (topic, part)
            offsets[tp] = m.offset() + 1
            if tp in self._fresh:
                ts_type, ts = m.timestamp()
                if ts_type != 0 and 0 <= ts < self._since(topic, since):  # 0 = TIMESTAMP_NOT_AVAILABLE
                    skipped[kind] = skipped.get(kind, 0) + 1
                    continue
            vals, keys = groups.setdefault(kind, ([], []))
            vals.append(m.value())
            keys.append(m.key())
        self.report["messages"] += len(messages)
        with self.lock:
            for kind, n in skipped.items():
                self.state.count_message(kind, n)
                self.state.count_skipped(kind, "before_lookback", n)
            for kind, (values, keys) in groups.items():
                try:
                    self.state.add_values(kind, values, now, keys)
                except Exception:  # a bug must not stop the service: count, log, go on
                    self.report["errors"] += 1
                    self.state.count_undecodable(kind, "internal_error", len(values))
                    log.exception("applying %d %s messages failed", len(values), kind)
            if self.state.reselect_due():
                try:
                    res = self.state.reselect()
                except Exception:  # keep serving with the previous selection
                    self.report["errors"] += 1
                    log.exception("series budget selection failed")
                else:
                    if res["evicted"] or res["left_out"]:
                        log.info("series budget: %(selected)d node pairs with series, %(evicted)d evicted, "
                                 "%(left_out)d folded into other", res)
            self.applied.update(offsets)

    def _loop(self) -> None:
        consumer = self.consumer
        while not self.service.stopping:
            try:
                self._step(consumer)
            except Exception as e:  # never let the consumer thread die: count, log, go on
                self.report["errors"] += 1
                self.ratelog.warning("loop", "consumer loop step failed: %r", e)
                log.debug("consumer loop step failed", exc_info=True)
                time.sleep(0.5)
        self._serve_commits(consumer)  # a scrape that asked while the loop was stopping

    def _step(self, consumer) -> None:
        msgs = consumer.consume(self.batch_messages, timeout=0.2)
        self.service.beat()
        if msgs:
            self.handle(msgs)
        self._serve_commits(consumer)
        if self.watcher is not None and self.watcher.maybe_reload(time.monotonic()):
            with self.lock:
                self.state.set_inventory(self.watcher.inventory)
            log.info("inventory reloaded from %s", self.watcher.path)
        elif self.watcher is not None and self.watcher.last_error:
            self.ratelog.warning("inventory", "inventory not reloaded (the previous one stays): %s",
                                 self.watcher.last_error)

    def _open(self) -> None:
        self.service.wait_for_kafka(self.settings.kafka)  # Unreachable (one line) after kafka.wait_timeout_s
        self.service.ensure_topics(self.settings.kafka, required=False)  # topics may be managed elsewhere
        self.consumer = Consumer(self._consumer_config())
        self.consumer.subscribe(list(self.topic_kind), on_assign=self._on_assign, on_revoke=self._on_revoke)
        log.info("consuming %d topics (group %s), series budget %d", len(self.topic_kind), self.group,
                 self.settings.metrics.series_budget)

    def _close(self) -> None:
        if self.consumer is not None:
            try:
                self.consumer.close()  # nothing to commit: scrapes committed what they showed
            except Exception as e:  # pragma: no cover - close after a broker loss
                log.warning("consumer close: %s", e)
            self.consumer = None
        self.service.stop()  # the HTTP server

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> MetricsService:
        """Start the HTTP server and the consumer thread; returns at once (``url`` is then final)."""
        self._start_http()
        self._open()
        self._thread = threading.Thread(target=self._loop, name="metrics-consumer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> dict:
        """Stop consuming and close (offsets stay where the last scrape committed them); returns counters."""
        self.service.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._close()
        return dict(self.report)

    def run(self, max_seconds: float | None = None, stop_event: threading.Event | None = None) -> dict:
        """Foreground: serve and consume until SIGTERM/SIGINT, ``stop_event`` or ``max_seconds``."""
        start = time.monotonic()
        with self.service.signals():
            try:
                self.start()
                while not self.service.wait(0.2):
                    if stop_event is not None and stop_event.is_set():
                        break
                    if max_seconds is not None and time.monotonic() - start >= max_seconds:
                        break
            finally:
                report = self.stop()
        return report
