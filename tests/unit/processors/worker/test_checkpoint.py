"""The processor worker without a broker, checkpoints: manual acks, snapshots every N messages / T seconds, restore, revocation hand-over."""

from processors.worker import shuffle
from schemas import codec
from tests.support.synth import training_batches
from tests.support.worker import Event, RecordingStore, detecting_cores, metric_value, shard_msgs, shuffle_messages, state_of, worker_without_broker


def test_snapshot_every_n_messages_acks_only_covered_events(tmp_path):
    p, _sent = worker_without_broker(tmp_path)
    n = p.settings.processors.snapshot_every_messages
    msgs = shard_msgs(p)
    events = [Event(0, off, m) for off, m in enumerate((msgs * 4)[: n + 5])]
    acked = []
    for ev in events[: n - 1]:
        p.handle_shuffle_events([ev])
        acked += p.write_due_snapshots(now=0.0)
    assert acked == [] and b"0" not in p.state  # nothing snapshotted yet: nothing may be committed
    p.handle_shuffle_events(events[n - 1 : n + 5])
    acked += p.write_due_snapshots(now=0.0)
    assert [e.message.offset for e in acked] == list(range(n + 5))  # one snapshot covers all of them
    assert metric_value(p, "fabricflow_processors_snapshots_total") == 1
    # The time rule: an idle partition's pending events are snapshotted once the oldest is snapshot_interval_s old.
    p.handle_shuffle_events([Event(0, n + 5, msgs[0])])
    t0 = p.shards[0].pending_since
    assert p.write_due_snapshots(now=t0 + 0.1) == []
    assert [e.message.offset for e in p.write_due_snapshots(now=t0 + p.settings.processors.snapshot_interval_s)] == [n + 5]


def test_crash_between_snapshots_recovers_exactly(tmp_path):
    """Events applied after the last snapshot were not acked: Kafka re-delivers them from the committed offset
    (= last acked + 1) to the restarted worker, which re-applies them to the restored state."""
    snap_every = 7
    p, _sent = worker_without_broker(tmp_path, snapshot_every_messages=snap_every)
    msgs = shard_msgs(p)
    committed = 0  # the consumer group's committed offset = 1 + highest contiguous acked offset
    crash_at = 25  # events 21..24 are applied (outputs produced) but not covered by a snapshot
    for off in range(crash_at):
        p.handle_shuffle_events([Event(0, off, msgs[off])])
        for ev in p.write_due_snapshots(now=0.0):
            assert ev.message.offset == committed
            committed = ev.message.offset + 1
    assert committed == 21 and len(p.shards[0].pending) == 4
    # Crash: the worker's memory is lost; the table (changelog) holds the snapshot at offset 20.
    q, _ = worker_without_broker(tmp_path, snapshot_every_messages=snap_every)
    q.state = dict(p.state)
    for off in range(committed, len(msgs)):
        q.handle_shuffle_events([Event(0, off, msgs[off])])
        q.write_due_snapshots(now=0.0)
    # An uninterrupted worker:
    r, _ = worker_without_broker(tmp_path)
    for off in range(len(msgs)):
        r.handle_shuffle(0, off, msgs[off])
    assert state_of(q, 0) == state_of(r, 0)
    # ... and the restored worker wrote the same snapshot an uninterrupted one would.
    import json
    import zlib

    assert json.loads(zlib.decompress(q.shards[0].snapshot())) == json.loads(zlib.decompress(r.shards[0].snapshot()))


def test_events_of_an_older_consumer_generation_are_ignored(tmp_path):
    p, _ = worker_without_broker(tmp_path)
    msgs = shard_msgs(p, seconds=3)
    p.handle_shuffle_events([Event(0, 0, msgs[0], generation_id=1), Event(0, 1, msgs[1], generation_id=2)], generation=2)
    assert [e.message.offset for e in p.shards[0].pending] == [1]
    assert p.shards[0].last_offset == 1 and metric_value(p, "fabricflow_processors_shuffle_messages_total") == 1


def test_force_snapshot_covers_every_pending_partition(tmp_path):
    p, _ = worker_without_broker(tmp_path)
    m0, m1 = shard_msgs(p, seconds=3, shard=0), shard_msgs(p, seconds=3, shard=1)
    p.handle_shuffle_events([Event(0, 0, m0[0]), Event(1, 0, m1[0]), Event(0, 1, m0[1])])
    acked = p.write_due_snapshots(now=0.0, force=True)
    assert sorted((e.message.partition, e.message.offset) for e in acked) == [(0, 0), (0, 1), (1, 0)]
    assert set(p.state) == {b"0", b"1"} and not any(s.pending for s in p.shards)


def test_reusing_prepares_enriched_records_gives_the_same_state_and_outputs(tmp_path):
    """detect takes prepare's enriched rows for its own shards (no decode, no second enrichment): same result."""
    from processors.worker.shuffle import source_of

    runs = []
    for reuse in (262_144, 0):
        p, sent = worker_without_broker(tmp_path, reuse_enriched_records=reuse)
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
        runs.append(({k: c.snapshot() for k, c in detecting_cores(p).items()}, outputs, metric_value(p, "fabricflow_processors_reused_batches_total")))
    (snap_a, out_a, reused_a), (snap_b, out_b, reused_b) = runs
    assert reused_a > 0 and reused_b == 0
    assert snap_a == snap_b and out_a == out_b and len(out_a) > 0


def test_reuse_needs_the_same_message_bytes(tmp_path):
    from processors.worker.shuffle import source_of

    p, sent = worker_without_broker(tmp_path)
    p.core_for(0), p.core_for(1)
    exp, b = training_batches(seconds=2)[0]
    p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, 7)
    (part, v, h), *_ = [(part, v, h) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    other = shuffle.encode_flows(shuffle.decode_flows(v)[:3])  # e.g. another worker's message, same src
    assert p.reuse.take(p.shards[part], source_of(h), other) is None
    assert p.reuse.records == sum(len(e.enriched) for s in p.shards for e in s.reuse.values())


def test_events_of_a_revoked_partition_are_not_applied(tmp_path):
    p, _ = worker_without_broker(tmp_path)
    msgs = shard_msgs(p, seconds=3)
    p.shards.assigned = {1}  # partition 0 was revoked while its events waited in the take buffer
    p.handle_shuffle_events([Event(0, 0, msgs[0])])
    assert 0 not in p.shards and p.write_due_snapshots(now=0.0, force=True) == []


def test_snapshot_waits_for_the_outputs_of_the_messages_it_covers(tmp_path):
    """The output producer is flushed before a snapshot goes to the changelog; a snapshot whose outputs cannot
    be delivered is postponed (nothing written, its events stay pending and unacknowledged)."""
    p, _sent = worker_without_broker(tmp_path)
    order = []
    left = {"n": 3}
    p.publisher.flush = lambda timeout=10.0: order.append("flush") or left["n"]
    p.state = RecordingStore(order)
    events = [Event(0, off, m) for off, m in enumerate(shard_msgs(p))]
    p.handle_shuffle_events(events)
    assert p.write_due_snapshots(now=0.0, force=True) == []  # 3 outputs not acknowledged: no snapshot
    assert order == ["flush"] and not p.state and len(p.shards[0].pending) == len(events)
    assert metric_value(p, "fabricflow_processors_snapshots_total") == 0
    left["n"] = 0
    order.clear()
    assert p.write_due_snapshots(now=0.0, force=True) == events
    assert order == ["flush", "write"] and not p.shards[0].pending


def test_revocation_drops_the_shard_and_hands_its_state_over(tmp_path):
    """A revoked shard is one object dropped: its pending events are snapshotted (not acknowledged), its kept
    enriched rows leave the reuse cache, events of it still buffered are not applied, and both producers are
    flushed before the rebalance goes on."""
    import asyncio

    p, sent = worker_without_broker(tmp_path)
    p.shards.assigned = {0, 1}
    for off, (exp, b) in enumerate(training_batches(seconds=4)):
        p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, off)
    kept = {s.partition: sum(len(k.enriched) for k in s.reuse.values()) for s in p.shards}
    gone = max(kept, key=kept.get)
    assert kept[gone] and p.reuse.records == sum(kept.values())
    part, v, src, _segs = next(m for m in shuffle_messages(p, sent) if m[0] == gone)
    p.handle_shuffle_events([Event(gone, 0, v, [shuffle.src_header(src[0], *src[1])])])
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
    p.handle_shuffle_events([Event(gone, 1, v)])  # still in Faust's buffers: not applied here
    assert gone not in p.shards
