"""The live reader: a confluent-kafka consumer thread feeding :class:`console.live.LiveStore`.

Its own consumer group (``console.group_id``) reads the detector output topics and
``counters.raw.v1``. Values are Avro single-object messages (``schemas.codec``) or JSON
(patterns); an undecodable message is counted and skipped. On assignment each
partition starts at ``console.lookback_s`` before now where the broker can find
offsets by time, else at the beginning. No offsets are committed: the console
is a viewer, a restart simply reads the look-back again.

Broker health for the page's banner: ``ok`` turns false on a transport error or a
failed metadata request and true again on the next successful one.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from fabricflow import streams
from fabricflow.kafka import client_config
from schemas import codec
from schemas.matrix import decode_window

from sinks.metrics.membership import JOBS_SNAPSHOT_MS, LiveMembership

from .live import LiveStore

log = logging.getLogger(__name__)


def decode_value(value: bytes) -> dict:
    """A detector output record from a Kafka message value (Avro single-object or JSON)."""
    if value[:1] in (b"{", b"["):
        return json.loads(value)
    return codec.decode_record(value)


class KafkaFeed:
    def __init__(self, settings, store: LiveStore):
        self.settings = settings
        self.store = store
        # topic -> output kind, from the stream catalog: every processor output the live store shows
        self.topic_kind = {streams.topic_of(settings.kafka, s): kind for kind, s in streams.OUTPUTS.items()
                           if LiveStore.shows(kind)}
        self.counters_topic = settings.kafka.topics.counters_raw
        # change markers and step marks (changes.v1, steps.v1) -> the MarkStore the server gives (console/marks.py)
        self.mark_topics = {settings.kafka.topics.changes: "change", settings.kafka.topics.steps: "step"}
        # live job membership (inventory.jobs.v1): the jobs the views show follow the scheduler
        self.jobs_topic = settings.kafka.topics.jobs
        self.live_jobs = LiveMembership()
        self.marks = None
        self.ok = False
        self.error: str | None = "not connected yet"
        self.since_ms = int(time.time() * 1000)
        self.bad_messages = 0
        self.messages = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.beat = lambda: None  # called once per pass of the reader's loop (the console's health flag)

    # -- lifecycle

    def start(self) -> KafkaFeed:
        self._thread = threading.Thread(target=self._run, name="console-kafka", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def status(self) -> dict:
        return {"ok": self.ok, "error": self.error, "since_ms": self.since_ms, "messages": self.messages,
                "bad_messages": self.bad_messages, "bootstrap_servers": self.settings.kafka.bootstrap_servers}

    # -- internals

    def _set(self, ok: bool, error: str | None) -> None:
        if ok != self.ok:
            self.since_ms = int(time.time() * 1000)
            (log.info if ok else log.warning)("console: broker %s%s", "reachable" if ok else "unreachable",
                                              f" ({error})" if error else "")
        self.ok, self.error = ok, error

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
            self._set(False, err.str())

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        lookback = self.settings.console.lookback_s
        start = int((time.time() - lookback) * 1000)
        try:
            # the job membership from one snapshot period earlier (every holding is published at least hourly)
            found = consumer.offsets_for_times([TopicPartition(p.topic, p.partition, start - JOBS_SNAPSHOT_MS
                                                               if p.topic == self.jobs_topic else start)
                                                for p in parts], timeout=5)
            for p, f in zip(parts, found):
                p.offset = f.offset if f.offset >= 0 else OFFSET_BEGINNING
        except KafkaException:
            for p in parts:
                p.offset = OFFSET_BEGINNING
        consumer.assign(parts)

    def _consumer(self) -> Consumer:
        k = self.settings.kafka
        conf = client_config(k) | {
            "client.id": f"{k.client_id}-console",
            "group.id": self.settings.console.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": k.session_timeout_ms,
            "error_cb": self._on_error,
            "fetch.wait.max.ms": 200,
        }
        return Consumer(conf)

    def _run(self) -> None:
        consumer = None
        last_meta = 0.0
        while not self._stop.is_set():
            self.beat()
            try:
                if consumer is None:
                    consumer = self._consumer()
                    consumer.subscribe(list(self.topic_kind) + [self.counters_topic] + list(self.mark_topics)
                                       + [self.jobs_topic],
                                       on_assign=self._on_assign)
                now = time.monotonic()
                if now - last_meta > (5.0 if self.ok else 2.0):
                    last_meta = now
                    try:
                        consumer.list_topics(timeout=2)
                        self._set(True, None)
                    except KafkaException as e:
                        self._set(False, str(e.args[0].str() if e.args else e))
                msgs = consumer.consume(2000, 0.3)
                for m in msgs:
                    if m.error() is not None:
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self._on_error(m.error())
                        continue
                    self._take(m.topic(), m.value())
            except Exception as e:  # never let the viewer's reader die: log, back off, rebuild the consumer
                log.exception("console: live reader error; restarting the consumer")
                self._set(False, f"{type(e).__name__}: {e}")
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:
                        pass
                    consumer = None
                self._stop.wait(2.0)
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                pass

    def take_jobs(self, rows: list[dict], now_ms: int | None = None) -> None:
        """Membership rows: the layout's jobs become those holding nodes within the console's lookback (the
        inventory file's jobs until the first row)."""
        if not self.live_jobs.add(rows):
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        names = {n.name for n in self.store.layout.nodes}
        jobs = self.live_jobs.jobs_between(now - int(self.settings.console.lookback_s * 1000), now + 1, names)
        with self.store.lock:
            self.store.layout.jobs = jobs
            self.store.version += 1

    def _take(self, topic: str, value: bytes | None) -> None:
        if not value:
            return
        self.messages += 1
        try:
            if topic == self.counters_topic:
                self.store.add_counters(codec.decode_batch(value, expect="counter_batch"))
                return
            if topic == self.jobs_topic:
                self.take_jobs([codec.decode_record(value, expect="job_membership")])
                return
            mark = self.mark_topics.get(topic)
            if mark is not None:
                if self.marks is not None:
                    self.marks.add(mark, codec.decode_record(value, expect=f"{mark}_mark"))
                    self.store.version += 1
                return
            kind = self.topic_kind.get(topic)
            if kind == "matrix":  # matrix.windows.v2: one columnar window per message
                self.store.add(kind, decode_window(value))
            elif kind is not None:
                self.store.add(kind, decode_value(value))
        except (codec.CodecError, ValueError, KeyError, TypeError) as e:
            self.bad_messages += 1
            if self.bad_messages <= 5 or self.bad_messages % 1000 == 0:
                log.warning("console: skipped an undecodable message on %s (%d so far): %s", topic, self.bad_messages, e)
