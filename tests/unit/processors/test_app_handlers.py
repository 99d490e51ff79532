"""Faust wiring without a broker: handlers, re-delivery after restore, metrics."""

from pathlib import Path

import numpy as np

from fabricflow.settings import load_settings
from processors.app import Processors
from processors.logic.core import shard_of
from schemas import codec
from tests.synth import training_batches

INVENTORY = Path(__file__).resolve().parents[2] / "data" / "cluster_inventory.yaml"


def _proc(tmp_path):
    s = load_settings(
        None,
        kafka={"bootstrap_servers": "127.0.0.1:9", "partitions": 2},
        processors={"inventory": str(INVENTORY), "datadir": str(tmp_path), "metrics_port": 0, "web_port": 0},
    )
    p = Processors(s)
    sent = []
    p.publisher.produce = lambda topic, key, value, partition=None, headers=None: sent.append((topic, key, value, partition, headers))
    p.publisher.poll = lambda: None
    p.state = {}  # the Faust table, replaced by a dict
    return p, sent


def _metric(p, name, **labels):
    return p.metrics.registry.get_sample_value(name, labels) or 0


def test_prepare_enriches_and_reshards(tmp_path):
    p, sent = _proc(tmp_path)
    exp, batch = training_batches(seconds=2)[0]
    p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", batch))
    enriched = [codec.decode_batch(v) for t, _k, v, _p, _h in sent if t == p.settings.kafka.topics.flows_enriched]
    shuffled = [(part, codec.decode_batch(v, expect="flow_batch")) for t, _k, v, part, _h in sent if t == p.settings.kafka.topics.shuffle]
    assert all(h and h[0][0] == "src" for t, _k, _v, _p, h in sent if t == p.settings.kafka.topics.shuffle)
    assert sum(len(e) for e in enriched) == len(batch)
    assert sum(len(b) for _p, b in shuffled) == len(batch)
    for part, b in shuffled:  # every row went to the shard shard_of() names (shuffle carries raw rows)
        assert set(shard_of(p.prepare_core.enrich(b), 2).tolist()) == {part}
    assert _metric(p, "fabricflow_processors_records_total") == len(batch)
    assert set(enriched[0]["src_job"].tolist()) == {"train-a"}


def test_shuffle_redelivery_after_restore_is_skipped(tmp_path):
    p, sent = _proc(tmp_path)
    batches = training_batches(seconds=30)
    msgs = []
    for _e, b in batches:
        e = p.prepare_core.enrich(b)
        msgs.append(codec.encode_batch("flow_batch", b[shard_of(e, 2) == 0]))
    for off, m in enumerate(msgs[:20]):
        p.state[b"0"] = p.handle_shuffle(0, off, m)
    # A new worker (restart) restores the snapshot; Kafka re-delivers from an older committed offset.
    q, sent2 = _proc(tmp_path)
    q.state = {b"0": p.state[b"0"]}
    assert q.handle_shuffle(0, 15, msgs[15]) is None  # already in the snapshot: skipped
    for off in range(20, len(msgs)):
        p.handle_shuffle(0, off, msgs[off])
        q.handle_shuffle(0, off, msgs[off])
    assert q.cores[0].snapshot() == p.cores[0].snapshot()


def test_undecodable_messages_are_counted_not_fatal(tmp_path):
    p, sent = _proc(tmp_path)
    p.handle_raw("flows.raw.v1", b"k", b"not avro")
    assert p.handle_shuffle(0, 0, b"\xc3\x01garbage") is not None
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic="flows.raw.v1") == 1
    assert _metric(p, "fabricflow_processors_undecodable_messages_total", topic=p.settings.kafka.topics.shuffle) == 1
    p._failed("detect", RuntimeError("boom"))
    assert _metric(p, "fabricflow_processors_errors_total", stage="detect") == 1
    assert not p.metrics.healthy()


def test_batches_reproduced_by_prepare_after_a_restart_are_applied_once(tmp_path):
    """prepare is at-least-once: after a crash it re-produces shuffle messages (new offsets, same src header)."""
    from processors.app import source_of

    p, sent = _proc(tmp_path)
    for off, (exp, b) in enumerate(training_batches(seconds=5)):
        p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), 0, off)
    shuffle = [(part, v, h) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    for i, (part, v, h) in enumerate(shuffle):
        p.handle_shuffle(part, i, v, source_of(h))
    before = {k: c.snapshot() for k, c in p.cores.items()}
    # The same shuffle messages again, at later offsets (as re-produced after a restart):
    for i, (part, v, h) in enumerate(shuffle):
        assert p.handle_shuffle(part, 1000 + i, v, source_of(h)) is None
    assert {k: c.snapshot() for k, c in p.cores.items()} == before
    assert _metric(p, "fabricflow_processors_duplicate_batches_total") == len(shuffle)
