"""Services check their files before connecting (exit 2, one line) and wait for the broker (exit 1, no traceback)."""

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fabricflow.readiness import Unreachable, kafka_addresses, object_store_address, wait_for_kafka, wait_until
from fabricflow.settings import load_settings
from tests.support.clock import FakeClock

REPO = Path(__file__).resolve().parents[3]
FABRICFLOW = str(Path(sys.executable).parent / "fabricflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def test_wait_until_backs_off_logs_one_line_per_attempt_and_gives_up(caplog):
    clock = FakeClock()
    with caplog.at_level(logging.WARNING), pytest.raises(Unreachable) as e:
        wait_until("Kafka", "k:9092", lambda: "connection refused", 20, logging.getLogger("t"), hint="see kafka.wait_timeout_s",
                   sleep=clock.sleep, clock=clock)
    assert clock.sleeps == [0.5, 1, 2, 4, 8, 4.5]  # doubling, capped by what is left of the timeout
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 6 and all(m.startswith("waiting for Kafka at k:9092 (connection refused); attempt ") for m in lines)
    msg = str(e.value)
    assert "\n" not in msg and "Kafka at k:9092 not reachable after 7 attempt(s)" in msg and "kafka.wait_timeout_s" in msg


def test_wait_until_returns_once_ready_and_takes_exceptions_as_reasons(caplog):
    clock = FakeClock()
    answers = iter([RuntimeError("boom\nsecond line"), "not yet", None])

    def probe():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    with caplog.at_level(logging.INFO):
        assert wait_until("S3", "s3:9000", probe, 60, logging.getLogger("t"), sleep=clock.sleep, clock=clock) == 3
    assert "(RuntimeError: boom)" in caplog.records[0].getMessage()
    assert "reachable (after 3 attempts" in caplog.records[-1].getMessage()


def test_zero_timeout_tries_once():
    clock = FakeClock()
    with pytest.raises(Unreachable, match="after 1 attempt"):
        wait_until("Kafka", "k", lambda: "down", 0, logging.getLogger("t"), sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


def test_addresses_from_settings():
    s = load_settings(None, kafka={"bootstrap_servers": "a:9093, [fd00::1]:9094,b"},
                      archive={"url": "s3://bucket/p", "s3_endpoint": "http://minio:9000"})
    assert kafka_addresses(s.kafka) == [("a", 9093), ("fd00::1", 9094), ("b", 9092)]
    assert object_store_address(s.archive) == ("minio", 9000)
    assert object_store_address(load_settings(None).archive) is None  # file:// archive: nothing to wait for


def test_wait_for_kafka_on_a_closed_port_is_quiet(capfd, caplog):
    port = _free_port()
    s = load_settings(None, kafka={"bootstrap_servers": f"127.0.0.1:{port}"})
    with caplog.at_level(logging.WARNING), pytest.raises(Unreachable, match=f"127.0.0.1:{port}"):
        wait_for_kafka(s.kafka, timeout_s=1.2, log=logging.getLogger("t"))
    out, err = capfd.readouterr()
    assert "rdkafka" not in out + err and "FAIL" not in out + err
    assert all("waiting for Kafka at" in r.getMessage() for r in caplog.records)


def test_wait_for_kafka_reports_a_non_kafka_listener_as_the_reason(caplog):
    """Something accepts TCP but does not speak Kafka: the metadata request fails, reported in the line."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    try:
        s = load_settings(None, kafka={"bootstrap_servers": f"127.0.0.1:{srv.getsockname()[1]}"})
        with caplog.at_level(logging.WARNING), pytest.raises(Unreachable, match="metadata request failed"):
            wait_for_kafka(s.kafka, timeout_s=0, log=logging.getLogger("t"))
    finally:
        srv.close()


def _run(args, env_extra, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    env.update(env_extra)
    return subprocess.run([FABRICFLOW, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


@pytest.fixture
def closed_port_env(tmp_path):
    return {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{_free_port()}", "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "1.5",
            "FABRICFLOW_PROCESSORS__DATADIR": str(tmp_path / "faust"), "FABRICFLOW_PROCESSORS__METRICS_PORT": "0",
            "FABRICFLOW_PROCESSORS__WEB_PORT": "0", "FABRICFLOW_INGEST__METRICS_PORT": "0",
            "FABRICFLOW_ARCHIVE__URL": f"file://{tmp_path / 'archive'}", "FABRICFLOW_ARCHIVE__METRICS_PORT": "0"}


def test_process_with_a_bad_policy_exits_2_before_connecting(tmp_path, closed_port_env):
    bad = tmp_path / "policy.yaml"
    bad.write_text("window: 60s\nexfiltration:\n  min_bytes: lots\n")
    r = _run(["process", "--inventory", "deploy/fabricflow/inventory.yaml", "--policy", str(bad)], closed_port_env)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "line 3 (exfiltration.min_bytes)" in lines[0], r.stderr
    assert "waiting for Kafka" not in r.stderr


@pytest.mark.parametrize("command", [["process"], ["ingest", "--listen", "sflow://127.0.0.1:0"], ["sink", "archive"]])
def test_services_wait_for_kafka_then_exit_1_without_traceback(command, closed_port_env):
    r = _run(command, closed_port_env)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "rdkafka" not in r.stderr and "FAIL|" not in r.stderr, r.stderr
    waiting = [ln for ln in r.stderr.splitlines() if "waiting for Kafka at 127.0.0.1:" in ln]
    assert waiting and "not reachable after" in r.stderr.strip().splitlines()[-1]


def test_ingest_with_a_missing_ca_file_exits_2(closed_port_env):
    r = _run(["ingest", "--listen", "sflow://127.0.0.1:0"],
             {**closed_port_env, "FABRICFLOW_KAFKA__SECURITY_PROTOCOL": "SSL", "FABRICFLOW_KAFKA__SSL_CA_FILE": "/nonexistent/ca.pem"})
    assert r.returncode == 2 and "kafka.ssl_ca_file: /nonexistent/ca.pem: no such file" in r.stderr, r.stderr
