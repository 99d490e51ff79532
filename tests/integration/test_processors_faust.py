"""Processors as a real Faust worker on the embedded broker: same outputs as the pure core, survives a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from processors.logic.core import ProcessorCore, engine_config, shard_of
from processors.logic.inventory import Inventory
from tests.synth import training_batches

from .kafka_helpers import consume, create_topics, decode_outputs, produce_batches, settings_for, write_config

pytestmark = pytest.mark.integration
INVENTORY = Path(__file__).resolve().parents[1] / "data" / "cluster_inventory.yaml"
KIND_TOPIC = {"matrix": "matrix", "incast": "incast", "straggler": "straggler", "link": "link_health", "alert": "alerts"}


def expected_outputs(settings, batches) -> list[tuple]:
    """What the pure core gives for the same input, sharded like the workers."""
    from schemas import codec

    inv = Inventory.load(INVENTORY)
    cfg = engine_config(settings.processors)
    prep = ProcessorCore(inv, cfg)
    cores: dict[int, ProcessorCore] = {}
    outs = []
    for _exp, b in batches:
        e = prep.enrich(b)
        shards = shard_of(e, settings.kafka.partitions)
        for p in np.unique(shards):
            core = cores.setdefault(int(p), ProcessorCore(inv, cfg))
            outs += core.process_enriched(e[shards == p])
    for core in cores.values():
        outs += core.flush()
    t = settings.kafka.topics
    res = []
    for kind, key, value in outs:
        topic = getattr(t, KIND_TOPIC[kind])
        # Round-trip through the codec so floats/enums compare like consumed messages.
        schema = {"matrix": "matrix_cell", "incast": "incast_event", "straggler": "straggler_score", "link": "link_health", "alert": "alert"}[kind]
        v = codec.decode_record(codec.encode_record(schema, value))
        res.append((topic, key, json.dumps(v, sort_keys=True, default=str)))
    return res


def start_worker(cfg_path: str, log_path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    return subprocess.Popen(
        [sys.executable, "-m", "fabricflow", "--config", cfg_path, "process"],
        stdout=open(log_path, "ab"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def stop_worker(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def collect(settings, expected, timeout_s=120, proc=None):
    """Consume each output topic until every expected output has been seen (duplicates allowed) or timeout."""
    by_topic: dict[str, set] = {}
    for item in expected:
        by_topic.setdefault(item[0], set()).add(item)
    got = []
    for topic, want in by_topic.items():
        if proc is not None and proc.poll() is not None:
            break  # the worker died: fail fast, the log tells why

        def done(ms, want=want, n=len([e for e in expected if e[0] == topic])):
            return len(ms) >= n and want <= set(decode_outputs(ms))

        got += decode_outputs(consume(settings.kafka.bootstrap_servers, topic, until=done, timeout_s=timeout_s))
    return got


def _settings(kafka_bootstrap, unique_topic, tmp_path):
    return settings_for(
        kafka_bootstrap,
        unique_topic,
        processors={
            "app_id": "ff-" + unique_topic.strip("."),
            "inventory": str(INVENTORY),
            "datadir": str(tmp_path / "faust"),
            "web_port": 0,
            "tick_s": 0.5,
            "idle_close_s": 4,
        },
    )


def test_worker_outputs_equal_pure_core(kafka_bootstrap, unique_topic, tmp_path):
    s = _settings(kafka_bootstrap, unique_topic, tmp_path)
    create_topics(s)
    batches = training_batches()
    expected = expected_outputs(s, batches)
    kinds = Counter(t for t, _k, _v in expected)
    assert kinds[s.kafka.topics.incast] == 2 and kinds[s.kafka.topics.straggler] > 0
    cfg = write_config(tmp_path / "c.yaml", s)
    proc = start_worker(cfg, tmp_path / "worker.log")
    try:
        produce_batches(kafka_bootstrap, s.kafka.topics.flows_raw, batches)
        got = collect(s, expected, proc=proc)
    finally:
        stop_worker(proc)
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert Counter(got) == Counter(expected), log[-3000:]
    # Enriched flows were published for platform teams, every record once.
    from .kafka_helpers import count_records

    enriched = consume(kafka_bootstrap, s.kafka.topics.flows_enriched, until=lambda ms: count_records(ms) >= sum(len(b) for _e, b in batches))
    assert count_records(enriched) == sum(len(b) for _e, b in batches)


def test_worker_killed_mid_stream_recovers_same_outputs(kafka_bootstrap, unique_topic, tmp_path):
    s = _settings(kafka_bootstrap, unique_topic, tmp_path)
    create_topics(s)
    batches = training_batches(seed=2)
    expected = expected_outputs(s, batches)
    cfg = write_config(tmp_path / "c.yaml", s)
    first, second = batches[: len(batches) // 2], batches[len(batches) // 2 :]
    proc = start_worker(cfg, tmp_path / "worker1.log")
    try:
        produce_batches(kafka_bootstrap, s.kafka.topics.flows_raw, first)
        # Wait until the worker has produced some matrix windows, then kill it hard.
        consume(kafka_bootstrap, s.kafka.topics.matrix, until=lambda ms: len(ms) >= 10, timeout_s=90)
    finally:
        stop_worker(proc, signal.SIGKILL)
    proc = start_worker(cfg, tmp_path / "worker2.log")
    try:
        produce_batches(kafka_bootstrap, s.kafka.topics.flows_raw, second)
        got = collect(s, expected, proc=proc)
    finally:
        stop_worker(proc)
    log = (tmp_path / "worker2.log").read_text(errors="replace")
    # At-least-once outputs with deterministic keys: the set of distinct outputs equals an uninterrupted run.
    assert set(got) == set(expected), log[-3000:]
