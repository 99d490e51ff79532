"""Metrics service wiring without a broker: message handling, lookback filter, HTTP endpoints, CLI registration."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fabricflow.settings import load_settings
from processors.logic.enrich.inventory import Inventory
from sinks.metrics.service import MetricsService
from tests.support.fake_kafka import FakeMessage
from tests.support.matrix import window_message

NOW_S = 1_800_000_000.0
Msg = FakeMessage


def cell(b: int, shard: int = 0) -> bytes:
    """A matrix.windows.v2 message of one group cell."""
    return window_message([{
        "window_start_ms": 0, "window_end_ms": 10_000, "level": "group", "src": "gpu", "dst": "gpu",
        "category": "collective", "bytes_est": b, "packets_est": 1, "flow_records": 1, "samples": 1}], shard)


def svc(**metrics) -> MetricsService:
    s = load_settings(None, metrics={"start_lookback_s": 60, **metrics})
    return MetricsService(s, inventory=Inventory.empty(), port=0, clock=lambda: NOW_S)


def test_handle_applies_in_order_and_skips_old_messages_of_fresh_partitions():
    m = svc()
    topic = m.settings.kafka.topics.matrix
    m._fresh.add((topic, 0))  # no committed offset at assignment
    old, new = int((NOW_S - 120) * 1000), int((NOW_S - 10) * 1000)
    m.handle([Msg(topic, 0, 5, cell(1), old), Msg(topic, 0, 6, cell(10), new), Msg(topic, 1, 3, cell(100), old),
              Msg(topic, 1, 4, b"junk", new), Msg("other.topic", 0, 9, cell(1000), new)])
    assert m.applied == {(topic, 0): 7, (topic, 1): 5}  # skipped and undecodable messages are passed too
    st = m.state
    assert st.g2g_bytes.values == {("gpu", "gpu", "collective"): 110}  # partition 1 resumed: not filtered
    assert st.skipped.values == {(topic, "before_lookback"): 1}
    assert st.undecodable.values == {(topic, "not_avro"): 1}
    assert st.messages.values == {(topic,): 4}


def test_a_cell_produced_again_after_a_processor_crash_is_counted_once():
    """Processor outputs are at-least-once with deterministic keys: the same key and window again is a duplicate;
    the same cell from another shard (another key) adds up."""
    m = svc()
    topic = m.settings.kafka.topics.matrix
    k0, k1 = b"0|group|0", b"0|group|1"
    m.handle([Msg(topic, 0, 1, cell(10), key=k0), Msg(topic, 1, 1, cell(5, shard=1), key=k1)])
    m.handle([Msg(topic, 0, 2, cell(10), key=k0)])  # re-emitted after the crash
    assert m.state.g2g_bytes.values == {("gpu", "gpu", "collective"): 15}
    assert m.state.skipped.values == {(topic, "duplicate"): 1}


def test_http_endpoints_and_scrape_without_consumer():
    import urllib.error
    import urllib.request

    m = svc()
    m.port = 0  # a free port
    m.handle([Msg(m.settings.kafka.topics.matrix, 0, 0, cell(7))])
    m._start_http()
    try:
        base = f"http://127.0.0.1:{m.port}"
        body = urllib.request.urlopen(base + "/metrics", timeout=10).read()
        assert b'group_to_group_flow_traffic_bytes_total{' in body
        assert b"} 0.0" in body  # born at zero
        body = urllib.request.urlopen(base + "/metrics", timeout=10).read()
        assert b'app_category="collective",dst_group="gpu",src_group="gpu"} 7.0' in body
        assert urllib.request.urlopen(base + "/healthz", timeout=10).read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(base + "/nope", timeout=10)
    finally:
        m.service.stop()


def test_cli_has_sink_metrics():
    from cli.main import app

    res = CliRunner().invoke(app, ["sink", "metrics", "--help"])
    assert res.exit_code == 0 and "--series-budget" in res.output
