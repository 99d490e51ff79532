"""The processor worker without a broker: prepare, detect, checkpoints, re-delivery after restore, metrics."""

from pathlib import Path
from unittest import mock

import numpy as np

from fabricflow.settings import load_settings
from processors.worker import Processors, shuffle
from processors.logic.core import shard_of
from schemas import codec
from tests.support.synth import training_batches

INVENTORY = Path(__file__).resolve().parents[2] / "data" / "cluster_inventory.yaml"


class _NoBrokerProducer:
    """Stands in for confluent_kafka.Producer: these tests capture what is produced themselves."""

    def __init__(self, _config):
        pass

    def produce(self, *_a, **_kw):
        raise AssertionError("tests replace OutputPublisher.produce")

    def poll(self, _timeout=0):
        return 0

    def flush(self, _timeout=None):
        return 0

    def __len__(self):
        return 0


def _proc(tmp_path, **processors):
    s = load_settings(
        None,
        kafka={"bootstrap_servers": "127.0.0.1:9", "partitions": 2},
        processors={"inventory": str(INVENTORY), "datadir": str(tmp_path), "metrics_port": 0, "web_port": 0, **processors},
    )
    with mock.patch("processors.worker.publish.Producer", _NoBrokerProducer):  # no librdkafka "connection refused" noise
        p = Processors(s)
    sent = []
    p.publisher.produce = lambda topic, key, value, partition=None, headers=None: sent.append((topic, key, value, partition, headers))
    p.publisher.poll = lambda: None
    p.state = {}  # the Faust table, replaced by a dict
    return p, sent


def _cores(p):
    """partition -> core of the shards the worker detects."""
    return {s.partition: s.core for s in p.shards.detecting()}


def _metric(p, name, **labels):
    return p.metrics.registry.get_sample_value(name, labels) or 0


def test_prepare_enriches_and_reshards(tmp_path):
    p, sent = _proc(tmp_path)
    exp, batch = training_batches(seconds=2)[0]
    p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", batch))
    enriched = [codec.decode_batch(v) for t, _k, v, _p, _h in sent if t == p.settings.kafka.topics.flows_enriched]
    shuffled = [(part, shuffle.decode_flows(v)) for t, _k, v, part, _h in sent if t == p.settings.kafka.topics.shuffle]
    assert all(h and h[0][0] == "src" for t, _k, _v, _p, h in sent if t == p.settings.kafka.topics.shuffle)
    assert sum(len(e) for e in enriched) == len(batch)
    assert sum(len(b) for _p, b in shuffled) == len(batch)
    for part, b in shuffled:  # every row went to the shard shard_of() names (shuffle carries raw rows)
        assert set(shard_of(p.prepare.core.enrich(b), 2).tolist()) == {part}
    assert _metric(p, "fabricflow_processors_records_total") == len(batch)
    assert set(enriched[0]["src_job"].tolist()) == {"train-a"}


def test_shuffle_redelivery_after_restore_is_skipped(tmp_path):
    p, sent = _proc(tmp_path)
    batches = training_batches(seconds=30)
    msgs = []
    for _e, b in batches:
        e = p.prepare.core.enrich(b)
        msgs.append(shuffle.encode_flows(b[shard_of(e, 2) == 0]))
    for off, m in enumerate(msgs[:20]):
        p.handle_shuffle(0, off, m)
    p.checkpoint.commit([p.shards[0]])
    # A new worker (restart) restores the snapshot; Kafka re-delivers from an older committed offset.
    q, sent2 = _proc(tmp_path)
    q.state = {b"0": p.state[b"0"]}
    assert q.handle_shuffle(0, 15, msgs[15]) is False  # already in the snapshot: skipped
    for off in range(20, len(msgs)):
        p.handle_shuffle(0, off, msgs[off])
        q.handle_shuffle(0, off, msgs[off])
    assert _cores(q)[0].snapshot() == _cores(p)[0].snapshot()


def test_detect_reads_only_the_current_shuffle_format(tmp_path):
    """The shuffle is internal and short-lived: detect reads LZ4 .npy flow batches and Avro counter batches only.
    Messages of earlier versions (Avro FlowBatch / FlowEnrichedBatch, plain .npy) are counted as undecodable and
    skipped, the shard's state untouched."""
    p, _ = _proc(tmp_path)
    q, _ = _proc(tmp_path)
    batches = training_batches(seconds=12)
    for off, (_e, b) in enumerate(batches):
        for shard in (0, 1):
            part = b[shard_of(p.prepare.core.enrich(b), 2) == shard]
            p.handle_shuffle(shard, off, shuffle.encode_flows(part))
    assert sum(c.stats.raw_records for c in _cores(p).values()) == sum(len(b) for _e, b in batches)
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 0
    _e, b = batches[0]
    legacy = [codec.encode_batch("flow_batch", b), codec.encode_batch("flow_enriched_batch", p.prepare.core.enrich(b)),
              shuffle.npy_bytes(b)]
    for off, m in enumerate(legacy):
        assert q.handle_shuffle(0, off, m) is True
    assert _metric(q, "fabricflow_processors_undecodable_messages_total", topic=q.settings.kafka.topics.shuffle) == 3
    assert q.shards[0].core.stats.raw_records == 0 and q.shards[0].last_offset == 2


def test_undecodable_messages_are_counted_not_fatal(tmp_path):
    p, sent = _proc(tmp_path)
    p.handle_raw("flows.raw.v1", b"k", b"not avro")
    assert p.handle_shuffle(0, 0, b"\xc3\x01garbage") is True
    assert p.handle_shuffle(0, 1, shuffle.MAGIC + b"\x01\x00garbage") is True
    assert p.handle_shuffle(0, 2, shuffle.LZ4_MAGIC + b"\x10\x00\x00\x00garbage") is True
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic="flows.raw.v1") == 1
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 3
    p.metrics.failed("detect", RuntimeError("boom"))
    assert _metric(p, "fabricflow_processors_errors_total", stage="detect") == 1
    assert not p.metrics.healthy()


def test_batches_reproduced_by_prepare_after_a_restart_are_applied_once(tmp_path):
    """prepare is at-least-once: after a crash it re-produces shuffle messages (new offsets, same src header)."""
    from processors.worker.shuffle import source_of

    p, sent = _proc(tmp_path)
    for off, (exp, b) in enumerate(training_batches(seconds=5)):
        p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, off)
    shuffle = [(part, v, h) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    for i, (part, v, h) in enumerate(shuffle):
        p.handle_shuffle(part, i, v, source_of(h))
    before = {k: c.snapshot() for k, c in _cores(p).items()}
    # The same shuffle messages again, at later offsets (as re-produced after a restart):
    for i, (part, v, h) in enumerate(shuffle):
        assert p.handle_shuffle(part, 1000 + i, v, source_of(h)) is False
    assert {k: c.snapshot() for k, c in _cores(p).items()} == before
    assert _metric(p, "fabricflow_processors_duplicate_batches_total") == len(shuffle)


def _raw_items(batches, first_offset=0, partition=0):
    return [("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), partition, first_offset + i)
            for i, (exp, b) in enumerate(batches)]


def _shuffled(p, sent):
    from processors.worker.shuffle import segments_of, source_of

    return [(part, v, source_of(h), segments_of(h)) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]


def _detector_outputs(p, sent):
    """Matrix, incast, straggler, link and pattern outputs produced so far plus those of a final flush (alerts'
    evidence depends on batching, docs/replay.md), canonical and sorted."""
    import json

    from fabricflow.streams import OUTPUTS

    t = p.settings.kafka.topics
    kinds = {getattr(t, s.name): kind for kind, s in OUTPUTS.items() if kind != "alert"}
    out = [(kinds[tp], k, json.dumps(codec.decode_record(v), sort_keys=True, default=str))
           for tp, k, v, _p, _h in sent if tp in kinds]
    for core in _cores(p).values():
        out += [(o.kind, o.key.encode(), json.dumps(codec.decode_record(codec.encode_record(
            OUTPUTS[o.kind].schema, o.value)), sort_keys=True, default=str)) for o in core.flush() if o.kind != "alert"]
    assert out
    return sorted(out)


def test_prepare_combines_raw_messages_per_shard_and_keeps_enriched_per_message(tmp_path):
    """handle_raw_many: one shuffle message per shard for all the raw messages taken (seg header: each raw
    message's rows), and flows.enriched.v1 exactly as when each raw message is handled alone."""
    from processors.worker.shuffle import segments_of

    batches = training_batches(seconds=4)
    one, sent1 = _proc(tmp_path)
    for item in _raw_items(batches):
        one.handle_raw(*item)
    many, sent8 = _proc(tmp_path)
    many.handle_raw_many(_raw_items(batches))
    t = many.settings.kafka.topics
    assert [(k, v) for tp, k, v, _p, _h in sent8 if tp == t.flows_enriched] == [(k, v) for tp, k, v, _p, _h in sent1 if tp == t.flows_enriched]
    shuffled = [(part, v, h) for tp, _k, v, part, h in sent8 if tp == t.shuffle]
    assert len(shuffled) == len({part for part, _v, _h in shuffled})  # one per shard
    assert all(len(segments_of(h)) == len(batches) for _p, _v, h in shuffled)  # every raw message has rows there
    for part, v, h in shuffled:
        segs = segments_of(h)
        rows = shuffle.decode_flows(v)
        assert [pos[0] for _src, pos, _n in segs] == sorted(pos[0] for _src, pos, _n in segs)
        assert sum(n for *_x, n in segs) == len(rows)
        # the rows of each piece are that raw message's rows of this shard, in order
        at = 0
        for _src, (off, chunk), n in segs:
            assert chunk == 0
            b = batches[off][1]
            assert rows[at : at + n].tobytes() == b[shard_of(many.prepare.core.enrich(b), 2) == part].tobytes()
            at += n
    # detect gives every shard the same state as from the one-message-per-raw-message shuffle
    for p, sent in ((one, sent1), (many, sent8)):
        for i, (part, v, src, segs) in enumerate(_shuffled(p, sent)):
            p.handle_shuffle(part, i, v, src, segs)
    assert set(_cores(one)) == set(_cores(many)) == {part for part, _v, _h in shuffled}
    assert _detector_outputs(one, sent1) == _detector_outputs(many, sent8)


def test_shuffle_pieces_respect_the_record_limit(tmp_path):
    from processors.worker.shuffle import fill

    pieces = [("r:0", (1, 0), 3), ("r:0", (2, 0), 4), ("r:0", (3, 0), 9), ("r:0", (4, 0), 1)]
    assert [[x[1][0] for x in g] for g in fill(pieces, 8)] == [[1, 2], [3], [4]]
    batches = training_batches(seconds=3)
    limit = max(len(b) for _e, b in batches) // 3
    p, sent = _proc(tmp_path, shuffle_max_records=limit)
    p.handle_raw_many(_raw_items(batches))
    shuffled = _shuffled(p, sent)
    assert all(len(shuffle.decode_flows(v)) <= limit for _p, v, _s, _g in shuffled)
    # a raw message whose rows of a shard alone exceed the limit is split in chunks, as before
    assert any(src[1][1] > 0 for _p, _v, src, _g in shuffled)
    assert sum(len(shuffle.decode_flows(v)) for _p, v, _s, _g in shuffled) == sum(len(b) for _e, b in batches)


def test_reproduced_rows_regrouped_with_new_ones_are_applied_once(tmp_path):
    """After a restart prepare re-reads raw messages from its committed offset and may group them with newer ones:
    the shard applies only the rows of pieces it has not applied yet."""
    batches = training_batches(seconds=8)
    ref, ref_sent = _proc(tmp_path)
    ref.handle_raw_many(_raw_items(batches[:4]))
    ref.handle_raw_many(_raw_items(batches[4:], first_offset=4))
    p, sent = _proc(tmp_path)
    p.handle_raw_many(_raw_items(batches[:4]))  # raw offsets 0..3
    n_first = len(sent)
    p.handle_raw_many(_raw_items(batches[2:], first_offset=2))  # restart: 2..3 again, together with 4..7
    for q, out in ((ref, ref_sent), (p, sent)):
        for i, (part, v, src, segs) in enumerate(_shuffled(q, out)):
            q.handle_shuffle(part, i, v, src, segs)
    assert set(_cores(p)) == set(_cores(ref))
    assert _detector_outputs(p, sent) == _detector_outputs(ref, ref_sent)
    for part in _cores(ref):  # the same batches in the same order: the very same state
        assert _cores(p)[part].snapshot() == _cores(ref)[part].snapshot()
    assert n_first < len(sent)
    assert _metric(p, "fabricflow_processors_duplicate_batches_total") >= 1
    total = sum(len(b) for _e, b in batches)
    assert _metric(p, "fabricflow_processors_detect_records_total") == _metric(ref, "fabricflow_processors_detect_records_total") == total


def test_bad_seg_header_is_counted_not_fatal(tmp_path):
    p, sent = _proc(tmp_path)
    p.handle_raw_many(_raw_items(training_batches(seconds=3)))
    part, v, _src, segs = _shuffled(p, sent)[0]
    wrong = [(segs[0][0], (99, 0), 1)]  # one row where the batch has more
    assert p.handle_shuffle(part, 0, v, ("flows.raw.v1:0", (99, 0)), wrong) is True
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 0
    # a partially new message whose counts do not add up is counted as undecodable, nothing applied
    seen_first = [(segs[0][0], (0, 0), 1), (segs[0][0], (100, 0), 1)]
    assert p.handle_shuffle(part, 1, v, ("flows.raw.v1:0", (100, 0)), seen_first) is True
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 1


# ---------------------------------------------------------------------------- manual acks, snapshots every N / T


class _Msg:
    def __init__(self, partition, offset, headers=None, generation_id=None):
        self.partition, self.offset, self.headers, self.generation_id = partition, offset, headers, generation_id


class _Event:
    def __init__(self, partition, offset, value, headers=None, generation_id=None):
        self.message = _Msg(partition, offset, headers, generation_id)
        self.value = value


def _shard_msgs(p, seconds=30, shard=0):
    out = []
    for _e, b in training_batches(seconds=seconds):
        e = p.prepare.core.enrich(b)
        out.append(shuffle.encode_flows(b[shard_of(e, 2) == shard]))
    return out


def _state_of(p, part):
    return p.shards[part].core.snapshot(), p.shards[part].last_offset


def test_snapshot_every_n_messages_acks_only_covered_events(tmp_path):
    p, _sent = _proc(tmp_path)
    n = p.settings.processors.snapshot_every_messages
    msgs = _shard_msgs(p)
    events = [_Event(0, off, m) for off, m in enumerate((msgs * 4)[: n + 5])]
    acked = []
    for ev in events[: n - 1]:
        p.handle_shuffle_events([ev])
        acked += p.write_due_snapshots(now=0.0)
    assert acked == [] and b"0" not in p.state  # nothing snapshotted yet: nothing may be committed
    p.handle_shuffle_events(events[n - 1 : n + 5])
    acked += p.write_due_snapshots(now=0.0)
    assert [e.message.offset for e in acked] == list(range(n + 5))  # one snapshot covers all of them
    assert _metric(p, "fabricflow_processors_snapshots_total") == 1
    # The time rule: an idle partition's pending events are snapshotted once the oldest is snapshot_interval_s old.
    p.handle_shuffle_events([_Event(0, n + 5, msgs[0])])
    t0 = p.shards[0].pending_since
    assert p.write_due_snapshots(now=t0 + 0.1) == []
    assert [e.message.offset for e in p.write_due_snapshots(now=t0 + p.settings.processors.snapshot_interval_s)] == [n + 5]


def test_crash_between_snapshots_recovers_exactly(tmp_path):
    """Events applied after the last snapshot were not acked: Kafka re-delivers them from the committed offset
    (= last acked + 1) to the restarted worker, which re-applies them to the restored state."""
    snap_every = 7
    p, _sent = _proc(tmp_path, snapshot_every_messages=snap_every)
    msgs = _shard_msgs(p)
    committed = 0  # the consumer group's committed offset = 1 + highest contiguous acked offset
    crash_at = 25  # events 21..24 are applied (outputs produced) but not covered by a snapshot
    for off in range(crash_at):
        p.handle_shuffle_events([_Event(0, off, msgs[off])])
        for ev in p.write_due_snapshots(now=0.0):
            assert ev.message.offset == committed
            committed = ev.message.offset + 1
    assert committed == 21 and len(p.shards[0].pending) == 4
    # Crash: the worker's memory is lost; the table (changelog) holds the snapshot at offset 20.
    q, _ = _proc(tmp_path, snapshot_every_messages=snap_every)
    q.state = dict(p.state)
    for off in range(committed, len(msgs)):
        q.handle_shuffle_events([_Event(0, off, msgs[off])])
        q.write_due_snapshots(now=0.0)
    # An uninterrupted worker:
    r, _ = _proc(tmp_path)
    for off in range(len(msgs)):
        r.handle_shuffle(0, off, msgs[off])
    assert _state_of(q, 0) == _state_of(r, 0)
    # ... and the restored worker wrote the same snapshot an uninterrupted one would.
    import json
    import zlib

    assert json.loads(zlib.decompress(q.shards[0].snapshot())) == json.loads(zlib.decompress(r.shards[0].snapshot()))


def test_events_of_an_older_consumer_generation_are_ignored(tmp_path):
    p, _ = _proc(tmp_path)
    msgs = _shard_msgs(p, seconds=3)
    p.handle_shuffle_events([_Event(0, 0, msgs[0], generation_id=1), _Event(0, 1, msgs[1], generation_id=2)], generation=2)
    assert [e.message.offset for e in p.shards[0].pending] == [1]
    assert p.shards[0].last_offset == 1 and _metric(p, "fabricflow_processors_shuffle_messages_total") == 1


def test_force_snapshot_covers_every_pending_partition(tmp_path):
    p, _ = _proc(tmp_path)
    m0, m1 = _shard_msgs(p, seconds=3, shard=0), _shard_msgs(p, seconds=3, shard=1)
    p.handle_shuffle_events([_Event(0, 0, m0[0]), _Event(1, 0, m1[0]), _Event(0, 1, m0[1])])
    acked = p.write_due_snapshots(now=0.0, force=True)
    assert sorted((e.message.partition, e.message.offset) for e in acked) == [(0, 0), (0, 1), (1, 0)]
    assert set(p.state) == {b"0", b"1"} and not any(s.pending for s in p.shards)


def test_reusing_prepares_enriched_records_gives_the_same_state_and_outputs(tmp_path):
    """detect takes prepare's enriched rows for its own shards (no decode, no second enrichment): same result."""
    from processors.worker.shuffle import source_of

    runs = []
    for reuse in (262_144, 0):
        p, sent = _proc(tmp_path, reuse_enriched_records=reuse)
        for shard in (0, 1):
            p.core_for(shard)  # this worker owns both shards
        shuffle_topic = p.settings.kafka.topics.shuffle
        offsets = {0: 0, 1: 0}
        for i, (exp, b) in enumerate(training_batches(seconds=20)):
            n0 = len(sent)
            p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, i)
            for t, _k, v, part, h in sent[n0:]:
                if t == shuffle_topic:
                    p.handle_shuffle(part, offsets[part], v, source_of(h))
                    offsets[part] += 1
        outputs = [(t, k, v) for t, k, v, _p, _h in sent if t not in (shuffle_topic, p.settings.kafka.topics.flows_enriched)]
        runs.append(({k: c.snapshot() for k, c in _cores(p).items()}, outputs, _metric(p, "fabricflow_processors_reused_batches_total")))
    (snap_a, out_a, reused_a), (snap_b, out_b, reused_b) = runs
    assert reused_a > 0 and reused_b == 0
    assert snap_a == snap_b and out_a == out_b and len(out_a) > 0


def test_reuse_needs_the_same_message_bytes(tmp_path):
    from processors.worker.shuffle import source_of

    p, sent = _proc(tmp_path)
    p.core_for(0), p.core_for(1)
    exp, b = training_batches(seconds=2)[0]
    p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, 7)
    (part, v, h), *_ = [(part, v, h) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    other = shuffle.encode_flows(shuffle.decode_flows(v)[:3])  # e.g. another worker's message, same src
    assert p.reuse.take(p.shards[part], source_of(h), other) is None
    assert p.reuse.records == sum(len(e.enriched) for s in p.shards for e in s.reuse.values())


def test_events_of_a_revoked_partition_are_not_applied(tmp_path):
    p, _ = _proc(tmp_path)
    msgs = _shard_msgs(p, seconds=3)
    p.shards.assigned = {1}  # partition 0 was revoked while its events waited in the take buffer
    p.handle_shuffle_events([_Event(0, 0, msgs[0])])
    assert 0 not in p.shards and p.write_due_snapshots(now=0.0, force=True) == []


def test_worker_consumer_uses_the_configured_fetch_wait(tmp_path):
    """Faust hard-codes fetch_max_wait_ms=1500; the worker's Kafka consumer must get processors.fetch_max_wait_ms."""
    import asyncio

    from processors.worker.faust_app import make_app

    p, _sent = _proc(tmp_path, fetch_max_wait_ms=77)
    app = make_app(p)

    async def build():
        consumer = app.consumer
        kafka_consumer = consumer._thread._create_worker_consumer(app.transport)
        try:
            return kafka_consumer._fetch_max_wait_ms
        finally:
            await kafka_consumer.stop()

    assert asyncio.run(build()) == 77


def test_enriched_messages_from_label_codes_are_the_plain_encoding(tmp_path):
    p, sent = _proc(tmp_path)
    _exp, batch = training_batches(seconds=2)[0]
    enriched = p.prepare.core.enrich(batch)
    coded = p.prepare.core.enricher.label_codes(enriched)
    assert coded is not None
    for step in (1, 7, 64, 65, len(batch) - 1, len(batch), len(batch) + 5):
        sent.clear()
        p.publisher.enriched(b"k", enriched, step, coded)
        with_codes = [v for _t, _k, v, _p, _h in sent]
        sent.clear()
        p.publisher.enriched(b"k", enriched, step)
        assert with_codes == [v for _t, _k, v, _p, _h in sent]


def test_offsets_are_committed_only_after_the_publisher_delivered(tmp_path):
    """Shuffle/output messages go through confluent-kafka, not Faust's producer: a raw or shuffle offset must not be
    committed while messages produced for it are still queued (a crash would lose them)."""
    import asyncio

    from faust.transport.drivers import aiokafka as faust_aiokafka

    from processors.worker.faust_app import FetchWaitConsumer, make_app

    p, _sent = _proc(tmp_path)
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


def test_enriched_messages_copy_the_flow_fields_of_the_raw_message(tmp_path):
    """prepare copies each raw message's encoded flow fields into its enriched messages (flows.enriched.v2, and
    flows.enriched.v1 with processors.publish_v1): the same bytes as encoding the enriched records (our writer),
    the same records (another writer's blocks), and the plain encoding when the rows are split over several
    enriched messages."""
    import random

    from tests.unit.schemas.test_codec_fastpaths import other_writer

    _exp, batch = training_batches(seconds=2)[0]
    batch = batch[:300]
    for raw, step in ((codec.encode_batch("flow_batch", batch), 4096),
                      (other_writer("flow_batch", batch, random.Random(3), pad_varints=True), 4096),
                      (codec.encode_batch("flow_batch", batch), 64)):
        p, sent = _proc(tmp_path, enriched_max_records=step, publish_v1=True)
        p.handle_raw("flows.raw.v1", b"e1", raw, 0, 5)
        topics = p.settings.kafka.topics
        got = [v for t, _k, v, _p, _h in sent if t == topics.flows_enriched]
        got_v1 = [v for t, _k, v, _p, _h in sent if t == topics.flows_enriched_v1]
        expect = p.prepare.core.enrich(batch)
        lab = p.prepare.core.enrich_labels(batch)
        coded = lab.label_codes()
        plain = [codec.encode_coded("flow_enriched_batch_v2", lab[i : i + step], codec.coded_rows(coded, slice(i, i + step)))
                 for i in range(0, len(batch), step)]
        plain_v1 = [codec.encode_batch("flow_enriched_batch", expect[i : i + step]) for i in range(0, len(batch), step)]
        if raw[codec.HEADER_LEN:] == codec.encode_batch("flow_batch", batch)[codec.HEADER_LEN:]:
            assert got == plain
            assert got_v1 == plain_v1
        else:
            assert got != plain and got_v1 != plain_v1  # the other writer's blocks were copied ...
            assert len(got) == len(got_v1) == 1
            for m in (got[0], got_v1[0]):
                decoded = codec.decode_batch(m)  # ... and read back as the same records
                for name in expect.dtype.names:
                    assert decoded[name].tolist() == expect[name].tolist(), name


def test_enriched_v1_is_published_only_with_the_setting(tmp_path):
    _exp, batch = training_batches(seconds=2)[0]
    for publish_v1 in (False, True):
        p, sent = _proc(tmp_path, publish_v1=publish_v1)
        p.handle_raw("flows.raw.v1", b"e1", codec.encode_batch("flow_batch", batch[:100]), 0, 5)
        topics = p.settings.kafka.topics
        schemas = sorted(codec.schema_of(v) for t, _k, v, _p, _h in sent if t in (topics.flows_enriched, topics.flows_enriched_v1))
        assert schemas == (["flow_enriched_batch", "flow_enriched_batch_v2"] if publish_v1 else ["flow_enriched_batch_v2"])


def test_counter_samples_wait_for_a_batch_and_give_the_same_link_outputs(tmp_path):
    """detect queues counter samples per shard (processors.counter_batch_rows) and applies them together at the
    threshold and at the tick: the link-health outputs equal those of applying each message as it comes. A
    snapshot keeps the waiting samples (it does not apply them), and a restore from it applies them later."""
    from tests.support.flows import counters

    def message(t, exporters, late=False):
        rows = [dict(exporter=e, if_index=i, t=t - (25_000 if late and i == 1 else 0), in_octets=t * 1000 * (i + 1),
                     in_errors=t // 100 if e.endswith("11") else 0) for e in exporters for i in (1, 2)]
        return codec.encode_batch("counter_batch", counters(rows))

    msgs = [message(10_000 * k, ["192.0.2.10", "192.0.2.11"] if k % 2 else ["192.0.2.11", "192.0.2.12"], late=k == 5)
            for k in range(1, 13)]
    right_away, sent1 = _proc(tmp_path / "a", counter_batch_rows=1)
    queued, sent2 = _proc(tmp_path / "b", counter_batch_rows=40)
    link = right_away.settings.kafka.topics.link_health

    def links(sent):
        return [(k, v) for t, k, v, _p, _h in sent if t == link]

    for off, m in enumerate(msgs[:6]):
        right_away.handle_shuffle(1, off, m)
        queued.handle_shuffle(1, off, m)
    assert links(sent1) and not links(sent2)  # 24 samples wait (< 40)
    queued.checkpoint.commit([queued.shards[1]])
    assert not links(sent2) and queued.shards[1].counters_waiting  # kept, in the snapshot
    # the worker dies; the shard's next owner restores the snapshot with the waiting samples
    restored, sent3 = _proc(tmp_path / "c", counter_batch_rows=40)
    restored.state = dict(queued.state)
    restored.core_for(1)
    assert [len(c) for c in restored.shards[1].counters_waiting] == [4] * 6
    for off, m in enumerate(msgs[6:], 6):
        right_away.handle_shuffle(1, off, m)
        restored.handle_shuffle(1, off, m)
    assert len(links(sent3)) > 0  # 24 + 16 samples reached the threshold
    restored.on_tick(int(2e12))  # the rest at the tick
    assert not any(s.counters_waiting for s in restored.shards)
    assert links(sent3) == links(sent1)
    assert _cores(restored)[1].engine.link.stale == _cores(right_away)[1].engine.link.stale == 2
    assert _metric(restored, "fabricflow_processors_counter_samples_total") == 24


def test_snapshot_waits_for_the_outputs_of_the_messages_it_covers(tmp_path):
    """The output producer is flushed before a snapshot goes to the changelog; a snapshot whose outputs cannot
    be delivered is postponed (nothing written, its events stay pending and unacknowledged)."""
    p, _sent = _proc(tmp_path)
    order = []
    left = {"n": 3}
    p.publisher.flush = lambda timeout=10.0: order.append("flush") or left["n"]
    p.state = _RecordingStore(order)
    events = [_Event(0, off, m) for off, m in enumerate(_shard_msgs(p))]
    p.handle_shuffle_events(events)
    assert p.write_due_snapshots(now=0.0, force=True) == []  # 3 outputs not acknowledged: no snapshot
    assert order == ["flush"] and not p.state and len(p.shards[0].pending) == len(events)
    assert _metric(p, "fabricflow_processors_snapshots_total") == 0
    left["n"] = 0
    order.clear()
    assert p.write_due_snapshots(now=0.0, force=True) == events
    assert order == ["flush", "write"] and not p.shards[0].pending


class _RecordingStore(dict):
    def __init__(self, order):
        super().__init__()
        self.order = order

    def __setitem__(self, key, value):
        self.order.append("write")
        super().__setitem__(key, value)


def test_revocation_drops_the_shard_and_hands_its_state_over(tmp_path):
    """A revoked shard is one object dropped: its pending events are snapshotted (not acknowledged), its kept
    enriched rows leave the reuse cache, events of it still buffered are not applied, and both producers are
    flushed before the rebalance goes on."""
    import asyncio

    p, sent = _proc(tmp_path)
    p.shards.assigned = {0, 1}
    for off, (exp, b) in enumerate(training_batches(seconds=4)):
        p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, off)
    kept = {s.partition: sum(len(k.enriched) for k in s.reuse.values()) for s in p.shards}
    gone = max(kept, key=kept.get)
    assert kept[gone] and p.reuse.records == sum(kept.values())
    part, v, src, _segs = next(m for m in _shuffled(p, sent) if m[0] == gone)
    p.handle_shuffle_events([_Event(gone, 0, v, [shuffle.src_header(src[0], *src[1])])])
    assert len(p.shards[gone].pending) == 1 and str(gone).encode() not in p.state

    class _Changelog:
        flushed = 0

        async def flush(self):
            self.flushed += 1

    changelog = _Changelog()
    asyncio.run(p.revoke([gone], changelog))
    assert gone not in p.shards
    assert str(gone).encode() in p.state  # handed over: the next owner restores it and skips what it covers
    assert p.reuse.records == sum(n for k, n in kept.items() if k != gone)
    assert changelog.flushed == 1
    p.handle_shuffle_events([_Event(gone, 1, v)])  # still in Faust's buffers: not applied here
    assert gone not in p.shards


def test_counter_batches_reach_every_shard_and_copies_only_update_the_port_state(tmp_path):
    """prepare sends a counter batch to its exporter's shard and a copy marked role=state to every other
    shard; detect applies such a copy to the port state only (node_state), with no outputs and no counting."""
    from tests.support.flows import counters

    p, sent = _proc(tmp_path, counter_batch_rows=1)
    msgs = [codec.encode_batch("counter_batch", counters([dict(exporter="192.0.2.10", if_index=1, t=t,
                                                               in_octets=t * 1000)])) for t in (10_000, 20_000)]
    for off, m in enumerate(msgs):
        p.handle_raw("counters.raw.v1", b"192.0.2.10", m, 0, off)
    shuffled = [(part, h) for t, _k, _v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    assert sorted(part for part, _h in shuffled) == [0, 0, 1, 1]
    owner = [part for part, h in shuffled if not shuffle.is_state_only(h)]
    assert len(owner) == 2 and len(set(owner)) == 1
    other = 1 - owner[0]
    assert all(shuffle.is_state_only(h) for part, h in shuffled if part == other)
    sent.clear()
    for off, m in enumerate(msgs):
        assert p.handle_shuffle(other, off, m, state_only=True)
    cores = _cores(p)
    assert not [s for s in sent if s[0] == p.settings.kafka.topics.link_health]  # no outputs from a copy
    assert cores[other].engine.link.keys == [("192.0.2.10", 1)]  # but the port state is there
    assert _metric(p, "fabricflow_processors_counter_samples_total") == 0
    for off, m in enumerate(msgs):
        p.handle_shuffle(owner[0], off, m)
    assert [s for s in sent if s[0] == p.settings.kafka.topics.link_health]
    assert _metric(p, "fabricflow_processors_counter_samples_total") == 2


def test_counter_batches_taken_together_travel_as_one_message_per_shard_with_the_same_results(tmp_path):
    """Counter batches that prepare takes together go to each shard in ONE shuffle message (pieces framed as
    they came, a role per piece); detect then gives the same link records and the same port state in every
    shard as when each batch travels alone (the owner reports, the others keep the state)."""
    import zlib

    from tests.support.flows import counters

    exporters = ["192.0.2.10", "192.0.2.14", "192.0.2.11", "192.0.2.15"]
    assert len({zlib.crc32(e.encode()) % 2 for e in exporters}) == 2  # both shards own some
    items = [("counters.raw.v1", e.encode(), codec.encode_batch("counter_batch", counters(
        [dict(exporter=e, if_index=i, t=t, in_octets=t * (1000 + k), out_discards=t // 10 * (k == 2)) for i in (1, 2)])),
        0, off) for off, (t, k, e) in enumerate((t, k, e) for t in (10_000, 20_000, 30_000) for k, e in enumerate(exporters))]

    def run(together: bool):
        p, sent = _proc(tmp_path / str(together), counter_batch_rows=1)
        if together:
            p.handle_raw_many(items)
        else:
            for it in items:
                p.handle_raw(*it)
        topic = p.settings.kafka.topics.shuffle
        shuffled = [(part, v, h) for t, _k, v, part, h in sent if t == topic]
        sent.clear()
        offsets = {}
        for part, v, h in shuffled:
            offsets[part] = offsets.get(part, -1) + 1
            p.handle_shuffle_events([_Event(part, offsets[part], v, h)])
        links = {}  # the owner shard's link records in order (shards run independently: no order across them)
        for t, k, v, _p, _h in sent:
            if t == p.settings.kafka.topics.link_health:
                links.setdefault(zlib.crc32(k.split(b"|")[0]) % 2, []).append((k, v))
        state = {part: core.engine.link.snapshot() for part, core in _cores(p).items()}
        return shuffled, links, state, _metric(p, "fabricflow_processors_counter_samples_total")

    alone, links1, state1, n1 = run(False)
    together, links2, state2, n2 = run(True)
    assert len(alone) == 2 * len(items) and sorted(part for part, _v, _h in together) == [0, 1]
    assert all(v.startswith(shuffle.COUNTERS_MAGIC) for _p, v, _h in together)
    assert {shuffle.header(h, "role").count(",") for _p, _v, h in together} == {len(items) - 1}  # a role per piece
    assert sorted(links2) == [0, 1] and links1 == links2 and n1 == n2 == 2 * len(items)
    assert state1 == state2 and all(len(s["keys"]) == 2 * len(exporters) for s in state2.values())


def test_counter_owner_shard_is_the_one_replay_gives(tmp_path):
    """The shard that reports a counter batch's link health is chosen by one rule (fabricflow.streams.counter_shard):
    live from the message key (the exporter address as ingest writes it), replay from the rows' exporter_addr.
    192.0.2.10 and .14 are exporters whose shard the earlier replay rule (CRC32 of the 16-byte address) put
    elsewhere than live."""
    from replay.core import counter_shard_of
    from tests.support.flows import counters

    p, sent = _proc(tmp_path)
    exporters = ["192.0.2.10", "192.0.2.14", "10.255.0.4", "2001:db8::7"]
    for off, e in enumerate(exporters):
        rows = counters([dict(exporter=e, if_index=i, t=10_000) for i in (1, 2)])
        p.handle_raw("counters.raw.v1", e.encode(), codec.encode_batch("counter_batch", rows), 0, off)
        owners = [part for t, _k, _v, part, h in sent
                  if t == p.settings.kafka.topics.shuffle and not shuffle.state_roles(h)]
        assert owners == sorted(set(counter_shard_of(rows, 2).tolist())), e
        sent.clear()


def test_the_faust_app_heartbeats_three_times_per_session_and_starts_without_a_pause(tmp_path):
    from processors.worker.faust_app import TableManager

    from processors.worker.faust_app import make_app

    p, _ = _proc(tmp_path)
    conf = make_app(p).conf
    assert conf.broker_session_timeout == 6.0 and conf.broker_heartbeat_interval == 2.0  # Faust's own default: 3 s
    assert conf.TableManager is TableManager  # Faust's table manager waits 1 s before it subscribes; ours does not
