"""sinks/metrics/state.py, change markers: a counter per job and scope and the time of the latest change (what the
Grafana annotation draws), each change counted once."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from schemas import codec
from schemas.marks import change_record
from sinks.metrics.state import MetricsState

T = 1_764_600_000_000


def _scrape(st: MetricsState) -> str:
    """The second scrape: a counter born since the previous scrape shows 0 first (docs/metrics.md)."""
    reg = CollectorRegistry()
    reg.register(type("C", (), {"collect": lambda self: st.collect(1.0)})())
    generate_latest(reg)
    st.scraped()
    return generate_latest(reg).decode()


def test_changes_are_counted_once_and_the_latest_time_is_a_gauge():
    st = MetricsState()
    a = change_record("raised NCCL_IB_TIMEOUT", T, T, "cli", job="train-a")
    b = change_record("new ECN threshold", T + 60_000, T, "http", job="train-a")
    c = change_record("firmware", T + 5_000, T, "cli", switch="tor1", if_index=3)
    vals = [codec.encode_record("change_mark", r) for r in (a, b, a, c)]  # a re-delivered once
    assert st.add_values("changes", vals, 1.0) == 3
    text = _scrape(st)
    assert 'change_markers_total{job="train-a",scope="job"} 2.0' in text
    assert 'change_markers_total{job="",scope="link"} 1.0' in text
    line = next(x for x in text.splitlines() if x.startswith('change_marker_timestamp_seconds{job="train-a"'))
    assert float(line.split()[-1]) == (T + 60_000) / 1000
    assert 'fabricflow_metrics_skipped_records_total{reason="duplicate",topic="changes"} 1.0' in text


def test_a_bad_change_message_is_counted_not_fatal():
    st = MetricsState()
    assert st.add_values("changes", [b"junk", None], 1.0) == 0
    assert "fabricflow_metrics_undecodable_messages_total" in _scrape(st)
