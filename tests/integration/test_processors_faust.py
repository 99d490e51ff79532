"""Processors as a real Faust worker on the embedded broker, from flows.raw.v1, counters.raw.v1 and discards.raw.v1
to the output topics (matrix, incast, straggler, link health with drop reasons, alerts): the same outputs as `fabricflow replay` of the same input, also
after the worker is killed mid-stream."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.support.matrix import expected_output
from tests.support.synth import training_batches

from .kafka_helpers import consume, create_topics, produce_batches, settings_for, write_config
from tests.support.faust_worker import KIND_TOPIC, collect, comparable, start_worker, stop_worker

pytestmark = pytest.mark.integration
INVENTORY = Path(__file__).resolve().parents[1] / "data" / "cluster_inventory.yaml"


def counter_batches(start_ms=1_767_225_600_000, seconds=60) -> list[tuple[str, np.ndarray]]:
    """(exporter, CounterBatch) every 5 s from two switches, 3 ports each: an error burst on one port, a downgrade
    on another, and one sample that arrives after a newer one of its port (stale)."""
    from tests.support.flows import counters

    out = []
    for k, t in enumerate(range(start_ms, start_ms + seconds * 1000 + 1, 5000)):
        for exporter in ("192.0.2.10", "192.0.2.11"):
            rows = [dict(exporter=exporter, if_index=i, t=t, seq=k + 1, uptime=t - start_ms + 1000,
                         in_octets=(t - start_ms) * 100 * i, out_octets=(t - start_ms) * 50 * i,
                         in_errors=(t - start_ms) // 10 if (exporter, i) == ("192.0.2.11", 2) and k >= 6 else 0,
                         speed=1_000_000_000 if (exporter, i) == ("192.0.2.10", 3) and k >= 8 else 25_000_000_000)
                    for i in (1, 2, 3)]
            out.append((exporter, counters(rows)))
    late = counters([dict(exporter="192.0.2.10", if_index=1, t=start_ms + 2500, seq=1, uptime=3500)])
    out.insert(len(out) // 2, ("192.0.2.10", late))
    return out


def discard_batches(start_ms=1_767_225_600_000) -> list[tuple[str, np.ndarray]]:
    """(exporter, DiscardedPacketBatch): 30 ACL drops on 192.0.2.10 port 2 between its samples at 20 and 25 s."""
    from tests.support.flows import discards

    return [("192.0.2.10", discards([dict(t=start_ms + 21_000 + 100 * i, out_if=2, reason=258) for i in range(30)]))]


def expected_outputs(settings, batches, counters=(), drops=()) -> list[tuple]:
    """What ``fabricflow replay`` computes for the same input (replay.replay_batches)."""
    from replay import core_factory_from, replay_batches

    factory = core_factory_from(settings.processors, inventory=str(INVENTORY))
    outs = replay_batches([b for _e, b in batches], [b for _e, b in counters], factory, settings.kafka.partitions,
                          discard_batches=[b for _e, b in drops])
    t = settings.kafka.topics
    res = []
    for kind, key, value in outs:
        # Round-trip through the codec so floats/enums compare like consumed messages (matrix: v2 windows).
        res.append(expected_output(getattr(t, KIND_TOPIC[kind]), kind, key, value))
    return res


def run_worker(cfg, log_path: Path, bootstrap: str, settings, flows, counters, until, sig=signal.SIGTERM, drops=()):
    """A worker subprocess fed ``flows``, ``counters`` and ``drops`` (raw batches; the notifications first, as
    ingest sends them long before the next counter sample), stopped with ``sig`` once ``until(proc)`` returns;
    returns what ``until`` returned."""
    proc = start_worker(cfg, log_path)
    try:
        produce_batches(bootstrap, settings.kafka.topics.discards_raw, drops, schema="discard_batch")
        produce_batches(bootstrap, settings.kafka.topics.flows_raw, flows)
        produce_batches(bootstrap, settings.kafka.topics.counters_raw, counters, schema="counter_batch")
        return until(proc)
    finally:
        stop_worker(proc, sig)


def _settings(kafka_bootstrap, unique_topic, tmp_path, **processors):
    return settings_for(
        kafka_bootstrap,
        unique_topic,
        processors={
            "app_id": "ff-" + unique_topic.strip("."),
            "inventory": str(INVENTORY),
            "datadir": str(tmp_path / "faust"),
            "web_port": 0,
            "metrics_port": 0,
            "tick_s": 0.5,
            "idle_close_s": 4,
            # The whole input is produced at once, so one raw partition can be consumed a minute of event
            # time ahead of the other; lateness must cover that skew (docs/operations.md, "Event time").
            "allowed_lateness_s": 120,
            **processors,
        },
    )


def test_worker_outputs_equal_replay(kafka_bootstrap, unique_topic, tmp_path):
    s = _settings(kafka_bootstrap, unique_topic, tmp_path)
    create_topics(s)
    batches = training_batches()
    ctrs = counter_batches()
    drops = discard_batches()
    expected = expected_outputs(s, batches, ctrs, drops)
    kinds = Counter(t for t, _k, _v in expected)
    assert kinds[s.kafka.topics.link_health] > 0
    assert any('"packet_drops"' in v and "acl 30" in v for t, _k, v in expected if t == s.kafka.topics.link_health)
    assert kinds[s.kafka.topics.incast] == 2 and kinds[s.kafka.topics.straggler] > 0
    assert any('"rule": "unregistered_host"' in v and '"state": "firing"' in v for t, _k, v in expected if t == s.kafka.topics.alerts)
    cfg = write_config(tmp_path / "c.yaml", s)
    got = run_worker(cfg, tmp_path / "worker.log", kafka_bootstrap, s, batches, ctrs,
                     lambda proc: collect(s, expected, proc=proc), drops=drops)
    log = (tmp_path / "worker.log").read_text(errors="replace")
    # Live outputs == replay of the same input (alerts compared by identity, see comparable()).
    alerts = s.kafka.topics.alerts
    assert Counter(comparable(got, alerts)) == Counter(comparable(expected, alerts)), log[-3000:]
    # Enriched flows were published for platform teams, every record once.
    from .kafka_helpers import count_records

    enriched = consume(kafka_bootstrap, s.kafka.topics.flows_enriched, until=lambda ms: count_records(ms) >= sum(len(b) for _e, b in batches))
    assert count_records(enriched) == sum(len(b) for _e, b in batches)


def test_worker_killed_mid_stream_recovers_same_outputs(kafka_bootstrap, unique_topic, tmp_path):
    # Snapshots every 3 shuffle messages (no time rule within the test): the kill lands between snapshots, so the
    # restarted worker restores the last snapshot and re-applies the unacknowledged messages after it.
    s = _settings(kafka_bootstrap, unique_topic, tmp_path, snapshot_every_messages=3, snapshot_interval_s=600)
    create_topics(s)
    batches = training_batches(seed=2)
    ctrs = counter_batches()  # link health: counter samples wait in detect (counter_batch_rows), lost at the kill
    expected = expected_outputs(s, batches, ctrs)
    assert any(t == s.kafka.topics.link_health and '"error_burst"' in v for t, _k, v in expected)
    assert any(t == s.kafka.topics.link_health and '"link_downgrade"' in v for t, _k, v in expected)
    cfg = write_config(tmp_path / "c.yaml", s)
    first, second = batches[: len(batches) // 2], batches[len(batches) // 2 :]
    # Wait until the worker has produced some matrix windows, then kill it hard. (One matrix.windows.v2 message is
    # a whole window of one level and shard: waiting for 10 of them, as for 10 v1 cells before, outlasted what the
    # first half gives and killed the worker only at the 90 s timeout.)
    first_windows = run_worker(cfg, tmp_path / "worker1.log", kafka_bootstrap, s, first, ctrs[: len(ctrs) // 2],
                               lambda _proc: consume(kafka_bootstrap, s.kafka.topics.matrix,
                                                     until=lambda ms: len(ms) >= 1, timeout_s=90), signal.SIGKILL)
    assert first_windows, (tmp_path / "worker1.log").read_text(errors="replace")[-3000:]
    # Down for longer than idle_close_s: downtime is not idle time, the restored windows must wait for the
    # re-delivered backlog (they were closed at the first tick after the restore before this was fixed).
    time.sleep(s.processors.idle_close_s + 1)
    got = run_worker(cfg, tmp_path / "worker2.log", kafka_bootstrap, s, second, ctrs[len(ctrs) // 2 :],
                     lambda proc: collect(s, expected, proc=proc))
    log = (tmp_path / "worker2.log").read_text(errors="replace")
    # At-least-once outputs with deterministic keys: the set of distinct outputs equals an uninterrupted run.
    alerts = s.kafka.topics.alerts
    assert set(comparable(got, alerts)) == set(comparable(expected, alerts)), log[-3000:]


def test_raw_offsets_are_committed_only_after_the_shuffle_is_delivered(kafka_bootstrap, unique_topic, tmp_path):
    """A worker killed right after it committed its raw offsets has delivered every shuffle message for them.

    The publisher holds messages up to 5 s (output_linger_ms) while Faust commits every ~3 s: a commit that did not
    wait for the publisher would cover raw records whose shuffle messages die with the worker (lost for good: the
    restarted worker resumes after the committed offset)."""
    from confluent_kafka import Consumer, TopicPartition

    from processors.worker import shuffle

    s = _settings(kafka_bootstrap, unique_topic, tmp_path, output_linger_ms=5000)
    create_topics(s)
    batches = training_batches(seconds=20, seed=3)
    produced = produce_batches(kafka_bootstrap, s.kafka.topics.flows_raw, batches)
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": s.processors.app_id, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(s.kafka.topics.flows_raw, i) for i in range(s.kafka.partitions)]
        proc = start_worker(write_config(tmp_path / "c.yaml", s), tmp_path / "worker.log")
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                # one message per batch, offsets from 0 (Tansu's high watermark is not to be trusted)
                committed = sum(max(tp.offset, 0) for tp in probe.committed(tps, timeout=10))
                if committed >= len(batches):
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"raw offsets not committed: {committed} of {len(batches)} messages")
        finally:
            stop_worker(proc, signal.SIGKILL)  # at once: nothing left in the publisher gets out after this
    finally:
        probe.close()
    msgs = consume(kafka_bootstrap, s.kafka.topics.shuffle, idle_s=3)
    shuffled = sum(len(shuffle.decode_flows(m.value())) for m in msgs if shuffle.is_flow_batch(m.value()))
    assert shuffled == produced, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
