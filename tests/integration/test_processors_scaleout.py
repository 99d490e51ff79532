"""Two ``fabricflow process`` workers in one consumer group split the partitions and give the pure core's outputs.

Two 8-node training jobs whose shuffle shards differ (``train-a`` -> shuffle
partition 1, ``train-d`` -> 0); job A's exporters on raw partition 0, job B's
on raw partition 1. After the rebalance each worker enriches one raw partition
and runs the detectors of one job (with Faust's co-partitioned assignment, the
other worker's job: records cross between the workers through the shuffle
topic). Outputs are at-least-once, so the sets of distinct outputs are
compared with the pure core (sharded the same way).
"""

from __future__ import annotations

import re
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from fabricflow.streams import OUTPUTS
from processors.config_files import read_inventory
from processors.logic.core import ProcessorCore, engine_config, shard_of
from schemas.columns import v4_column_to_addr16
from tests.support.faust_worker import KIND_TOPIC, collect, comparable, start_worker, stop_worker
from tests.support.matrix import expected_output
from tests.support.synth import UNREGISTERED, training_batches

from .kafka_helpers import create_topics, settings_for, write_config

pytestmark = pytest.mark.integration

JOBS = ("train-a", "train-d")  # crc32 % 2 differ: one shuffle partition each
NODES_PER_JOB = 8


def write_inventory(path: Path) -> Path:
    lines = ["version: 1", "cluster_ranges: [10.30.0.0/16]", "nodes:"]
    for i in range(1, NODES_PER_JOB * len(JOBS) + 1):
        switch = f"tor-{(i - 1) // 4 + 1}"
        lines.append(f"  - {{name: gpu-{i}, addresses: [10.30.0.{i}], group: gpu, rack: r{(i - 1) // 4 + 1}, switch: {switch}, capacity: 25G}}")
    lines.append("jobs:")
    for j, name in enumerate(JOBS):
        nodes = ", ".join(f"gpu-{j * NODES_PER_JOB + k + 1}" for k in range(NODES_PER_JOB))
        lines.append(f"  - {{name: {name}, nodes: [{nodes}]}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _shift(batch: np.ndarray, by: int) -> np.ndarray:
    """The same traffic between the next job's nodes (10.30.0.x -> 10.30.0.(x+by))."""
    out = batch.copy()
    for col in ("src_addr", "dst_addr"):
        v4 = out[col][:, 12:].copy().view(">u4").ravel() + np.uint32(by)
        out[col] = v4_column_to_addr16(v4.astype(np.uint32))
    return out


# Job B's unregistered host. Shifted like its peers it would be 10.30.0.107, whose shard (by source) is
# job A's: that shard would then get input from both raw partitions, and a worker preparing one of them
# ahead of the other (a minute produced at once) would push the shard's clock past job A's burst.
# 10.30.0.108 shards with job B (checked in the test), so each shard is fed by one raw partition.
UNREGISTERED_B = 0x0A1E006C


def _move_host(batch: np.ndarray, old: int, new: int) -> np.ndarray:
    for col in ("src_addr", "dst_addr"):
        v4 = batch[col][:, 12:].copy().view(">u4").ravel()
        if (v4 == old).any():
            v4[v4 == old] = new
            batch[col] = v4_column_to_addr16(v4.astype(np.uint32))
    return batch


def two_job_batches() -> list[tuple[str, np.ndarray]]:
    """(exporter, batch) in time order: job A from tor-1/2 (synth), job B (straggler and incast too) from tor-3/4."""
    a = training_batches(seed=3)
    b = training_batches(seed=4, straggler=6, incast_at_s=20)
    renamed = {"10.0.0.1": "10.0.0.3", "10.0.0.2": "10.0.0.4"}
    out = []
    for (ea, ba), (eb, bb) in zip(a, b):
        out.append((ea, ba))
        out.append((renamed[eb], _move_host(_shift(bb, NODES_PER_JOB), UNREGISTERED + NODES_PER_JOB, UNREGISTERED_B)))
    return out


def shards_fed_by(settings, inventory: Path, batches) -> dict[int, set[int]]:
    """Shuffle shard -> raw partitions whose records reach it."""
    core = ProcessorCore(read_inventory(inventory), engine_config(settings.processors))
    fed: dict[int, set[int]] = {}
    for exp, b in batches:
        e = core.enrich(b)
        for p in np.unique(shard_of(e, settings.kafka.partitions, by_src=core.unregistered_sources(e))):
            fed.setdefault(int(p), set()).add(RAW_PARTITION[exp])
    return fed


def expected_outputs(settings, inventory: Path, batches) -> set[tuple]:
    """Distinct (topic, key, canonical value) the pure core gives, sharded like the workers."""
    inv = read_inventory(inventory)
    cfg = engine_config(settings.processors)
    prep = ProcessorCore(inv, cfg)
    cores: dict[int, ProcessorCore] = {}
    outs = []
    def core_of(p: int) -> ProcessorCore:
        if p not in cores:
            cores[p] = ProcessorCore(inv, cfg)
            cores[p].engine.shard = p  # matrix keys name their shard, as a worker's do
        return cores[p]

    for _exp, b in batches:
        e = prep.enrich(b)
        shards = shard_of(e, settings.kafka.partitions, by_src=prep.unregistered_sources(e))
        for p in np.unique(shards):
            outs += core_of(int(p)).process_enriched(e[shards == p])
    for core in cores.values():
        outs += core.flush()
    t = settings.kafka.topics
    return {
        expected_output(getattr(t, KIND_TOPIC[kind]), kind, key, value) for kind, key, value in outs
    }


# Raw partition per exporter: each job's two ToRs on one partition, so both prepare agents work and the
# input of a job reaches its shard in time order. (Spreading one job's exporters over partitions that
# different workers read lets one worker run ahead by more than the incast lateness, 2 s, when a whole
# minute is produced at once; the late half of a burst is then dropped, as it would be live.)
RAW_PARTITION = {"10.0.0.1": 0, "10.0.0.2": 0, "10.0.0.3": 1, "10.0.0.4": 1}


def produce_placed(bootstrap: str, topic: str, batches) -> None:
    from confluent_kafka import Producer

    from schemas import codec

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for exp, arr in batches:
        p.produce(topic, key=exp.encode(), value=codec.encode_batch("flow_batch", arr), partition=RAW_PARTITION[exp])
    assert p.flush(30) == 0


_ASSIGNED = re.compile(r"Setting newly assigned partitions(.*?)for group", re.S)


def _parts(text: str) -> set[int]:
    out: set[int] = set()
    for piece in text.strip().strip("{}").split(","):
        piece = piece.strip()
        if not piece:
            continue
        lo, _, hi = piece.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def last_assignment(log: str, topic: str) -> set[int] | None:
    """Partitions of ``topic`` in the worker's latest assignment table (None: no assignment logged yet)."""
    tables = _ASSIGNED.findall(log)
    if not tables:
        return None
    for line in tables[-1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] == topic:
            return _parts(cells[1])
    return set()


def wait_for_split(logs: list[Path], topic: str, partitions: int, procs, timeout_s: float = 60.0) -> list[set[int]]:
    """Until every worker is ready and their latest assignments of ``topic`` are disjoint, non-empty and complete."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, "a worker exited during start-up"
        texts = [lg.read_text(errors="replace") if lg.exists() else "" for lg in logs]
        if all("Worker ready" in t for t in texts):
            sets = [last_assignment(t, topic) for t in texts]
            if all(sets) and set().union(*sets) == set(range(partitions)) and sum(len(s) for s in sets) == partitions:
                # The settled generation must also be the ready one: last table before the last "Worker ready".
                if all(t.rfind("Worker ready") > t.rfind("Setting newly assigned partitions") for t in texts):
                    return sets
        time.sleep(0.5)
    tails = "\n---\n".join(lg.read_text(errors="replace")[-2000:] for lg in logs if lg.exists())
    raise AssertionError(f"workers did not split {topic} within {timeout_s:.0f}s:\n{tails}")


def test_two_workers_split_partitions_and_match_pure_core(kafka_bootstrap, unique_topic, tmp_path):
    inventory = write_inventory(tmp_path / "inventory.yaml")
    common = {
        "app_id": "ff-" + unique_topic.strip("."),
        "inventory": str(inventory),
        "web_port": 0,
        "metrics_port": 0,
        "tick_s": 0.5,
        "idle_close_s": 4,
    }
    workers = []
    for name in ("w1", "w2"):
        s = settings_for(kafka_bootstrap, unique_topic, processors={**common, "datadir": str(tmp_path / f"{name}-faust")})
        workers.append((s, write_config(tmp_path / f"{name}.yaml", s)))
    s = workers[0][0]
    parts = s.kafka.partitions
    assert parts == 2 and len({zlib.crc32(j.encode()) % parts for j in JOBS}) == parts  # one job per shuffle partition
    create_topics(s)
    batches = two_job_batches()
    # Each shard's input comes from one raw partition, in time order (see RAW_PARTITION, UNREGISTERED_B).
    assert shards_fed_by(s, inventory, batches) == {0: {1}, 1: {0}}
    expected = expected_outputs(s, inventory, batches)
    topics = {t for t, _k, _v in expected}
    assert {s.kafka.topics.incast, s.kafka.topics.straggler, s.kafka.topics.matrix} <= topics
    incast_keys = {k for t, k, _v in expected if t == s.kafka.topics.incast}
    assert len(incast_keys) == 2  # one burst per job

    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    procs = []
    try:
        for (_s, cfg), log in zip(workers, logs):
            procs.append(start_worker(cfg, log))
        split = wait_for_split(logs, s.kafka.topics.shuffle, parts, procs)
        assert all(len(x) == 1 for x in split)
        produce_placed(kafka_bootstrap, s.kafka.topics.flows_raw, batches)
        got = collect(s, sorted(expected), timeout_s=60)
        alive = [p.poll() is None for p in procs]
    finally:
        for p in procs:
            stop_worker(p)
    texts = [lg.read_text(errors="replace") for lg in logs]
    assert all(alive), "\n---\n".join(t[-2000:] for t in texts)
    # Nobody left the group while the input was processed: the split seen before producing still holds.
    assert [last_assignment(t, s.kafka.topics.shuffle) for t in texts] == split, "\n---\n".join(t[-2000:] for t in texts)
    # Alerts compare by identity (their evidence totals depend on batching), everything else exactly.
    alerts = s.kafka.topics.alerts
    assert set(comparable(got, alerts)) == set(comparable(expected, alerts)), "\n---\n".join(t[-2000:] for t in texts)
