"""A processor worker as a subprocess (start, stop) and the outputs it publishes, collected from Kafka and made comparable across runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from fabricflow.streams import OUTPUTS

from tests.integration.kafka_helpers import consume, decode_outputs


KIND_TOPIC = {kind: stream.name for kind, stream in OUTPUTS.items()}  # output kind -> TopicNames attribute

ALERT_IDENTITY = ("dedup_key", "rule", "severity", "state", "first_seen_ms", "entities")


def comparable(outputs, alerts_topic):
    """Alerts' evidence totals depend on how records were batched when they fired (docs/replay.md):
    compare alerts by identity, everything else exactly."""
    out = []
    for topic, key, value in outputs:
        if topic == alerts_topic:
            v = json.loads(value)
            value = json.dumps({k: v[k] for k in ALERT_IDENTITY}, sort_keys=True)
        out.append((topic, key, value))
    return out


def start_worker(cfg_path: str, log_path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "--config", cfg_path, "process"],
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
    alerts = settings.kafka.topics.alerts
    expected = comparable(expected, alerts)
    by_topic: dict[str, set] = {}
    for item in expected:
        by_topic.setdefault(item[0], set()).add(item)
    got = []
    for topic, want in by_topic.items():
        if proc is not None and proc.poll() is not None:
            break  # the worker died: fail fast, the log tells why

        def done(ms, want=want, n=len([e for e in expected if e[0] == topic])):
            return len(ms) >= n and want <= set(comparable(decode_outputs(ms), alerts))

        got += decode_outputs(consume(settings.kafka.bootstrap_servers, topic, until=done, timeout_s=timeout_s))
    return got
