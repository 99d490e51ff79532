"""Data quality per exporter and window (ingest.quality.v1): loss, records without a rate, clock skew."""

import pytest

from fabricflow.settings import load_settings
from ingest.metrics import IngestMetrics
from ingest.pipeline import IngestPipeline
from ingest.quality import QualityWindows
from tests.support.ingest_sinks import payloads
from tests.support.ingest_sinks import QualitySink


def test_windows_loss_in_datagram_units_becomes_records_and_a_ratio():
    q = QualityWindows(60_000, worker=2)
    for i in range(8):  # sFlow: sequence counts datagrams; 8 received with 10 records each, 2 lost
        q.observe("10.0.0.1", "sflow5", 60_000 + i, records=10, lost=2 if i == 3 else 0)
    q.observe("10.0.0.2", "ipfix", 61_000, records=50, lost=50, missing_rate=5, skew_ms=1500.0)
    q.observe("10.0.0.2", "ipfix", 61_500, records=50, skew_ms=-3000.0)
    assert q.due(119_999) == []  # window [60000, 120000) still open
    sflow, ipfix = q.due(120_000)
    assert (sflow["sequence_unit"], sflow["sequence_received"], sflow["sequence_lost"]) == ("datagrams", 8, 2)
    assert sflow["loss_ratio"] == pytest.approx(0.2) and sflow["records_lost_est"] == 20 and sflow["ingest_worker"] == 2
    assert sflow["clock_skew_ms"] is None  # sFlow carries no export time
    assert (ipfix["sequence_unit"], ipfix["loss_ratio"], ipfix["records_lost_est"]) == ("records", pytest.approx(50 / 150), 50)
    assert ipfix["records_without_rate"] == 5
    assert ipfix["clock_skew_ms"] == pytest.approx(-750.0) and ipfix["clock_skew_max_ms"] == -3000.0
    assert q.due(10**12) == []


def test_pipeline_publishes_a_window_per_exporter_with_the_gap(monkeypatch):
    s = load_settings(None, ingest={"quality_window_s": 60})
    sink = QualitySink()
    p = IngestPipeline(s.ingest, sink, IngestMetrics())
    datagrams = payloads("softflowd_v9.pcap")
    kept = datagrams[:4] + datagrams[5:]  # one export packet lost on the way
    for d in kept:
        p.handle(d, "192.0.2.7", 1_700_000_010_000)
    p.close()  # the open window goes out at shutdown
    assert [e for e, _r in sink.quality] == ["192.0.2.7"]
    r = sink.quality[0][1]
    assert (r["protocol"], r["datagrams"], r["sequence_unit"], r["sequence_lost"]) == ("netflow9", 9, "datagrams", 1)
    assert r["records"] == sum(len(a) for _e, a in sink.flows) and r["records_lost_est"] > 0
    assert r["loss_ratio"] == pytest.approx(0.1)
    assert r["window_start_ms"] == 1_699_999_980_000 and r["clock_skew_ms"] is not None


def test_quality_off():
    s = load_settings(None, ingest={"quality_window_s": 0})
    sink = QualitySink()
    p = IngestPipeline(s.ingest, sink, IngestMetrics())
    for d in payloads("softflowd_v9.pcap"):
        p.handle(d, "192.0.2.7", 1_700_000_010_000)
    p.close()
    assert sink.quality == []
