"""Helpers for integration tests: per-test topics, consuming everything with a deadline."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from confluent_kafka import Consumer

from devtools.stack import read_from_start
from fabricflow.settings import load_settings
from fabricflow.kafka import ensure_topics
from schemas import codec


def settings_for(bootstrap: str, prefix: str, **sections):
    topics = {
        k: prefix + v
        for k, v in load_settings().kafka.topics.model_dump().items()
        if k != "replay_prefix"
    }
    kafka = {"bootstrap_servers": bootstrap, "partitions": 2, "topics": topics}
    return load_settings(None, kafka=kafka, **sections)


def create_topics(settings):
    return ensure_topics(settings.kafka)


def consume(bootstrap: str, topic: str, until=None, timeout_s: float = 30.0, idle_s: float = 3.0):
    """Read a topic from the beginning until ``until(messages)`` is true, or no message for ``idle_s``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "itest-" + uuid.uuid4().hex[:8],
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    read_from_start(c, topic)
    out = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is None or m.error():
                if out and time.monotonic() - last > idle_s and until is None:
                    break
                continue
            out.append(m)
            last = time.monotonic()
            if until is not None and until(out):
                break
    finally:
        c.close()
    return out


def batch_rows(messages) -> np.ndarray:
    arrs = [codec.decode_batch(m.value()) for m in messages]
    return np.concatenate(arrs) if arrs else np.zeros(0)


def count_records(messages) -> int:
    return sum(len(codec.decode_batch(m.value())) for m in messages)


def write_config(path, settings) -> str:
    """YAML config file reproducing ``settings`` (for services started as subprocesses)."""
    import yaml

    data = settings.model_dump(mode="json", exclude={"stack"}, exclude_none=True)
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    return str(path)


def produce_batches(bootstrap: str, topic: str, batches, schema: str = "flow_batch") -> int:
    """Produce (key, structured array) pairs as batch messages with Faust-compatible key placement."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    n = 0
    for key, arr in batches:
        p.produce(topic, key=key.encode(), value=codec.encode_batch(schema, arr))
        n += len(arr)
    assert p.flush(30) == 0
    return n


def decode_outputs(messages) -> list[tuple]:
    """(topic-kind, key, canonical value) for output messages (Avro records, matrix.windows.v2 windows or JSON)."""
    from tests.support.matrix import message_json

    return [(m.topic(), m.key().decode(), message_json(m.value())) for m in messages]


@contextmanager
def s3_engine_broker(state_dir, slot: int) -> Iterator:
    """A broker of the test's own on Tansu's persistent s3 engine (its data survives a restart), stopped after.

    ``slot`` (1, 2, ...) places its ports beside the suite's stack (FABRICFLOW_TEST_KAFKA_PORT + 100 * slot,
    the S3 ports + 200 * slot), so runs with other port blocks do not collide. Fails the test when it cannot
    start and FABRICFLOW_REQUIRE_BROKER=1 (the suite), skips it otherwise."""
    from devtools.stack import EmbeddedStack, StackError

    kafka = int(os.environ.get("FABRICFLOW_TEST_KAFKA_PORT", "29092")) + 100 * slot
    s3 = int(os.environ.get("FABRICFLOW_TEST_S3_PORT", "28333")) + 200 * slot
    s3_base = int(os.environ.get("FABRICFLOW_TEST_S3_BASE_PORT", "28400")) + 200 * slot
    st = EmbeddedStack(load_settings(None, stack={"state_dir": str(state_dir), "kafka_port": kafka, "s3_port": s3,
                                                  "s3_base_port": s3_base, "storage_engine": "s3"}))
    try:
        st.up()
    except StackError as e:
        st.down()
        if os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))
    try:
        yield st
    finally:
        st.down()
