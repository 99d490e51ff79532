"""Thin Faust wiring of a worker: the app, its two agents, its timers and its rebalance callbacks.

Faust's aiokafka consumer is subclassed for three things Faust does not offer: a configurable fetch wait,
offset commits that wait for our own producer (:meth:`Checkpoint.outputs_delivered`), and deliveries that a
rebalance cannot cancel half-way (docs/operations.md, "Detector state and recovery").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import TYPE_CHECKING

import faust
from faust.tables import TableManager as FaustTableManager
from faust.transport.drivers import aiokafka as faust_aiokafka

from fabricflow.kafka_security import faust_credentials

if TYPE_CHECKING:
    from .service import Processors

log = logging.getLogger("fabricflow.processors")


class _FetchWaitConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer with ``processors.fetch_max_wait_ms`` instead of its fixed 1500 ms."""

    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(self.app, "fetch_max_wait_ms", None)
        if wait is not None and hasattr(consumer, "_fetch_max_wait_ms"):  # read by AIOKafkaConsumer.start()
            consumer._fetch_max_wait_ms = int(wait)
        return consumer


class FetchWaitConsumer(faust_aiokafka.Consumer):
    """Faust's consumer with :class:`_FetchWaitConsumerThread`, committing offsets only after our outputs are out.

    Faust flushes its own producer (the ``core-state`` changelog) before it commits offsets, but not the
    confluent-kafka :class:`~processors.worker.publish.OutputPublisher`: ``app.outputs_delivered()`` flushes
    it first, and the commit is skipped (retried at the next commit interval) while it cannot.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Faust's fetch loop hands each message to the streams with mode's wait_first(delivery, suspend_flow):
        # when the flow is suspended (rebalance, recovery at start) while a delivery waits (a full stream
        # buffer), mode cancels the delivery and Faust still counts the message as read: it is lost. The
        # shield lets the delivery finish.
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
    Consumer = FetchWaitConsumer


class TableManager(FaustTableManager):
    """Faust's table manager without its fixed one-second pause at start.

    Faust waits a second there so that tables declared in modules imported later can still register. Ours
    are all declared by :func:`make_app` before the worker starts, so the pause only delayed the consumer's
    subscription (and with it the group join) by a second at every start.
    """

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


class App(faust.App):
    """faust.App whose Kafka transport uses :class:`FetchWaitConsumer`, and that says when it is ready."""

    fetch_max_wait_ms: int | None = None
    outputs_delivered = None  # () -> bool, called before every offset commit (see FetchWaitConsumer)
    on_ready = None  # () -> None, once the worker consumes: partitions assigned, tables recovered, fetcher running

    def _new_transport(self):
        return _FetchWaitTransport(self.conf.broker_consumer, self)

    async def on_started_init_extra_services(self) -> None:
        await super().on_started_init_extra_services()  # Faust calls this once recovery has completed
        if self.on_ready is not None:
            self.on_ready()


#: Allocations between two young-generation collections (Python's default: 700). The worker's garbage is mostly
#: short-lived (Faust events, output records, snapshot dicts) and its state is numpy arrays, so the collector ran
#: ~60 times per second of work for little: ~3 % of a busy worker's CPU (perf, 2026-12-06) and about half of it with
#: this threshold. Older generations keep Python's ratios (10, 10).
GC_YOUNG_THRESHOLD = 10_000

#: How often per ``prepare_batch_wait_s`` the timer looks whether the taken raw messages have waited that long:
#: a batch waits between ``prepare_batch_wait_s`` and a quarter more (the timer runs at most every 5 ms).
PREPARE_CHECKS_PER_WAIT = 4


def _freeze_startup_objects() -> None:
    """Move the objects alive after start-up (modules, Faust's services, the inventory) out of the cyclic
    garbage collector's reach: every full collection walked them again (~3 % of a busy worker's CPU, py-spy),
    triggered by the allocations of output records and snapshots. Garbage made later is collected as before,
    young objects every :data:`GC_YOUNG_THRESHOLD` allocations."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def make_app(proc: Processors) -> App:
    """The worker's Faust app: agents ``prepare`` (raw topics) and ``detect`` (shuffle), the ``core-state``
    table, the timers and the rebalance callbacks, all moving records to and from ``proc``'s stages."""
    s = proc.settings
    p = s.processors
    partitions = s.kafka.partitions
    app = App(
        p.app_id,
        broker="kafka://" + s.kafka.bootstrap_servers.replace(",", ";kafka://"),
        broker_credentials=faust_credentials(s.kafka),  # SASL / TLS as for the confluent-kafka clients
        store=p.table_store,
        datadir=p.datadir,
        TableManager=TableManager,
        topic_partitions=partitions,
        topic_replication_factor=s.kafka.replication_factor,
        broker_session_timeout=s.kafka.session_timeout_ms / 1000.0,
        # a third of the session, as the confluent-kafka clients (fabricflow/kafka.py); Faust's fixed 3 s would
        # let a session shorter than 3 s expire between two heartbeats
        broker_heartbeat_interval=s.kafka.session_timeout_ms / 3000.0,
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
    app.outputs_delivered = proc.checkpoint.outputs_delivered
    t = s.kafka.topics
    raw = app.topic(t.flows_raw, t.counters_raw, t.discards_raw, value_serializer="raw", key_serializer="raw")
    shuffle = app.topic(t.shuffle, value_serializer="raw", key_serializer="raw", partitions=partitions)
    proc.checkpoint.store = app.Table("core-state", default=None, partitions=partitions, key_type=bytes, value_type=bytes)
    checkpoint = proc.checkpoint
    detect_stream = None

    @app.agent(raw, name="prepare")
    async def prepare(stream):
        # Raw messages are prepared prepare_batch_messages at a time. Faust acknowledges an event as soon as the
        # next one is taken, so acknowledged events may still wait: every offset commit prepares them first
        # (outputs_delivered), and the timer below once the first has waited prepare_batch_wait_s.
        # Not stream.take_events()/noack_take(): they lost events now and then (docs/operations.md).
        async for event in stream.events():
            m = event.message
            if proc.prepare.take((m.topic, event.key, event.value, m.partition, m.offset)):
                await proc.reuse.let_detect_catch_up()
                proc.prepare.prepare_taken()

    @app.timer(interval=max(p.prepare_batch_wait_s / PREPARE_CHECKS_PER_WAIT, 0.005))  # not a busy loop
    async def prepare_waiting():
        proc.prepare.prepare_waited(time.monotonic())

    @app.agent(shuffle, name="detect")
    async def detect(stream):
        # Manual acks: an event is acknowledged only once a snapshot covering it is in the table.
        nonlocal detect_stream
        detect_stream = stream
        try:
            async for event in stream.noack().events():
                # Events of an older consumer generation (taken before a rebalance) are dropped unacked:
                # their partition's current owner gets them again from the committed offset.
                proc.detect.handle_events([event], app.consumer_generation_id)
                await checkpoint.ack(stream, checkpoint.commit_due(proc.shards, time.monotonic()))
        finally:  # shutdown: write what is pending (best effort; the acks may not be committed any more)
            try:
                await checkpoint.ack(stream, checkpoint.commit_due(proc.shards, time.monotonic(), force=True))
            except Exception:  # noqa: BLE001 (exactness does not depend on this snapshot)
                log.debug("final snapshots not written", exc_info=True)

    @app.timer(interval=p.tick_s)
    async def tick():
        proc.service.beat()
        proc.on_tick(int(time.time() * 1000))
        if detect_stream is not None:  # idle partitions: snapshot (and ack) what is older than snapshot_interval_s
            await checkpoint.ack(detect_stream, checkpoint.commit_due(proc.shards, time.monotonic()))

    frozen = False

    @app.on_partitions_assigned.connect
    async def assigned(_app, assigned, **kw):
        nonlocal frozen
        if not frozen:  # once, after start-up: the collector stops walking Faust's and the modules' objects
            frozen = True
            _freeze_startup_objects()
        proc.shards.assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == t.shuffle}

    @app.on_partitions_revoked.connect
    async def revoked(_app, revoked, **kw):
        await proc.revoke([tp.partition for tp in revoked if tp.topic == t.shuffle], app.producer)

    return app
