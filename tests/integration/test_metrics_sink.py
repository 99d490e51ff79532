"""Flow-metrics sink on the real local broker: output topics in, /metrics out, restarts without double counting.

The service runs in process (``MetricsService.start``/``stop``) against per-test topics; values are read
by scraping its HTTP endpoint like Prometheus does.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from processors.logic.enrich.inventory import Inventory
from schemas import codec
from sinks.metrics.service import MetricsService
from tests.support.flows import counters
from tests.support.matrix import window_message

from .kafka_helpers import create_topics, settings_for

pytestmark = pytest.mark.integration
PORT = int(os.environ.get("FABRICFLOW_TEST_METRICS_PORT", "0"))  # 0: any free port
NOW_MS = int(time.time() * 1000)
INVENTORY = {
    "nodes": [
        {"name": "gpu-1", "addresses": ["10.0.0.1"], "group": "gpu", "rack": "r1", "capacity": "400G"},
        {"name": "gpu-2", "addresses": ["10.0.0.2"], "group": "gpu", "rack": "r1", "capacity": "400G"},
    ],
    "switches": [{"name": "tor-1", "agents": ["10.0.255.1"], "ports": {1: {"peer": "gpu-1"}}}],
}


def cell(level, src, dst, b, p, end, cat="collective", syn=0):
    return {"window_start_ms": end - 10_000, "window_end_ms": end, "level": level, "src": src, "dst": dst,
            "category": cat, "bytes_est": b, "packets_est": p, "flow_records": 1, "samples": 1,
            "syn_packets_est": syn, "rst_packets_est": 0, "ecn_ce_packets_est": 0, "cnp_packets_est": 0}


def produce(bootstrap: str, items: list[tuple[str, bytes]], timestamp_ms: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, value in items:
        kw = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        p.produce(topic, key=b"k", value=value, **kw)
    assert p.flush(30) == 0


def scrape(svc: MetricsService) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} from the service's /metrics."""
    with urllib.request.urlopen(svc.url, timeout=30) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def wait_for(svc: MetricsService, cond, timeout_s: float = 60.0):
    """Scrape until ``cond(samples)`` holds (bounded); the last samples."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(svc)
        if cond(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.3)


def service(settings, group: str, **kw) -> MetricsService:
    return MetricsService(settings, inventory=Inventory.from_dict(INVENTORY), port=PORT, group=group, **kw).start()


def test_output_topics_to_metrics(kafka_bootstrap, unique_topic):
    s = settings_for(kafka_bootstrap, unique_topic)
    create_topics(s)
    t = s.kafka.topics
    end = NOW_MS - NOW_MS % 10_000
    items = [
        # one v2 message per window, level and shard (a second one with the same key is a re-emitted duplicate)
        (t.matrix, window_message([cell("node", "gpu-1", "gpu-2", 4096, 4, end, syn=1024),
                                   cell("node", "", "gpu-2", 77, 1, end, cat="other")])),
        (t.matrix, window_message([cell("node", "gpu-1", "gpu-2", 1000, 1, end + 10_000)])),
        (t.matrix, window_message([cell("rack", "r1", "r1", 5096, 5, end)])),
        (t.matrix, window_message([cell("group", "gpu", "gpu", 5096, 5, end)])),
        (t.matrix, b"not a message"),
        (t.counters_raw, codec.encode_batch("counter_batch", counters([
            dict(exporter="10.0.255.1", if_index=1, t=NOW_MS, in_octets=123_456, out_octets=654_321,
                 speed=100_000_000_000)]))),
        (t.straggler, codec.encode_record("straggler_score", {
            "window_start_ms": end - 10_000, "window_end_ms": end, "job": "job-a", "node": "gpu-2", "sent_bytes": 0,
            "recv_bytes": 0, "peer_median_sent": 0.0, "peer_median_recv": 0.0, "ratio_sent": 0.1, "score": -5.5,
            "evidence_windows": 3, "straggler": True, "peers": 2})),
        (t.patterns, json.dumps({"kind": "pattern_baseline", "state": "open", "job": "job-a",
                                 "current_period_ms": 4000, "window_end_ms": end}).encode()),
        (t.patterns, b"\x00\x01 garbage"),
    ]
    produce(kafka_bootstrap, items)
    svc = service(s, "itest-metrics-" + uuid.uuid4().hex[:8])
    try:
        first = wait_for(svc, lambda x: value(x, "fabricflow_metrics_messages_total", topic=t.patterns) == 2.0
                         and value(x, "fabricflow_metrics_messages_total", topic=t.matrix) == 5.0
                         and value(x, "fabricflow_metrics_messages_total", topic=t.counters_raw) == 1.0
                         and value(x, "fabricflow_metrics_messages_total", topic=t.straggler) == 1.0)
        got = scrape(svc)  # new counter series show 0 once, their values from the next scrape on
    finally:
        svc.stop()
    # the wait above ends on these counts (a count it never reaches would only show as a 60 s timeout)
    assert value(first, "fabricflow_metrics_messages_total", topic=t.patterns) == 2.0
    assert value(first, "fabricflow_metrics_messages_total", topic=t.matrix) == 5.0  # 4 windows + 1 undecodable
    n2n = "node_to_node_flow_traffic_bytes_total"
    assert value(got, n2n, src_node="gpu-1", dst_node="gpu-2", app_category="collective") == 5096.0
    assert value(got, n2n, src_node="unknown", dst_node="gpu-2", app_category="other") == 77.0
    assert value(got, "rack_to_rack_flow_traffic_bytes_total", src_rack="r1", dst_rack="r1", app_category="collective") == 5096.0
    assert value(got, "group_to_group_flow_traffic_packets_total", src_group="gpu", dst_group="gpu", app_category="collective") == 5.0
    assert value(got, "app_flow_traffic_bytes_total", node="gpu-2", app_category="collective", direction="rx") == 5096.0
    assert value(got, "node_flow_tcp_syn_packets_total", node="gpu-1", direction="tx") == 1024.0
    assert value(got, "sflow_port_rx_bytes_total", switch="tor-1", port="1", node="gpu-1") == 123_456.0
    assert value(got, "sflow_port_tx_bytes_total", switch="tor-1", port="1", node="gpu-1") == 654_321.0
    assert value(got, "node_interface_bandwidth_bytes", node="gpu-1", direction="rx") == 100e9 / 8
    assert value(got, "node_interface_bandwidth_bytes", node="gpu-2", direction="tx") == 400e9 / 8
    assert value(got, "straggler_score", job="job-a", node="gpu-2") == -5.5
    assert value(got, "straggler_flagged", job="job-a", node="gpu-2") == 1.0
    assert value(got, "job_iteration_period_seconds", job="job-a") == 4.0
    assert value(got, "fabricflow_metrics_undecodable_messages_total", topic=t.matrix, reason="not_avro") == 1.0
    assert value(got, "fabricflow_metrics_undecodable_messages_total", topic=t.patterns, reason="not_json") == 1.0
    assert value(got, "fabricflow_metrics_last_window_end_seconds", stream=t.matrix) == (end + 10_000) / 1000


def _matrix_items(t, n: int, end: int, b: int) -> list[tuple[str, bytes]]:
    return [(t.matrix, window_message([cell("node", "gpu-1", "gpu-2", b, 1, end + 10_000 * i)]))
            for i in range(n)]


def test_restart_does_not_double_count(kafka_bootstrap, unique_topic):
    """Stop (or crash) after a scrape: the new process reads exactly the messages no scrape showed, and
    Prometheus' sum over the counter reset equals the produced total."""
    s = settings_for(kafka_bootstrap, unique_topic)
    create_topics(s)
    t = s.kafka.topics
    end = NOW_MS - NOW_MS % 10_000
    key = dict(src_node="gpu-1", dst_node="gpu-2", app_category="collective")
    group = "itest-metrics-" + uuid.uuid4().hex[:8]
    produce(kafka_bootstrap, _matrix_items(t, 5, end, 100))  # A: 500 bytes
    svc = service(s, group)
    try:
        seen_a = wait_for(svc, lambda x: value(x, "node_to_node_flow_traffic_bytes_total", **key) == 500.0)
        produce(kafka_bootstrap, _matrix_items(t, 3, end + 50_000, 1000))  # B: 3000 bytes, read but never scraped
        deadline = time.monotonic() + 60
        while svc.state.messages.values.get((t.matrix,), 0) < 8 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert svc.state.messages.values.get((t.matrix,)) == 8
    finally:
        svc.stop()  # same as a crash here: offsets stay where the scrape of A committed them
    before = value(seen_a, "node_to_node_flow_traffic_bytes_total", **key)
    svc2 = service(s, group)
    try:
        first = wait_for(svc2, lambda x: value(x, "fabricflow_metrics_messages_total", topic=t.matrix) is not None)
        after = wait_for(svc2, lambda x: value(x, "node_to_node_flow_traffic_bytes_total", **key) == 3000.0)
    finally:
        svc2.stop()
    assert before == 500.0
    # the restarted counter is shown at 0 first: Prometheus sees a reset, then the re-read messages (B only)
    assert value(first, "node_to_node_flow_traffic_bytes_total", **key) in (0.0, None)
    assert value(after, "node_to_node_flow_traffic_bytes_total", **key) == 3000.0
    assert value(after, "fabricflow_metrics_messages_total", topic=t.matrix) == 3.0
    assert before + value(after, "node_to_node_flow_traffic_bytes_total", **key) == 3500.0  # A + B, once each


def test_new_group_skips_messages_before_lookback(kafka_bootstrap, unique_topic):
    s = settings_for(kafka_bootstrap, unique_topic, metrics={"start_lookback_s": 600})
    create_topics(s)
    t = s.kafka.topics
    end = NOW_MS - NOW_MS % 10_000
    produce(kafka_bootstrap, _matrix_items(t, 4, end - 3_600_000, 1), timestamp_ms=NOW_MS - 3_600_000)  # an hour old
    produce(kafka_bootstrap, _matrix_items(t, 2, end, 10))
    svc = service(s, "itest-metrics-" + uuid.uuid4().hex[:8])
    key = dict(src_node="gpu-1", dst_node="gpu-2", app_category="collective")
    try:
        got = wait_for(svc, lambda x: value(x, "node_to_node_flow_traffic_bytes_total", **key) == 20.0)
    finally:
        svc.stop()
    assert value(got, "node_to_node_flow_traffic_bytes_total", **key) == 20.0
    assert value(got, "fabricflow_metrics_skipped_records_total", topic=t.matrix, reason="before_lookback") == 4.0


def test_live_job_membership_from_the_jobs_topic(kafka_bootstrap, unique_topic):
    """inventory.jobs.v1 on the broker: a fresh sink reads the membership published 40 minutes before its
    lookback (within the hourly snapshot period) and attributes RoCEv2 operations to the live job; the file's
    inventory has no jobs."""
    from processors.logic.enrich.inventory.membership import Holding, holding_row

    s = settings_for(kafka_bootstrap, unique_topic, metrics={"start_lookback_s": 600})
    create_topics(s)
    t = s.kafka.topics
    now_ms = int(time.time() * 1000)  # not the module's NOW_MS: the suite may reach this test many minutes later
    end = now_ms - now_ms % 10_000
    published = now_ms - 600_000 - 2_400_000
    row = holding_row(Holding("slurm:7", "llm-live", ("gpu-1", "gpu-2"), published - 60_000), "slurm", published)
    produce(kafka_bootstrap, [(t.jobs, codec.encode_record("job_membership", row))], timestamp_ms=published)
    svc = service(s, "itest-metrics-" + uuid.uuid4().hex[:8])
    try:
        # the cell comes once the row was read (topics are not ordered against each other: a cell read before
        # the membership that covers it counts for the job known then)
        seen = wait_for(svc, lambda x: value(x, "fabricflow_metrics_messages_total", topic=t.jobs) == 1.0)
        assert value(seen, "fabricflow_metrics_messages_total", topic=t.jobs) == 1.0
        c = cell("node", "gpu-1", "gpu-2", 1000, 10, end, cat="rocev2") | {"roce_write_packets_est": 500}
        produce(kafka_bootstrap, [(t.matrix, window_message([c]))])
        got = wait_for(svc, lambda x: value(x, "job_roce_operations_total", job="llm-live", op="write") == 500.0)
    finally:
        svc.stop()
    assert value(got, "job_roce_operations_total", job="llm-live", op="write") == 500.0
    assert value(got, "job_roce_operations_total", job="unknown", op="write") is None
