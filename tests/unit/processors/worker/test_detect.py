"""The processor worker without a broker, detect: shuffle messages applied once (re-delivery, reproduced batches), undecodable ones counted."""

from processors.logic.core import shard_of
from processors.worker import shuffle
from schemas import codec
from tests.support.synth import training_batches
from tests.support.worker import detecting_cores, detector_outputs, metric_value, raw_items, shuffle_messages, worker_without_broker


def test_shuffle_redelivery_after_restore_is_skipped(tmp_path):
    p, sent = worker_without_broker(tmp_path)
    batches = training_batches(seconds=30)
    msgs = []
    for _e, b in batches:
        e = p.prepare.core.enrich(b)
        msgs.append(shuffle.encode_flows(b[shard_of(e, 2) == 0]))
    for off, m in enumerate(msgs[:20]):
        p.handle_shuffle(0, off, m)
    p.checkpoint.commit([p.shards[0]])
    # A new worker (restart) restores the snapshot; Kafka re-delivers from an older committed offset.
    q, sent2 = worker_without_broker(tmp_path)
    q.state = {b"0": p.state[b"0"]}
    assert q.handle_shuffle(0, 15, msgs[15]) is False  # already in the snapshot: skipped
    for off in range(20, len(msgs)):
        p.handle_shuffle(0, off, msgs[off])
        q.handle_shuffle(0, off, msgs[off])
    assert detecting_cores(q)[0].snapshot() == detecting_cores(p)[0].snapshot()


def test_detect_reads_only_the_current_shuffle_format(tmp_path):
    """The shuffle is internal and short-lived: detect reads LZ4 .npy flow batches and Avro counter batches only.
    Messages of earlier versions (Avro FlowBatch / FlowEnrichedBatch, plain .npy) are counted as undecodable and
    skipped, the shard's state untouched."""
    p, _ = worker_without_broker(tmp_path)
    q, _ = worker_without_broker(tmp_path)
    batches = training_batches(seconds=12)
    for off, (_e, b) in enumerate(batches):
        for shard in (0, 1):
            part = b[shard_of(p.prepare.core.enrich(b), 2) == shard]
            p.handle_shuffle(shard, off, shuffle.encode_flows(part))
    assert sum(c.stats.raw_records for c in detecting_cores(p).values()) == sum(len(b) for _e, b in batches)
    assert metric_value(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 0
    _e, b = batches[0]
    legacy = [codec.encode_batch("flow_batch", b), codec.encode_batch("flow_enriched_batch", p.prepare.core.enrich(b)),
              shuffle.npy_bytes(b)]
    for off, m in enumerate(legacy):
        assert q.handle_shuffle(0, off, m) is True
    assert metric_value(q, "fabricflow_processors_undecodable_messages_total", topic=q.settings.kafka.topics.shuffle) == 3
    assert q.shards[0].core.stats.raw_records == 0 and q.shards[0].last_offset == 2


def test_undecodable_messages_are_counted_not_fatal(tmp_path):
    p, sent = worker_without_broker(tmp_path)
    p.handle_raw("flows.raw.v1", b"k", b"not avro")
    assert p.handle_shuffle(0, 0, b"\xc3\x01garbage") is True
    assert p.handle_shuffle(0, 1, shuffle.MAGIC + b"\x01\x00garbage") is True
    assert p.handle_shuffle(0, 2, shuffle.LZ4_MAGIC + b"\x10\x00\x00\x00garbage") is True
    assert metric_value(p, "fabricflow_processors_undecodable_messages_total", topic="flows.raw.v1") == 1
    assert metric_value(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 3
    p.metrics.failed("detect", RuntimeError("boom"))
    assert metric_value(p, "fabricflow_processors_errors_total", stage="detect") == 1
    assert not p.metrics.healthy()


def test_batches_reproduced_by_prepare_after_a_restart_are_applied_once(tmp_path):
    """prepare is at-least-once: after a crash it re-produces shuffle messages (new offsets, same src header)."""
    from processors.worker.shuffle import source_of

    p, sent = worker_without_broker(tmp_path)
    for off, (exp, b) in enumerate(training_batches(seconds=5)):
        p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, off)
    shuffle = [(part, v, h) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    for i, (part, v, h) in enumerate(shuffle):
        p.handle_shuffle(part, i, v, source_of(h))
    before = {k: c.snapshot() for k, c in detecting_cores(p).items()}
    # The same shuffle messages again, at later offsets (as re-produced after a restart):
    for i, (part, v, h) in enumerate(shuffle):
        assert p.handle_shuffle(part, 1000 + i, v, source_of(h)) is False
    assert {k: c.snapshot() for k, c in detecting_cores(p).items()} == before
    assert metric_value(p, "fabricflow_processors_duplicate_batches_total") == len(shuffle)


def test_reproduced_rows_regrouped_with_new_ones_are_applied_once(tmp_path):
    """After a restart prepare re-reads raw messages from its committed offset and may group them with newer ones:
    the shard applies only the rows of pieces it has not applied yet."""
    batches = training_batches(seconds=8)
    ref, ref_sent = worker_without_broker(tmp_path)
    ref.handle_raw_many(raw_items(batches[:4]))
    ref.handle_raw_many(raw_items(batches[4:], first_offset=4))
    p, sent = worker_without_broker(tmp_path)
    p.handle_raw_many(raw_items(batches[:4]))  # raw offsets 0..3
    n_first = len(sent)
    p.handle_raw_many(raw_items(batches[2:], first_offset=2))  # restart: 2..3 again, together with 4..7
    for q, out in ((ref, ref_sent), (p, sent)):
        for i, (part, v, src, segs) in enumerate(shuffle_messages(q, out)):
            q.handle_shuffle(part, i, v, src, segs)
    assert set(detecting_cores(p)) == set(detecting_cores(ref))
    assert detector_outputs(p, sent) == detector_outputs(ref, ref_sent)
    for part in detecting_cores(ref):  # the same batches in the same order: the very same state
        assert detecting_cores(p)[part].snapshot() == detecting_cores(ref)[part].snapshot()
    assert n_first < len(sent)
    assert metric_value(p, "fabricflow_processors_duplicate_batches_total") >= 1
    total = sum(len(b) for _e, b in batches)
    assert metric_value(p, "fabricflow_processors_detect_records_total") == metric_value(ref, "fabricflow_processors_detect_records_total") == total


def test_bad_seg_header_is_counted_not_fatal(tmp_path):
    p, sent = worker_without_broker(tmp_path)
    p.handle_raw_many(raw_items(training_batches(seconds=3)))
    part, v, _src, segs = shuffle_messages(p, sent)[0]
    wrong = [(segs[0][0], (99, 0), 1)]  # one row where the batch has more
    assert p.handle_shuffle(part, 0, v, ("flows.raw.v1:0", (99, 0)), wrong) is True
    assert metric_value(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 0
    # a partially new message whose counts do not add up is counted as undecodable, nothing applied
    seen_first = [(segs[0][0], (0, 0), 1), (segs[0][0], (100, 0), 1)]
    assert p.handle_shuffle(part, 1, v, ("flows.raw.v1:0", (100, 0)), seen_first) is True
    assert metric_value(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 1
