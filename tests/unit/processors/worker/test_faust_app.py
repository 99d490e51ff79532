"""The processor worker without a broker, the Faust app: consumer settings, commits after delivery, heartbeats."""

from unittest import mock

from tests.support.worker import worker_without_broker


def test_worker_consumer_uses_the_configured_fetch_wait(tmp_path):
    """Faust hard-codes fetch_max_wait_ms=1500; the worker's Kafka consumer must get processors.fetch_max_wait_ms."""
    import asyncio

    from processors.worker.faust_app import make_app

    p, _sent = worker_without_broker(tmp_path, fetch_max_wait_ms=77)
    app = make_app(p)

    async def build():
        consumer = app.consumer
        kafka_consumer = consumer._thread._create_worker_consumer(app.transport)
        try:
            return kafka_consumer._fetch_max_wait_ms
        finally:
            await kafka_consumer.stop()

    assert asyncio.run(build()) == 77


def test_offsets_are_committed_only_after_the_publisher_delivered(tmp_path):
    """Shuffle/output messages go through confluent-kafka, not Faust's producer: a raw or shuffle offset must not be
    committed while messages produced for it are still queued (a crash would lose them)."""
    import asyncio

    from faust.transport.drivers import aiokafka as faust_aiokafka

    from processors.worker.faust_app import FetchWaitConsumer, make_app

    p, _sent = worker_without_broker(tmp_path)
    app = make_app(p)
    queued = [3]
    flushed = []

    def flush(timeout):
        flushed.append(timeout)
        return queued[0]

    p.publisher.producer.flush = flush
    assert app.outputs_delivered is not None
    committed = []

    async def base_commit(self, offsets, start_new_transaction=True):
        committed.append(dict(offsets))
        return True

    consumer = object.__new__(FetchWaitConsumer)
    consumer.app = app
    with mock.patch.object(faust_aiokafka.Consumer, "_commit_offsets", base_commit):
        assert asyncio.run(consumer._commit_offsets({"tp": 7})) is False  # 3 messages not delivered: no commit
        assert committed == []
        queued[0] = 0
        assert asyncio.run(consumer._commit_offsets({"tp": 7})) is True
    assert committed == [{"tp": 7}]
    assert len(flushed) == 2


def test_the_faust_app_heartbeats_three_times_per_session_and_starts_without_a_pause(tmp_path):
    from processors.worker.faust_app import TableManager

    from processors.worker.faust_app import make_app

    p, _ = worker_without_broker(tmp_path)
    conf = make_app(p).conf
    assert conf.broker_session_timeout == 6.0 and conf.broker_heartbeat_interval == 2.0  # Faust's own default: 3 s
    assert conf.TableManager is TableManager  # Faust's table manager waits 1 s before it subscribes; ours does not


def test_after_start_up_the_collector_skips_start_up_objects_and_collects_young_ones_less_often():
    """Once partitions are assigned the worker freezes what start-up left alive and raises the young-generation
    threshold (its garbage is short-lived; the default 700 ran the collector ~60 times per second of work)."""
    import gc

    from processors.worker.faust_app import GC_YOUNG_THRESHOLD, _freeze_startup_objects

    before = gc.get_threshold()
    try:
        _freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        assert GC_YOUNG_THRESHOLD > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
