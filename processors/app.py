"""Thin Faust wiring: move batches between topics and :class:`processors.logic.core.ProcessorCore`.

Two agents in one consumer group (``processors.app_id``):

1. ``prepare`` reads ``flows.raw.v1`` and ``counters.raw.v1`` (keyed by exporter),
   ``processors.prepare_batch_messages`` at a time, enriches the flow batches
   together, publishes ``flows.enriched.v1`` (per raw message, same key), and
   re-partitions the flows to ``processors.shuffle.v1`` (one message per shard
   for the batch, its pieces listed in a ``seg`` header) by
   :func:`~processors.logic.core.shard_of` of the enriched records
   (destination job, else destination node), counters by exporter. The
   shuffle carries the raw flow records as ``.npy`` batches
   (:mod:`processors.shuffle`: one copy to write, a view to read);
   ``detect`` enriches them again with the same inventory, unless this
   worker's ``prepare`` kept the enriched rows of that very message. After this step
   each shuffle partition holds everything one detector shard needs: all
   flows into a destination (incast), all intra-job flows (straggler,
   pattern), all flows of a node pair (matrix, segmentation), all counters of
   a switch (link health).
2. ``detect`` reads ``processors.shuffle.v1``; one ProcessorCore per partition
   processes each batch and its outputs go to the output topics.

State: ``detect`` acknowledges shuffle events manually. A shard's snapshot
(core state, the last applied offset, the raw sources applied) is written to
the ``core-state`` table (changelog topic, one record per changelog batch
because of Tansu's high-watermark fault) every
``processors.snapshot_every_messages`` shuffle messages of its partition or
once the oldest uncovered message is ``processors.snapshot_interval_s`` old
(checked on every batch and on the timer), and only then are the events it
covers acknowledged, so the committed shuffle offset never passes the last
snapshot. After a crash, restart or rebalance the snapshot is restored;
re-delivered events at or below its offset are skipped and the ones after it
are applied again to the restored state, so state is exact; outputs are
at-least-once with deterministic keys. On partition revocation and on
shutdown the pending snapshots are written too (fewer events to re-apply;
exactness does not depend on it). The shuffle, output and enriched topics
are produced with confluent-kafka (throughput; platform teams read them);
every offset commit waits until those messages are delivered first
(:class:`_FetchWaitConsumer`), so no committed raw or shuffle offset covers
a message that a crash could still lose.

Timer: every ``processors.tick_s`` seconds each core's windows are closed on
wall-clock time when its stream is idle, and the output producer is polled.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import faust
import numpy as np
from confluent_kafka import Producer
from faust.transport.drivers import aiokafka as faust_aiokafka

from fabricflow.settings import Settings
from schemas import codec, records
from schemas.columns import concat_rows

from . import shuffle
from .logic.core import ProcessorCore, engine_config, shard_of
from .logic.enrich import LabeledFlows
from .logic.inventory import Inventory, InventoryWatcher

log = logging.getLogger("fabricflow.processors")

OUTPUT_SCHEMA = {
    "matrix": ("matrix", "matrix_cell"),
    "incast": ("incast", "incast_event"),
    "straggler": ("straggler", "straggler_score"),
    "link": ("link_health", "link_health"),
    "alert": ("alerts", "alert"),
    "pattern": ("patterns", "pattern"),
}


def _header(headers, name: str) -> str | None:
    """The text of a Kafka message header (Faust gives a dict or a list of pairs), or None."""
    if not headers:
        return None
    items = headers.items() if hasattr(headers, "items") else headers
    for k, v in items:
        if k == name or k == name.encode():
            return v.decode() if isinstance(v, bytes) else v
    return None


def source_of(headers) -> tuple[str, tuple[int, int]] | None:
    """("topic:partition", (offset, chunk)) from a shuffle message's ``src`` header."""
    text = _header(headers, "src")
    if text is None:
        return None
    topic, part, off, chunk = text.rsplit(":", 3)
    return f"{topic}:{part}", (int(off), int(chunk))


def segments_of(headers) -> list[tuple[str, tuple[int, int], int]] | None:
    """[("topic:partition", (offset, chunk), rows), ...] from a shuffle message's ``seg`` header, in row order.

    Only messages that combine the rows of several raw messages (or chunks) have one; None otherwise.
    """
    text = _header(headers, "seg")
    if text is None:
        return None
    out = []
    for piece in text.split(","):
        topic, part, off, chunk, rows = piece.rsplit(":", 4)
        out.append((f"{topic}:{part}", (int(off), int(chunk)), int(rows)))
    return out


def _fill(pieces: list, limit: int):
    """Consecutive groups of ``(src, pos, rows)`` pieces with at most ``limit`` rows each (a bigger piece alone)."""
    group: list = []
    rows = 0
    for piece in pieces:
        if group and rows + piece[2] > limit:
            yield group
            group, rows = [], 0
        group.append(piece)
        rows += piece[2]
    if group:
        yield group


class ProcessorMetrics:
    """Prometheus metrics of a processor worker (``fabricflow_processors_*``), served on ``processors.metrics_port``."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        r = self.registry = CollectorRegistry()
        self.records = Counter("fabricflow_processors_records_total", "Flow records enriched", registry=r)
        self.unknown = Counter("fabricflow_processors_unknown_addresses_total", "Addresses not in the inventory (labelled unknown, kept)", registry=r)
        self.counters = Counter("fabricflow_processors_counter_samples_total", "sFlow counter samples processed", registry=r)
        self.outputs = Counter("fabricflow_processors_outputs_total", "Detector outputs produced", ["kind"], registry=r)
        self.too_late = Gauge("fabricflow_processors_too_late_records", "Records that arrived after their window closed (per worker, since start)", ["window"], registry=r)
        self.errors = Counter("fabricflow_processors_errors_total", "Batches skipped because processing failed", ["stage"], registry=r)
        self.duplicates = Counter("fabricflow_processors_duplicate_batches_total", "Shuffle batches skipped because their raw batch was already applied (re-produced after a restart)", registry=r)
        self.undecodable = Counter("fabricflow_processors_undecodable_messages_total", "Messages that are not fabricflow batches", ["topic"], registry=r)
        self.shards = Gauge("fabricflow_processors_shards", "Detector shards (shuffle partitions) owned by this worker", registry=r)
        self.shuffle_messages = Counter("fabricflow_processors_shuffle_messages_total", "Shuffle messages applied to a detector shard", registry=r)
        self.detect_records = Counter("fabricflow_processors_detect_records_total", "Flow records applied to a detector shard", registry=r)
        self.reused = Counter("fabricflow_processors_reused_batches_total", "Shuffle flow batches whose records prepare had enriched in this worker (not decoded and enriched again)", registry=r)
        self.snapshots = Counter("fabricflow_processors_snapshots_total", "Shard state snapshots written to the core-state table", registry=r)
        self.unsnapshotted = Gauge("fabricflow_processors_unsnapshotted_messages", "Shuffle messages applied but not yet covered by a snapshot (not acked)", registry=r)
        self.reloads = Counter("fabricflow_processors_inventory_reloads_total", "Inventory reloads", ["result"], registry=r)
        self.last_error: str | None = None
        self.last_error_at = 0.0

    def healthy(self, window_s: float = 60.0) -> bool:
        """Unhealthy for a minute after a batch failed (the error is in the log and the errors counter)."""
        return self.last_error is None or time.monotonic() - self.last_error_at > window_s


class _FetchWaitConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer with ``processors.fetch_max_wait_ms`` instead of its fixed 1500 ms.

    With all data consumed, a fetch waits on the broker up to that long; the
    embedded Tansu answers only when it expires, not when data arrives, which
    left the worker ~30 % idle (the shuffle messages it had just produced sat
    unread). Real Kafka answers on arrival; the lower bound only adds empty
    fetches when idle.
    """

    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(self.app, "fetch_max_wait_ms", None)
        if wait is not None and hasattr(consumer, "_fetch_max_wait_ms"):  # read by AIOKafkaConsumer.start()
            consumer._fetch_max_wait_ms = int(wait)
        return consumer


class _FetchWaitConsumer(faust_aiokafka.Consumer):
    """Faust's consumer with :class:`_FetchWaitConsumerThread`, committing offsets only after our outputs are out.

    Faust flushes its own producer (the ``core-state`` changelog) before it
    commits offsets, but the shuffle, enriched and output messages go through
    the confluent-kafka :class:`OutputPublisher`, which Faust does not know.
    Committing a raw (or shuffle) offset while the messages produced for it
    still sit in librdkafka's queue would lose them if the worker died before
    they were sent: ``app.outputs_delivered()`` flushes that queue first, and
    the commit is skipped (retried at the next commit interval) while it cannot.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Faust's fetch loop hands each message to the streams with mode's wait_first(delivery, suspend_flow):
        # when the flow is suspended (rebalance, recovery at start) while a delivery waits (a full stream
        # buffer), mode cancels the delivery and Faust still counts the message as read: it is lost (seen as
        # a raw offset that never reached prepare after a restart). The shield lets the delivery finish.
        deliver = self.callback

        async def deliver_shielded(message):
            return await asyncio.shield(deliver(message))

        self.callback = deliver_shielded

    def _new_consumer_thread(self):
        return _FetchWaitConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit_offsets(self, offsets, start_new_transaction: bool = True) -> bool:
        delivered = getattr(self.app, "outputs_delivered", None)
        if delivered is not None and not delivered():
            return False
        return await super()._commit_offsets(offsets, start_new_transaction=start_new_transaction)


class _FetchWaitTransport(faust_aiokafka.Transport):
    Consumer = _FetchWaitConsumer


class _App(faust.App):
    """faust.App whose Kafka transport applies ``fetch_max_wait_ms`` (see :class:`_FetchWaitConsumerThread`)."""

    fetch_max_wait_ms: int | None = None
    outputs_delivered = None  # () -> bool, called before every offset commit (see _FetchWaitConsumer)

    def _new_transport(self):
        return _FetchWaitTransport(self.conf.broker_consumer, self)


class OutputPublisher:
    """confluent-kafka producer for enriched flows and detector outputs."""

    def __init__(self, settings: Settings):
        k = settings.kafka
        self.topics = k.topics
        self.producer = Producer(
            {
                **k.client_config(),
                "enable.idempotence": True,
                "compression.type": settings.ingest.producer.compression,
                "linger.ms": settings.processors.output_linger_ms,
                "partitioner": "murmur2_random",
                "message.max.bytes": 8_000_000,
                # delivery reports only for failures: no Python callback per delivered output message
                "delivery.report.only.error": True,
            }
        )
        self.failed = 0

    def _cb(self, err, _msg):
        if err is not None:
            self.failed += 1
            log.warning("output delivery failed: %s", err)

    def produce(self, topic, key: bytes, value: bytes, partition: int | None = None, headers=None):
        kw = {"partition": partition} if partition is not None else {}
        if headers:
            kw["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, key=key, value=value, on_delivery=self._cb, **kw)
                return
            except BufferError:  # outputs must not be dropped: wait for the buffer to drain
                self.producer.poll(0.1)

    def enriched(self, key: bytes, batch: np.ndarray, max_records: int, coded: codec.Coded | None = None,
                 raw: tuple[bytes, dict] | None = None) -> None:
        """Publish ``batch`` in messages of at most ``max_records`` (``coded``: ``Enricher.label_codes(batch)``).

        ``raw``: (the raw message whose rows ``batch`` enriches, its field spans from ``decode_batch``); when
        one message carries them all, the flow fields' encodings are copied from it.
        """
        verbatim = None
        if raw is not None and len(batch) <= max_records:
            verbatim = codec.field_encodings(*raw, "flow_enriched_batch")
        for i in range(0, len(batch), max_records):
            rows = slice(i, i + max_records)
            msg = codec.encode_batch("flow_enriched_batch", batch[rows], codec.coded_rows(coded, rows), verbatim)
            self.produce(self.topics.flows_enriched, key, msg)

    def outputs(self, outputs) -> None:
        """Produce detector outputs in order; the records of each kind are Avro-encoded together."""
        by_kind: dict[str, list] = {}
        for o in outputs:
            by_kind.setdefault(o[0], []).append(o[2])
        encoded = {kind: iter(self._encode(kind, values)) for kind, values in by_kind.items()}
        for kind, key, _value in outputs:
            self.produce(getattr(self.topics, OUTPUT_SCHEMA[kind][0]), key.encode(), next(encoded[kind]))

    @staticmethod
    def _encode(kind: str, values: list) -> list[bytes]:
        schema = OUTPUT_SCHEMA[kind][1]
        if schema is None:
            return [json.dumps(v, sort_keys=True).encode() for v in values]
        return records.encode_records(schema, values)

    def poll(self):
        self.producer.poll(0)

    def flush(self, timeout: float = 10.0) -> int:
        return self.producer.flush(timeout)


_SNAPSHOT_FLUSH_S = 5.0  # longest wait for the output producer before a snapshot (else the snapshot is postponed)


class _RawPart(NamedTuple):
    """One raw flow message taken by ``prepare``."""

    src: str  # "topic:partition"
    offset: int
    key: bytes
    flows: np.ndarray  # its decoded flow_record rows
    raw: tuple[bytes, dict]  # (the message, its field spans): the enriched message copies the flow fields


@dataclass(slots=True)
class _Kept:
    """What ``prepare`` enriched for one shuffle message that this worker's ``detect`` will read."""

    message: bytes  # the shuffle message as produced (a hit needs the same bytes)
    enriched: LabeledFlows  # with the label codes the detectors use
    unknown: int  # unknown addresses the enrichment counted
    inventory: Inventory


class Processors:
    """The Faust app plus the per-partition cores."""

    def __init__(self, settings: Settings, inventory: Inventory | None = None):
        self.settings = s = settings
        p = s.processors
        self.config = engine_config(p)
        self.policy = p.policy
        self.watcher = InventoryWatcher(p.inventory) if p.inventory else None
        self.inventory = inventory or (self.watcher.inventory if self.watcher else Inventory.empty())
        self.partitions = s.kafka.partitions
        self.cores: dict[int, ProcessorCore] = {}
        self.last_offset: dict[int, int] = {}
        self.sources: dict[int, dict[str, tuple[int, int]]] = {}  # shard -> raw "topic:partition" -> (offset, chunk) applied
        self.pending: dict[int, list] = {}  # shard -> events applied but not yet covered by a snapshot (unacked)
        self.pending_since: dict[int, float] = {}  # shard -> monotonic time of its oldest pending event
        # shard -> counter batches of applied shuffle messages not yet through link health (processors.counter_batch_rows)
        self.counters_waiting: dict[int, list[np.ndarray]] = {}
        # shard -> {(raw "topic:partition", offset, chunk): _Kept}, in production order: what prepare enriched
        # for a shuffle message this worker's detect will read.
        self.reuse: dict[int, dict[tuple, _Kept]] = {}
        self.assigned: set[int] | None = None  # shuffle partitions assigned to this worker (None: not tracked, tests)
        self.reuse_records = 0
        self._late_logged = 0  # too-late records already reported in the log
        self._raw_pending: list = []  # raw messages taken by the prepare agent, not prepared yet
        self.publisher = OutputPublisher(s)
        self.metrics = ProcessorMetrics()
        self.prepare_core = ProcessorCore(self.inventory, self.config)  # enrichment only
        self.app = self._make_app()

    # ------------------------------------------------------------------ faust

    def _make_app(self) -> faust.App:
        s = self.settings
        p = s.processors
        app = _App(
            p.app_id,
            broker="kafka://" + s.kafka.bootstrap_servers.replace(",", ";kafka://"),
            store=p.table_store,
            datadir=p.datadir,
            topic_partitions=self.partitions,
            topic_replication_factor=s.kafka.replication_factor,
            broker_session_timeout=s.kafka.session_timeout_ms / 1000.0,
            producer_max_batch_size=1,  # one changelog record per batch: Tansu's high watermark fault
            producer_max_request_size=8_000_000,
            consumer_max_fetch_size=8_000_000,
            web_enabled=p.web_port != 0,
            web_bind=p.web_bind,
            web_port=p.web_port or 6066,
            web_host=p.web_bind,
            stream_wait_empty=False,
            key_serializer="raw",
            value_serializer="raw",
        )
        app.fetch_max_wait_ms = p.fetch_max_wait_ms
        app.outputs_delivered = self.outputs_delivered
        t = s.kafka.topics
        raw = app.topic(t.flows_raw, t.counters_raw, value_serializer="raw", key_serializer="raw")
        shuffle = app.topic(t.shuffle, value_serializer="raw", key_serializer="raw", partitions=self.partitions)
        self.state = app.Table("core-state", default=None, partitions=self.partitions, key_type=bytes, value_type=bytes)

        @app.agent(raw, name="prepare")
        async def prepare(stream):
            # Raw messages are prepared prepare_batch_messages at a time. Faust acknowledges an event as soon as the
            # next one is taken, so acknowledged events may still wait in _raw_pending: every offset commit
            # prepares them first (outputs_delivered), and the timer below after prepare_batch_wait_s.
            # Not stream.take_events()/noack_take(): in faust-streaming 0.15 they lost events now and then (the
            # ones after a full buffer; docs/operations.md, "Detector state and recovery").
            async for event in stream.events():
                m = event.message
                self._raw_pending.append((m.topic, event.key, event.value, m.partition, m.offset))
                if len(self._raw_pending) >= p.prepare_batch_messages:
                    await self._let_detect_catch_up()
                    self.prepare_pending()

        @app.timer(interval=p.prepare_batch_wait_s)
        async def prepare_waiting():
            self.prepare_pending()

        @app.agent(shuffle, name="detect")
        async def detect(stream):
            # Manual acks: an event is acknowledged only once a snapshot covering it is in the table.
            self._detect_stream = stream
            try:
                async for event in stream.noack().events():
                    # Events of an older consumer generation (taken before a rebalance) are dropped unacked:
                    # their partition's current owner gets them again from the committed offset.
                    self.handle_shuffle_events([event], app.consumer_generation_id)
                    await self._ack(stream, self.write_due_snapshots(time.monotonic()))
            finally:  # shutdown: write what is pending (best effort; the acks may not be committed any more)
                try:
                    await self._ack(stream, self.write_due_snapshots(time.monotonic(), force=True))
                except Exception:  # noqa: BLE001 (exactness does not depend on this snapshot)
                    log.debug("final snapshots not written", exc_info=True)

        @app.timer(interval=p.tick_s)
        async def tick():
            self.on_tick(int(time.time() * 1000))
            stream = getattr(self, "_detect_stream", None)
            if stream is not None:  # idle partitions: snapshot (and ack) what is older than snapshot_interval_s
                await self._ack(stream, self.write_due_snapshots(time.monotonic()))

        @app.on_partitions_assigned.connect
        async def assigned(_app, assigned, **kw):
            self.assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == t.shuffle}

        @app.on_partitions_revoked.connect
        async def revoked(_app, revoked, **kw):
            gone = [tp.partition for tp in revoked if tp.topic == t.shuffle]
            if self.assigned is not None:
                # Events of these partitions still in Faust's buffers must not be applied (nor snapshotted) here.
                self.assigned.difference_update(gone)
            for part in gone:
                if self.pending.get(part):
                    # Snapshot what this worker applied so the next owner re-applies less; flushed below before
                    # the rebalance completes. Not acked: re-delivered events up to its offset are skipped.
                    try:
                        self.write_snapshot(part)
                    except Exception:  # noqa: BLE001
                        log.warning("shard %d: snapshot on revocation failed (events are re-applied)", part, exc_info=True)
                self.cores.pop(part, None)
                self.counters_waiting.pop(part, None)  # in the snapshot above (or re-applied: not acked)
                self.last_offset.pop(part, None)
                self.sources.pop(part, None)
                self._forget(part)
                self.pending.pop(part, None)
                self.pending_since.pop(part, None)
            if gone:
                await app.producer.flush()
            self.publisher.flush()

        self._shuffle_topic = t.shuffle
        return app

    def outputs_delivered(self, timeout_s: float = 10.0) -> bool:
        """Wait (blocking, bounded) until every message the publisher holds is sent; False if some are not.

        Called before each offset commit: blocking the event loop here also keeps the agents from producing
        more meanwhile, so the flush ends as soon as what was queued is acknowledged (~linger + one round trip).
        """
        self.prepare_pending()  # acknowledged raw events still waiting for their batch
        t0 = time.monotonic()
        left = self.publisher.flush(timeout_s)
        waited = time.monotonic() - t0
        if waited > 1.0:
            log.warning("waited %.1f s for the output producer to deliver before committing offsets", waited)
        if left:
            log.warning("%d output messages not delivered within %.0f s: offsets not committed yet", left, timeout_s)
        return left == 0

    def prepare_pending(self) -> None:
        """Prepare the raw messages the prepare agent has taken so far (:meth:`handle_raw_many`)."""
        items, self._raw_pending = self._raw_pending, []
        if items:
            try:
                self.handle_raw_many(items)
            except Exception as e:  # a bug must not silently stop the agent (faust-streaming#175)
                self._failed("prepare", e)

    # ------------------------------------------------------------------ handlers (testable without Faust)

    def _failed(self, stage: str, e: Exception) -> None:
        self.metrics.errors.labels(stage).inc()
        self.metrics.last_error = f"{stage}: {type(e).__name__}: {e}"
        self.metrics.last_error_at = time.monotonic()
        log.exception("%s failed on a batch; it is skipped and counted", stage)

    def handle_raw(self, topic: str, key: bytes | None, value: bytes, partition: int = -1, offset: int = -1) -> None:
        """One raw message (:meth:`handle_raw_many` of one)."""
        self.handle_raw_many([(topic, key, value, partition, offset)])

    def handle_raw_many(self, items) -> None:
        """Enrich, publish flows.enriched.v1, re-partition to the shuffle.

        ``items``: raw messages ``(topic, key, value, partition, offset)`` in
        consumption order. The flow batches among them are enriched together;
        ``flows.enriched.v1`` still gets each raw message's rows under its key.
        Each shard gets its rows of all of them in one shuffle message (up to
        ``processors.shuffle_max_records``; one raw message's rows are split
        in chunks only when they alone exceed it), in consumption order.
        Every shuffle message carries a ``src`` header (raw topic, partition,
        offset, chunk of its last piece) and, when it combines several pieces,
        a ``seg`` header listing each with its row count, so a shard can skip
        rows that ``prepare`` produced again after a restart (it is
        at-least-once like any Kafka consumer), also when they come back
        grouped with new ones. Counter batches go to the shuffle unchanged,
        one message each.
        """
        flows = []
        for topic, key, value, partition, offset in items:
            try:
                name = codec.schema_of(value)
                if name == "flow_batch":
                    spans: dict = {}
                    rows = codec.decode_batch(value, spans=spans)
                    flows.append(_RawPart(f"{topic}:{partition}", offset, key or b"", rows, (value, spans)))
                elif name == "counter_batch":
                    # the owner shard reports link health; every other shard gets a copy marked role=state
                    # that only updates its port state (storage_bound headroom, cause links, live capacity)
                    shard = zlib.crc32(key or b"") % self.partitions
                    src = [("src", f"{topic}:{partition}:{offset}:0".encode())]
                    for s in range(self.partitions):
                        headers = src if s == shard else src + [("role", b"state")]
                        self.publisher.produce(self._shuffle_topic, key or b"", value, partition=s, headers=headers)
                else:
                    self.metrics.undecodable.labels(topic).inc()
                    log.warning("ignoring %s message on %s", name, topic)
            except codec.CodecError as e:
                self.metrics.undecodable.labels(topic).inc()
                log.warning("undecodable message on %s: %s", topic, e)
        if flows:
            self._prepare_flows(flows)
        self.publisher.poll()

    def _prepare_flows(self, parts: list[_RawPart]) -> None:
        """``parts``: consecutive raw flow messages."""
        p = self.settings.processors
        flows = concat_rows([part.flows for part in parts])
        before = self.prepare_core.stats.unknown_addresses
        enriched = self.prepare_core.enrich_labels(flows)  # no string objects: rows are cheap to select
        self.metrics.records.inc(len(flows))
        self.metrics.unknown.inc(self.prepare_core.stats.unknown_addresses - before)
        coded = enriched.label_codes()
        unknown_rows = self.prepare_core.enricher.last_unknown_rows
        lengths = [len(part.flows) for part in parts]
        a = 0
        for part, n in zip(parts, lengths):
            rows = slice(a, a + n)
            self.publisher.enriched(part.key, enriched[rows], p.enriched_max_records, codec.coded_rows(coded, rows), part.raw)
            a += n
        shards = shard_of(enriched, self.partitions, coded)
        # The shuffle carries the raw records of each shard (.npy: a copy to write, a view to read); detect
        # enriches them again with the same inventory unless it finds them in the reuse cache below.
        piece_of = np.repeat(np.arange(len(parts)), lengths) if len(parts) > 1 else None
        step = p.shuffle_max_records
        local = all(part.offset >= 0 for part in parts)
        for shard in np.unique(shards).tolist():
            sel = shards == shard
            part_enriched = enriched[sel]
            part = part_enriched.flows
            counts = np.bincount(piece_of[sel], minlength=len(parts)).tolist() if piece_of is not None else [len(part)]
            pieces = [(rp.src, (rp.offset, chunk), min(step, n - i))
                      for rp, n in zip(parts, counts) for chunk, i in enumerate(range(0, n, step))]
            # this worker's detect owns the shard (assigned by Faust, or already detecting it)
            reuse = local and (shard in self.cores or (self.assigned is not None and shard in self.assigned))
            if reuse:
                part_unknown = unknown_rows[sel]
            r0 = 0
            for group in _fill(pieces, step):
                r1 = r0 + sum(n for *_x, n in group)
                msg = shuffle.encode_flows(part[r0:r1])
                src, (off, chunk), _n = group[-1]
                headers = [("src", f"{src}:{off}:{chunk}".encode())]
                if len(group) > 1:
                    headers.append(("seg", ",".join(f"{s}:{o}:{c}:{n}" for s, (o, c), n in group).encode()))
                if reuse:
                    self._remember(shard, (src, off, chunk), msg, part_enriched[r0:r1], int(part_unknown[r0:r1].sum()))
                self.publisher.produce(self._shuffle_topic, str(shard).encode(), msg, partition=shard, headers=headers)
                r0 = r1

    async def _let_detect_catch_up(self, max_wait_s: float = 0.5) -> None:
        """Backpressure for the reuse cache: while it is 3/4 full, wait (bounded) so detect reads what prepare kept."""
        cap = self.settings.processors.reuse_enriched_records
        if not cap or self.reuse_records < cap * 3 // 4:
            return
        deadline = time.monotonic() + max_wait_s
        while self.reuse_records >= cap // 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def _remember(self, shard: int, key: tuple, msg: bytes, enriched: LabeledFlows, unknown: int) -> None:
        if self.reuse_records + len(enriched) > self.settings.processors.reuse_enriched_records:
            return  # full: detect is far behind; it decodes and enriches these itself
        self.reuse.setdefault(shard, {})[key] = _Kept(msg, enriched, unknown, self.inventory)
        self.reuse_records += len(enriched)

    def _reused(self, shard: int, source: tuple | None, value: bytes):
        """(enriched rows, unknown addresses) prepare kept for this exact shuffle
        message, else None.

        Entries of the shard remembered before it are dropped (detect reads a shard in production order, so
        they were skipped). A hit needs the very same message bytes and the current inventory, so the rows
        equal what decoding and enriching the message would give.
        """
        entries = self.reuse.get(shard)
        if not entries or source is None:
            return None
        key = (source[0], *source[1])
        if key not in entries:
            return None
        while True:
            k, kept = next(iter(entries.items()))
            del entries[k]
            self.reuse_records -= len(kept.enriched)
            if k == key:
                break
        if kept.inventory is not self.inventory or kept.message != value:  # a memcmp
            return None
        return kept.enriched, kept.unknown

    def _forget(self, shard: int) -> None:
        for kept in self.reuse.pop(shard, {}).values():
            self.reuse_records -= len(kept.enriched)

    def core_for(self, partition: int) -> ProcessorCore:
        core = self.cores.get(partition)
        if core is None:
            core = ProcessorCore(self.inventory, self.config, self.policy, detector_protocols=self.settings.processors.detector_protocols)
            data = self.state.get(str(partition).encode()) if hasattr(self, "state") else None
            if data:
                snap = json.loads(zlib.decompress(data))
                core.restore(snap["core"])
                self.last_offset[partition] = snap["offset"]
                self.sources[partition] = {k: tuple(v) for k, v in snap.get("sources", {}).items()}
                waiting = snap.get("counters_waiting")
                if waiting:  # counter samples the snapshot's messages carried, not applied yet
                    rows = codec.decode_batch(base64.b64decode(waiting["batch"]), expect="counter_batch")
                    ends = np.cumsum(waiting["rows"]).tolist()
                    self.counters_waiting[partition] = [rows[a:b] for a, b in zip([0] + ends[:-1], ends)]
                log.info("shard %d restored at offset %d", partition, snap["offset"])
            self.cores[partition] = core
        return core

    # ------------------------------------------------------------------ detect: events, snapshots, acks

    def handle_shuffle_events(self, events, generation: int | None = None) -> None:
        """Apply Faust events of the shuffle topic in order; each becomes pending until a snapshot covers it.

        ``generation``: the consumer generation; events fetched in an older one are ignored (not acked), as are
        events of partitions revoked since they were taken (their next owner gets them from the committed offset).
        """
        now = time.monotonic()
        for ev in events:
            m = ev.message
            part = m.partition
            if generation is not None and getattr(m, "generation_id", generation) != generation:
                continue
            if self.assigned is not None and part not in self.assigned:
                continue  # revoked while the event waited in Faust's buffers
            try:
                self.handle_shuffle(part, m.offset, ev.value, source_of(m.headers), segments_of(m.headers),
                                    state_only=_header(m.headers, "role") == "state")
            except Exception as e:  # skipped and counted, like an undecodable message; acked with the next snapshot
                self._failed("detect", e)
            pend = self.pending.setdefault(part, [])
            if not pend:
                self.pending_since[part] = now
            pend.append(ev)

    def write_due_snapshots(self, now: float, force: bool = False) -> list:
        """Write the snapshot of every shard that is due (or has pending events, ``force``); return the events now covered."""
        p = self.settings.processors
        covered: list = []
        for part, pend in list(self.pending.items()):
            if pend and (force or len(pend) >= p.snapshot_every_messages or now - self.pending_since[part] >= p.snapshot_interval_s):
                covered += self.write_snapshot(part)
        self.metrics.unsnapshotted.set(sum(len(v) for v in self.pending.values()))
        return covered

    def write_snapshot(self, partition: int) -> list:
        """Store the shard's snapshot in the ``core-state`` table; return (and clear) the pending events it covers.

        The outputs produced so far are delivered first (a flush: ~one broker round trip, librdkafka skips the
        linger): a snapshot must not reach the changelog before the outputs of the messages it covers, or a crash
        in between would lose them (the next owner skips covered messages). While they cannot be delivered the
        snapshot is not written (returns []; its events stay pending and unacknowledged).
        """
        left = self.publisher.flush(_SNAPSHOT_FLUSH_S)
        if left:
            log.warning("shard %d: snapshot postponed, %d output messages not delivered within %.0f s",
                        partition, left, _SNAPSHOT_FLUSH_S)
            return []
        data = self.snapshot(partition)
        key = str(partition).encode()
        send = getattr(self.state, "send_changelog", None)
        if send is not None:
            # Same as ``table[key] = data`` inside the stream, also from the timer / rebalance callbacks:
            # changelog partition = shuffle partition (co-partitioned), then the local store.
            send(partition, key, data)
            self.state.data[key] = data
        else:  # a plain dict (tests)
            self.state[key] = data
        self.metrics.snapshots.inc()
        self.pending_since.pop(partition, None)
        return self.pending.pop(partition, [])

    @staticmethod
    async def _ack(stream, events) -> None:
        for ev in events:
            await stream.ack(ev)

    def snapshot(self, partition: int) -> bytes:
        """The shard's state: core snapshot, last applied shuffle offset, raw sources applied, and the counter
        samples of applied messages still waiting for link health (zlib'd JSON).

        The waiting samples are kept, not applied here: their link-health records would be produced just
        before the snapshot that covers their messages, and lost if the worker died before delivering them.
        """
        core = self.core_for(partition)
        seen = self.sources.get(partition, {})
        snap = {"offset": self.last_offset.get(partition, -1), "core": core.snapshot(), "sources": {k: list(v) for k, v in seen.items()}}
        waiting = self.counters_waiting.get(partition)
        if waiting:
            batch = codec.encode_batch("counter_batch", concat_rows(waiting))
            snap["counters_waiting"] = {"rows": [len(c) for c in waiting], "batch": base64.b64encode(batch).decode()}
        return zlib.compress(json.dumps(snap, separators=(",", ":")).encode(), 1)

    def handle_shuffle(self, partition: int, offset: int, value: bytes, source: tuple | None = None,
                       segments: list | None = None, state_only: bool = False) -> bool:
        """Process one shuffle message; False when it was already applied (skipped).

        The state is not snapshotted here: see :meth:`write_due_snapshots`.

        Skipped: messages at or below the offset the restored snapshot covers
        (Kafka re-delivery), and messages whose ``source`` (raw partition,
        offset, chunk) this shard has already applied (``prepare`` re-produced
        them after a restart). A message with ``segments`` (:func:`segments_of`)
        is skipped when every piece was applied; when only some were, the rows
        of the others are applied.
        """
        core = self.core_for(partition)
        if offset <= self.last_offset.get(partition, -1):
            return False  # re-delivered after a restart: already in the restored state
        seen = self.sources.setdefault(partition, {})
        # the message's pieces: its seg header, else its src header as one piece (row count not needed)
        pieces = segments or ([(*source, 0)] if source is not None else [])
        fresh = [not (key in seen and pos <= seen[key]) for key, pos, _n in pieces]
        keep = None  # rows to apply when some pieces of the message were applied before
        if not all(fresh):
            self.metrics.duplicates.inc()
            if not any(fresh):
                self.last_offset[partition] = offset
                return False
            keep = np.repeat(np.array(fresh), [n for *_x, n in pieces])
        for (key, pos, _n), new in zip(pieces, fresh):
            if new:
                seen[key] = pos
        try:
            name = "shuffle_flows" if shuffle.is_flow_batch(value) else codec.schema_of(value)
            if name == "shuffle_flows":
                hit = self._reused(partition, source, value) if keep is None else None
                if hit is not None:  # enriched by prepare in this worker: no decode, no second enrichment
                    self.metrics.reused.inc()
                    enriched, unknown = hit
                    outs = core.process_enriched(core.adopt_enriched(enriched, unknown))
                    self.metrics.detect_records.inc(len(enriched))
                else:
                    flows = shuffle.decode_flows(value)
                    if keep is not None:
                        if len(keep) != len(flows):
                            raise codec.CodecError(f"seg header counts {len(keep)} rows, the batch has {len(flows)}")
                        flows = flows.compress(keep)
                    _enriched, outs = core.process_raw(flows)
                    self.metrics.detect_records.inc(len(flows))
            elif name == "flow_batch":  # written by workers before the shuffle carried .npy batches
                flows = codec.decode_batch(value)
                _enriched, outs = core.process_raw(flows)
                self.metrics.detect_records.inc(len(flows))
            elif name == "flow_enriched_batch":  # written by workers before the shuffle carried raw batches
                enriched = codec.decode_batch(value)
                outs = core.process_enriched(enriched)
                self.metrics.detect_records.inc(len(enriched))
            elif name == "counter_batch" and state_only:  # another shard's counters: port state only
                outs = core.process_counters(codec.decode_batch(value), emit=False)
            elif name == "counter_batch":
                counters = codec.decode_batch(value)
                self.metrics.counters.inc(len(counters))
                outs = self._add_counters(partition, counters)
            else:
                outs = []
        except codec.CodecError as e:
            self.metrics.undecodable.labels(self._shuffle_topic).inc()
            log.warning("undecodable shuffle message p%d@%d: %s", partition, offset, e)
            outs = []
        self._emit(outs)
        self.publisher.poll()
        self.last_offset[partition] = offset
        self.metrics.shuffle_messages.inc()
        return True

    def _add_counters(self, partition: int, counters: np.ndarray) -> list:
        """Queue a shard's counter samples; apply the queue once it holds ``counter_batch_rows`` samples
        (and at every tick). The queue is part of the shard's snapshot."""
        waiting = self.counters_waiting.setdefault(partition, [])
        waiting.append(counters)
        if sum(len(c) for c in waiting) < self.settings.processors.counter_batch_rows:
            return []
        return self._apply_counters(partition)

    def _apply_counters(self, partition: int) -> list:
        """Link health over the shard's waiting counter samples, as if applied message by message."""
        waiting = self.counters_waiting.pop(partition, None)
        if not waiting:
            return []
        try:
            number = np.repeat(np.arange(len(waiting)), [len(c) for c in waiting]) if len(waiting) > 1 else None
            return self.core_for(partition).process_counters(concat_rows(waiting), number)
        except Exception as e:  # like a failed shuffle message: skipped and counted
            self._failed("detect", e)
            return []

    def apply_waiting_counters(self) -> None:
        """Apply every shard's waiting counter samples (timer)."""
        for partition in list(self.counters_waiting):
            self._emit(self._apply_counters(partition))

    def _emit(self, outs) -> None:
        self._count_outputs(outs)
        self.publisher.outputs(outs)

    def _count_outputs(self, outs) -> None:
        if not outs:
            return
        kinds: dict[str, int] = {}
        for o in outs:
            kinds[o.kind] = kinds.get(o.kind, 0) + 1
        for kind, n in kinds.items():
            self.metrics.outputs.labels(kind).inc(n)

    def on_tick(self, now_ms: int) -> None:
        if self.watcher is not None:
            errors = self.watcher.errors_total
            if self.watcher.maybe_reload(now_ms / 1000.0):
                self.inventory = self.watcher.inventory
                self.prepare_core.set_inventory(self.inventory)
                for shard in list(self.reuse):
                    self._forget(shard)
                for core in self.cores.values():
                    core.set_inventory(self.inventory)
                self.metrics.reloads.labels("ok").inc()
                log.info("inventory reloaded from %s", self.settings.processors.inventory)
            elif self.watcher.errors_total > errors:
                self.metrics.reloads.labels("error").inc()
                log.warning("inventory %s not reloaded (kept the previous one): %s", self.settings.processors.inventory, self.watcher.last_error)
        self.apply_waiting_counters()
        late_main = late_incast = 0
        for shard, core in list(self.cores.items()):
            outs = core.tick(now_ms)
            if any(o.kind != "alert" for o in outs):  # the timer closes windows only when the stream is idle
                log.info("shard %d: no newer event time for processors.idle_close_s: closed its open windows (%d outputs)",
                         shard, len(outs))
            self._count_outputs(outs)
            self.publisher.outputs(outs)
            st = core.engine.stats
            late_main += st["too_late_main"]
            late_incast += st["too_late_incast"]
        if late_main + late_incast > self._late_logged:
            log.warning("%d flow records arrived after their window had closed (counted, not applied; %d in all): "
                        "see processors.allowed_lateness_s and idle_close_s", late_main + late_incast - self._late_logged,
                        late_main + late_incast)
        self._late_logged = late_main + late_incast
        self.metrics.too_late.labels("main").set(late_main)
        self.metrics.too_late.labels("incast").set(late_incast)
        self.metrics.shards.set(len(self.cores))
        self.metrics.unsnapshotted.set(sum(len(v) for v in self.pending.values()))
        self.publisher.poll()


def run_processors(settings: Settings) -> int:
    from fabricflow.topics import ensure_topics

    ensure_topics(settings.kafka)
    proc = Processors(settings)
    p = settings.processors
    http = None
    if p.metrics_port:
        from ingest.metrics import serve_metrics

        try:
            http = serve_metrics(proc.metrics, p.web_bind, p.metrics_port)
            log.info("metrics on http://%s:%d/metrics", p.web_bind, p.metrics_port)
        except OSError as e:  # e.g. a second worker on the same host: run without metrics, say so
            log.warning("processors.metrics_port %d unavailable (%s): running without /metrics", p.metrics_port, e)
    worker = faust.Worker(proc.app, loglevel=settings.log_level.lower(), quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        left = proc.publisher.flush(10)
        if left:
            log.warning("%d output messages were not delivered before shutdown", left)
        if http is not None:
            http.shutdown()
    return 0
