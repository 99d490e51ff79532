"""Ingest without Kafka or UDP: listen URLs, allowlist, batching, DLQ sampling, metric values."""

import pytest
from prometheus_client import generate_latest

from fabricflow.settings import load_settings
from ingest.listener import ListenError, parse_listen
from ingest.metrics import IngestMetrics
from ingest.pipeline import Allowlist, IngestPipeline
from tests.support.ingest_sinks import FakeSink, payloads


def _metric(m: IngestMetrics, name: str, **labels) -> float:
    v = m.registry.get_sample_value(name, labels)
    return v or 0.0


@pytest.mark.parametrize(
    "url,scheme,host,port",
    [
        ("sflow://0.0.0.0:6343", "sflow", "0.0.0.0", 6343),
        ("netflow://[::]:2055", "netflow", "::", 2055),
        ("ipfix://127.0.0.1", "ipfix", "127.0.0.1", 4739),
        ("netflow://127.0.0.1:0", "netflow", "127.0.0.1", 0),
    ],
)
def test_parse_listen(url, scheme, host, port):
    s = parse_listen(url)
    assert (s.scheme, s.host, s.port) == (scheme, host, port)


@pytest.mark.parametrize("url", ["http://0.0.0.0:1", "sflow://h:notaport", "netflow://h:1/path"])
def test_parse_listen_rejects(url):
    with pytest.raises(ListenError, match="listen URL"):
        parse_listen(url)


def test_allowlist():
    a = Allowlist(["10.0.0.0/8", "2001:db8::/32"])
    assert a.allows("10.1.2.3") and a.allows("::ffff:10.1.2.3") and a.allows("2001:db8::1")
    assert not a.allows("192.0.2.1") and not a.allows("2001:db9::1")
    assert Allowlist([]).allows("192.0.2.1")
    with pytest.raises(ValueError, match="ingest.allowlist"):
        Allowlist(["10.0.0.0/33"])


def _pipeline(**ingest):
    s = load_settings(None, ingest=ingest)
    sink, m = FakeSink(), IngestMetrics()
    return IngestPipeline(s.ingest, sink, m), sink, m


def test_netflow_v9_capture_batched_per_exporter():
    p, sink, m = _pipeline(batch_max_records=100)
    for d in payloads("softflowd_v9.pcap"):
        p.handle(d, "192.0.2.7", 1_700_000_000_000)
    p.flush()
    sizes = [len(a) for _e, a in sink.flows]
    assert sum(sizes) == 230 and max(sizes) <= 100
    assert {e for e, _a in sink.flows} == {"192.0.2.7"}
    assert _metric(m, "fabricflow_ingest_records_total", exporter="192.0.2.7", protocol="netflow9", kind="flow") == 230
    assert _metric(m, "fabricflow_ingest_datagrams_total", exporter="192.0.2.7", protocol="netflow9") == 10
    assert _metric(m, "fabricflow_ingest_templates") == 5
    assert _metric(m, "fabricflow_ingest_sequence_lost_total", exporter="192.0.2.7", protocol="netflow9") == 0


def test_sflow_counters_and_sequence_loss():
    p, sink, m = _pipeline()
    data = payloads("pmacct_sfprobe_rate8.pcap")
    for i, d in enumerate(data):
        if i in (10, 11, 12):  # three datagrams lost in transit
            continue
        p.handle(d, "127.0.0.1", 1_700_000_000_000 + i)
    p.flush()
    assert sum(len(a) for _e, a in sink.counters) == 3
    assert _metric(m, "fabricflow_ingest_sequence_lost_total", exporter="127.0.0.1", protocol="sflow5") == 3


def test_garbage_counted_and_sampled_to_dlq():
    p, sink, m = _pipeline(dlq_max_per_s=2.0)
    good = payloads("softflowd_ipfix.pcap")
    for i in range(50):
        p.handle(b"\x00\x0a\x00\x05garbage" + bytes([i]), "192.0.2.9", 1)
        p.handle(b"\xff" * 30, "192.0.2.9", 1)
    for d in good:
        p.handle(d, "192.0.2.9", 1)
    p.flush()
    assert sum(len(a) for _e, a in sink.flows) == 230  # good data unaffected
    errors = sum(
        s.value for s in m.registry.collect() if s.name == "fabricflow_ingest_decode_errors" for s in s.samples if s.name.endswith("_total")
    )
    assert errors == 100
    assert 1 <= len(sink.dlq) <= 3  # token bucket: capped sample, not all 100
    assert {r for _e, _p, r, _d in sink.dlq} <= {"bad_version", "truncated", "bad_length"}


def test_allowlist_drops_and_counts():
    p, sink, m = _pipeline(allowlist=["10.0.0.0/8"])
    for d in payloads("softflowd_v9.pcap"):
        p.handle(d, "192.0.2.66", 1)
    p.flush()
    assert sink.flows == []
    assert _metric(m, "fabricflow_ingest_not_allowed_datagrams_total", listener="udp") == 10


def test_metrics_exposition_names_follow_style():
    p, sink, m = _pipeline()
    for d in payloads("softflowd_v9.pcap")[:2]:
        p.handle(d, "127.0.0.1", 1)
    p.maybe_flush()  # once per receive-loop pass: per-datagram counts reach Prometheus
    for fam in m.registry.collect():
        assert fam.name.startswith("fabricflow_ingest_"), fam.name
        for sample in fam.samples:
            assert "port" not in sample.labels, (fam.name, sample.labels)
            if fam.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name
    text = generate_latest(m.registry).decode()
    assert 'fabricflow_ingest_datagrams_total{exporter="127.0.0.1",protocol="netflow9"} 2.0' in text


def test_exporter_label_cardinality_is_bounded():
    m = IngestMetrics(max_exporters=3)
    labels = {m.exporter_label(f"10.0.0.{i}") for i in range(10)}
    assert labels == {"10.0.0.0", "10.0.0.1", "10.0.0.2", "other"}


def test_sflow_uptime_clock_keeps_exporter_timeline():
    """In uptime mode an accelerated sFlow stream keeps its own time axis; restarts re-anchor."""
    import numpy as np

    from ingest.decode.result import DecodeResult, ExportHeader
    from ingest.pipeline import SflowUptimeClock
    from schemas.columns import empty_counters, empty_flows

    clock = SflowUptimeClock()

    def res(uptime):
        return DecodeResult(flows=empty_flows(2), counters=empty_counters(1), header=ExportHeader("sflow5", "10.0.0.1", 0, 1, 1, None, uptime))

    r1 = res(5_000)
    clock.apply(r1, received_ms=1_000_000)
    r2 = res(65_000)  # 60 s of agent time ...
    clock.apply(r2, received_ms=1_006_000)  # ... arrived 6 s later (10x replay)
    assert r1.flows["time_end_ms"].tolist() == [1_000_000, 1_000_000]
    assert r2.flows["time_end_ms"].tolist() == [1_060_000, 1_060_000]
    assert r2.counters["time_received_ms"].tolist() == [1_060_000]
    r3 = res(1_000)  # agent rebooted
    clock.apply(r3, received_ms=2_000_000)
    assert np.all(r3.flows["time_start_ms"] == 2_000_000)


def test_sflow_receive_time_is_default():
    p, sink, m = _pipeline()
    assert p.sflow_uptime_clock is None


def test_template_expiry_is_counted_in_metrics():
    p, sink, m = _pipeline(template_expiry_s=60)
    data = payloads("softflowd_v9.pcap")
    p.handle(data[0], "192.0.2.7", 1_700_000_000_000)  # template datagram
    p.handle(data[1], "192.0.2.7", 1_700_000_000_000 + 3_600_000)  # an hour later: template expired
    p.flush()
    assert _metric(m, "fabricflow_ingest_templates_expired_total") >= 1


def test_per_datagram_metrics_are_synced_once_per_loop_pass():
    """Datagram/record/byte counters and the skew gauge are summed and added on maybe_flush/flush."""
    p, sink, m = _pipeline(batch_max_delay_ms=60_000)
    data = payloads("softflowd_v9.pcap")
    for d in data:
        p.handle(d, "192.0.2.7", 1_700_000_000_000)
    assert _metric(m, "fabricflow_ingest_datagrams_total", exporter="192.0.2.7", protocol="netflow9") == 0
    p.maybe_flush()  # delay not reached: nothing published, metrics synced
    assert sink.flows == []
    assert _metric(m, "fabricflow_ingest_datagrams_total", exporter="192.0.2.7", protocol="netflow9") == 10
    assert _metric(m, "fabricflow_ingest_records_total", exporter="192.0.2.7", protocol="netflow9", kind="flow") == 230
    assert _metric(m, "fabricflow_ingest_received_bytes_total", listener="udp") == sum(map(len, data))
    assert m.registry.get_sample_value("fabricflow_ingest_clock_skew_seconds", {"exporter": "192.0.2.7"}) is not None
    p.handle(data[1], "192.0.2.7", 1_700_000_000_000)
    p.flush()
    assert _metric(m, "fabricflow_ingest_datagrams_total", exporter="192.0.2.7", protocol="netflow9") == 11
    published = sum(len(a) for _e, a in sink.flows)
    assert published > 230
    flows = _metric(m, "fabricflow_ingest_records_total", exporter="192.0.2.7", protocol="netflow9", kind="flow")
    assert flows == published


def test_pipeline_batches_match_per_datagram_decode():
    """Published batches = per-datagram decode() rows, in order, cut at batch_max exactly as before."""
    from ingest.decode import TemplateCache, decode
    from ingest.decode.batch import concat_rows

    for name, bmax in (("softflowd_v9.pcap", 50), ("softflowd_ipfix.pcap", 7), ("softflowd_v9.pcap", 4096)):
        p, sink, m = _pipeline(batch_max_records=bmax)
        cache = TemplateCache()
        expected, acc, total = [], [], 0
        for d in payloads(name) * 3:
            p.handle(d, "192.0.2.7", 1_700_000_000_000)
            flows = decode(d, "192.0.2.7", 1_700_000_000_000, cache).flows
            if len(flows):
                acc.append(flows)
                total += len(flows)
                if total >= bmax:  # the pipeline's rule: flush when the exporter's records reach batch_max
                    arr = concat_rows(acc)
                    expected += [arr[i : i + bmax] for i in range(0, len(arr), bmax)]
                    acc, total = [], 0
        p.flush()
        if acc:
            expected.append(concat_rows(acc))
        got = [a for _e, a in sink.flows]
        assert [len(a) for a in got] == [len(a) for a in expected]
        assert all(len(a) <= bmax for a in got)
        assert all(g.tobytes() == e.tobytes() for g, e in zip(got, expected))


def test_tune_allocator_is_safe_to_call():
    from ingest.service import tune_allocator

    assert tune_allocator() in (True, False)
    assert tune_allocator() in (True, False)  # idempotent


def test_skew_gauge_shows_latest_smoothed_skew_across_protocols():
    p, sink, m = _pipeline()
    v9, ipfix = payloads("softflowd_v9.pcap"), payloads("softflowd_ipfix.pcap")
    for i, d in enumerate([v9[0], ipfix[0], v9[1], ipfix[1], v9[2]]):
        p.handle(d, "192.0.2.7", 1_700_000_000_000 + i * 7_919)
    p.maybe_flush()
    gauge = m.registry.get_sample_value("fabricflow_ingest_clock_skew_seconds", {"exporter": "192.0.2.7"})
    assert gauge == p.skew.skew_ms("192.0.2.7") / 1000.0


def test_data_before_its_template_is_counted_per_exporter():
    """The exporter-labelled count FabricExporterTemplatesMissing reads (data sets that came before their template)."""
    p, sink, m = _pipeline()
    data = payloads("softflowd_v9.pcap")
    p.handle(data[1], "192.0.2.8", 1_700_000_000_000)  # data datagram first: its template is unknown
    p.flush()
    assert _metric(m, "fabricflow_ingest_template_missing_sets_total", exporter="192.0.2.8", protocol="netflow9") >= 1
    p.handle(data[0], "192.0.2.9", 1_700_000_000_000)  # another exporter, template first: nothing missing
    p.flush()
    assert _metric(m, "fabricflow_ingest_template_missing_sets_total", exporter="192.0.2.9", protocol="netflow9") == 0


def test_discard_notifications_are_counted_and_published():
    from tests.support.discard_seeds import seeds

    p, sink, m = _pipeline()
    published = []
    sink.publish_discards = lambda exporter, arr: published.append((exporter, arr)) or True
    for data in seeds().values():
        p.handle(data, "10.254.0.3", 1_700_000_000_000)
    p.flush()
    assert sum(len(a) for _e, a in published) == 4
    assert _metric(m, "fabricflow_ingest_records_total", exporter="10.254.0.3", protocol="sflow5", kind="discard") == 4
