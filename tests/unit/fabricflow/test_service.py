"""The shared service lifecycle: stop order, health flag, /metrics and /healthz, signals."""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from fabricflow.service import Service
from tests.support.clock import FakeClock




def test_stop_runs_callbacks_newest_first_and_survives_a_failing_one(caplog):
    svc = Service("t")
    order = []
    svc.on_stop(lambda: order.append("http"), "http")
    svc.on_stop(lambda: 1 / 0, "broken")
    svc.on_stop(lambda: order.append("consumer"), "consumer")
    svc.stop()
    assert order == ["consumer", "http"]
    assert svc.stopping
    assert "stopping broken failed" in caplog.text
    svc.stop()  # twice is harmless: nothing left to stop
    assert order == ["consumer", "http"]


def test_a_stalled_loop_clears_the_health_flag_and_a_beat_restores_it():
    clock = FakeClock(1000.0)
    svc = Service("loop", stall_s=10, clock=clock)
    assert svc.health() == (True, "")
    clock.t += 11
    ok, why = svc.health()
    assert not ok and why == "loop loop stalled for 11 s"
    svc.beat()
    assert svc.healthy()


def test_checks_report_their_reason():
    svc = Service("t")
    state = {"v": True}
    svc.add_check("kafka", lambda: state["v"])
    assert svc.healthy()
    state["v"] = "producer failed fatally"
    assert svc.health() == (False, "kafka: producer failed fatally")
    state["v"] = False
    assert svc.health() == (False, "kafka")


def test_http_serves_metrics_and_health_on_a_free_port_and_stops():
    reg = CollectorRegistry()
    Counter("fabricflow_test_things_total", "things", registry=reg).inc(3)
    clock = FakeClock(1000.0)
    svc = Service("t", reg, stall_s=5, clock=clock)
    assert svc.serve_http("127.0.0.1", None, required=True)
    base = f"http://127.0.0.1:{svc.http.server_port}"
    try:
        assert b"fabricflow_test_things_total 3.0" in urllib.request.urlopen(base + "/metrics", timeout=5).read()
        assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"
        clock.t += 6
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/healthz", timeout=5)
        assert e.value.code == 503 and b"t loop stalled" in e.value.read()
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(base + "/other", timeout=5)
    finally:
        svc.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "/healthz", timeout=2)


def test_http_with_a_custom_scrape_and_a_taken_port():
    calls = []
    svc = Service("t")
    svc.serve_http("127.0.0.1", None, scrape=lambda: calls.append(1) or b"x 1\n", required=True)
    port = svc.http.server_port
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read() == b"x 1\n"
        assert calls == [1]
        other = Service("second")
        assert other.serve_http("127.0.0.1", port) is False  # logged, the service runs without /metrics
        with pytest.raises(OSError):
            other.serve_http("127.0.0.1", port, required=True)
        assert other.serve_http("127.0.0.1", 0) is False  # 0 = off
    finally:
        svc.stop()


def test_signals_request_a_stop_and_restore_the_previous_handlers():
    svc = Service("t")
    before = signal.getsignal(signal.SIGTERM)
    with svc.signals():
        os.kill(os.getpid(), signal.SIGTERM)
        assert svc.wait(2)
    assert svc.stopping
    assert signal.getsignal(signal.SIGTERM) is before


def test_ensure_topics_not_required_logs_instead_of_raising(caplog, monkeypatch):
    from fabricflow.settings import load_settings

    s = load_settings(None, kafka={"bootstrap_servers": "127.0.0.1:1"})
    svc = Service("t")
    import fabricflow.kafka as kafka

    def boom(_kafka):
        raise RuntimeError("no broker")

    monkeypatch.setattr(kafka, "ensure_topics", boom)
    svc.ensure_topics(s.kafka, required=False)
    assert "t: cannot ensure topics exist: no broker" in caplog.text
    with pytest.raises(RuntimeError):
        svc.ensure_topics(s.kafka)


def test_readyz_answers_503_until_the_service_is_ready_then_follows_health(caplog):
    clock = FakeClock(1000.0)
    svc = Service("t", stall_s=5, clock=clock)
    assert svc.serve_http("127.0.0.1", None, required=True)
    base = f"http://127.0.0.1:{svc.http.server_port}"
    try:
        svc.not_ready_reason = "joining the consumer group"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert e.value.code == 503 and e.value.read() == b"not ready: joining the consumer group\n"
        assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"  # alive while starting
        with caplog.at_level("INFO", logger="fabricflow.service"):
            assert svc.mark_ready("consuming 4 partitions") and not svc.mark_ready("again")
        lines = [r.getMessage() for r in caplog.records if " ready in " in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith("t ready in ") and lines[0].endswith(" s: consuming 4 partitions")
        assert urllib.request.urlopen(base + "/readyz", timeout=5).read() == b"ready\n"
        clock.t += 6  # a stalled loop is not ready either
        with pytest.raises(urllib.error.HTTPError, match="503"):
            urllib.request.urlopen(base + "/readyz", timeout=5)
    finally:
        svc.stop()


def test_process_age_counts_from_the_process_start():
    import subprocess
    import sys

    code = "import time; time.sleep(0.5); from fabricflow.logs import process_age_s; print(process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= age < 30  # the sleep before the import counts: it is measured from exec, not from the import
