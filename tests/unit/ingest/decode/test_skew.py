"""ClockSkewTracker: receive minus export time per exporter (EWMA and last)."""

from __future__ import annotations

import pytest

from ingest.decode.result import ExportHeader
from ingest.decode.skew import ClockSkewTracker


def H(exporter, export_ms, proto="netflow9"):
    return ExportHeader(proto, exporter, 0, 1, 1, export_ms, 1000)


def test_headers_without_export_time_are_ignored():
    tr = ClockSkewTracker()
    assert tr.observe(ExportHeader("sflow5", "a", 0, 1, 1, None, 5), 10_000) is None
    assert tr.skew_ms("a") is None and tr.samples("a") == 0


def test_first_value_then_ewma():
    tr = ClockSkewTracker(alpha=0.5)
    assert tr.observe(H("a", 1000), 1500) == 500.0
    assert tr.observe(H("a", 2000), 2100) == pytest.approx(300.0)  # 500 + 0.5 * (100 - 500)
    assert tr.skew_ms("a") == pytest.approx(300.0)
    assert tr.last_ms("a") == 100.0
    assert tr.samples("a") == 2


def test_negative_skew_exporter_ahead_and_per_exporter():
    tr = ClockSkewTracker(alpha=1.0)
    tr.observe(H("a", 10_000), 7_000)
    tr.observe(H("b", 10_000), 10_250)
    assert tr.skew_ms("a") == -3000.0
    assert tr.skew_ms("b") == 250.0
    assert tr.exporters() == {"a": -3000.0, "b": 250.0}


def test_converges_to_constant_offset():
    tr = ClockSkewTracker(alpha=0.2)
    tr.observe(H("a", 0), 10_000)
    for i in range(1, 200):
        tr.observe(H("a", i * 1000), i * 1000 + 40)
    assert tr.skew_ms("a") == pytest.approx(40.0, abs=0.01)


def test_bounds_and_validation():
    with pytest.raises(ValueError):
        ClockSkewTracker(alpha=0)
    tr = ClockSkewTracker(max_exporters=2)
    for e in "abc":
        tr.observe(H(e, 0), 1)
    assert len(tr.exporters()) == 2 and tr.skew_ms("c") == 1.0
