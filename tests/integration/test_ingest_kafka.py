"""Ingest on the embedded broker: real captures over loopback UDP -> Kafka, DLQ, allowlist, flood, outage."""

from __future__ import annotations

import csv
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict

import numpy as np
import pytest

from ingest.listener import parse_listen
from ingest.service import IngestWorker
from schemas.columns import addr_str
from tests.support.fixtures_path import SHARED_FIXTURES

from .kafka_helpers import batch_rows, consume, count_records, create_topics, s3_engine_broker, settings_for

pytestmark = pytest.mark.integration
REPLAY = SHARED_FIXTURES / "replay_udp.py"
EXPORTS = SHARED_FIXTURES / "exports"


class Running:
    """An IngestWorker on ephemeral loopback ports, run in a thread."""

    def __init__(self, settings, schemes=("netflow", "sflow")):
        specs = [parse_listen(f"{s}://127.0.0.1:0") for s in schemes]
        self.worker = IngestWorker(settings, specs)
        self.worker.open()
        self.ports = {spec.scheme: sock.getsockname()[1] for sock, spec in self.worker.sockets}
        self.report = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.report = self.worker.run(max_seconds=300)

    def stop(self):
        self.worker.stopping = True
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.report


def replay(pcap, port, rate=None):
    cmd = [sys.executable, str(REPLAY), str(pcap), "127.0.0.1", str(port), "--quiet"]
    if rate:
        cmd += ["--rate", str(rate)]
    subprocess.run(cmd, check=True, timeout=120)


def wait_for(pred, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def per5tuple(rows):
    agg = defaultdict(lambda: [0, 0, 0])
    src = [addr_str(a) for a in rows["src_addr"]]
    dst = [addr_str(a) for a in rows["dst_addr"]]
    for i in range(len(rows)):
        proto = int(rows["ip_protocol"][i])
        sp, dp = (0, 0) if proto in (1, 58) else (int(rows["src_port"][i]), int(rows["dst_port"][i]))
        k = f"{src[i]}|{dst[i]}|{proto}|{sp}|{dp}"
        agg[k][0] += 1
        agg[k][1] += int(rows["packets"][i])
        agg[k][2] += int(rows["bytes"][i])
    return agg


def test_captures_over_udp_arrive_once_with_right_fields(kafka_bootstrap, unique_topic):
    s = settings_for(kafka_bootstrap, unique_topic, ingest={"metrics_port": 0, "batch_max_delay_ms": 50})
    create_topics(s)
    run = Running(s)
    try:
        replay(EXPORTS / "softflowd_v9.pcap", run.ports["netflow"])
        # garbage mixed into the same port
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as g:
            for i in range(5):
                g.sendto(b"\x00\x09\x00\x01" + bytes(10 + i), ("127.0.0.1", run.ports["netflow"]))
        replay(EXPORTS / "pmacct_sfprobe_rate8.pcap", run.ports["sflow"])
        assert wait_for(lambda: run.worker.sink.delivered_records >= 230 + 723 + 3)
    finally:
        report = run.stop()
    assert report["undelivered_records"] == 0 and report["failed_records"] == 0
    t = s.kafka.topics
    flows = batch_rows(consume(kafka_bootstrap, t.flows_raw, until=lambda ms: count_records(ms) >= 953))
    assert len(flows) == 230 + 723
    v9 = flows[flows["export_protocol"] == 3]
    sf = flows[flows["export_protocol"] == 1]
    assert len(v9) == 230 and len(sf) == 723
    # NetFlow v9: per 5-tuple records/packets/bytes equal tshark's decode of the same capture.
    want = {}
    with open(SHARED_FIXTURES / "summaries" / "softflowd_v9.per5tuple.csv") as f:
        for r in csv.DictReader(f):
            want[r["key"]] = [int(r["records"]), int(r["packets"]), int(r["bytes"])]
    got = per5tuple(v9)
    assert {k: v for k, v in got.items()} == want
    # sFlow: sampling applied, estimates scaled.
    assert set(sf["sampling_rate"].tolist()) == {8}
    assert int(sf["packets_est"].sum()) == 5784
    assert (sf["bytes_est"] == sf["bytes"] * 8).all()
    counters = batch_rows(consume(kafka_bootstrap, t.counters_raw, until=lambda ms: count_records(ms) >= 3))
    assert len(counters) == 3 and set(counters["if_speed"].tolist()) == {25_000_000_000}
    dlq = consume(kafka_bootstrap, t.dlq, until=lambda ms: len(ms) >= 5)
    assert 1 <= len(dlq) <= 5
    hdrs = dict(dlq[0].headers())
    assert hdrs["protocol"] == b"netflow9" and hdrs["exporter"] == b"127.0.0.1" and hdrs["reason"]
    # Keys: the exporter address, so one exporter's batches share a partition.
    msgs = consume(kafka_bootstrap, t.flows_raw, until=lambda ms: count_records(ms) >= 953)
    assert {m.key() for m in msgs} == {b"127.0.0.1"} and len({m.partition() for m in msgs}) == 1


def test_allowlist_blocks_spoofed_exporters(kafka_bootstrap, unique_topic):
    s = settings_for(kafka_bootstrap, unique_topic, ingest={"metrics_port": 0, "allowlist": ["10.0.0.0/8"], "batch_max_delay_ms": 50})
    create_topics(s)
    run = Running(s, schemes=("netflow",))
    try:
        replay(EXPORTS / "softflowd_ipfix.pcap", run.ports["netflow"])
        time.sleep(1.0)
    finally:
        report = run.stop()
    m = run.worker.metrics
    assert m.registry.get_sample_value("fabricflow_ingest_not_allowed_datagrams_total", {"listener": "udp"}) == 10
    assert report["produced_records"] == 0
    assert consume(kafka_bootstrap, s.kafka.topics.flows_raw, timeout_s=3) == []


def test_malformed_flood_does_not_stall_ingest(kafka_bootstrap, unique_topic):
    s = settings_for(kafka_bootstrap, unique_topic, ingest={"metrics_port": 0, "batch_max_delay_ms": 50, "dlq_max_per_s": 5})
    create_topics(s)
    run = Running(s, schemes=("netflow",))
    good = [p.payload for p in __import__("ingest.pcapread", fromlist=["read_udp"]).read_udp(str(EXPORTS / "softflowd_ipfix.pcap"))]
    rng = np.random.default_rng(7)
    sent_garbage = 0
    deadline = time.monotonic() + 20  # bounded in time and count
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for rnd in range(20):
                for _ in range(500):
                    n = int(rng.integers(0, 1400))
                    # Random bytes behind a first byte that no export version starts with, so none can
                    # decode by chance and the good-record count below is exact.
                    junk = b"\xa5" + rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                    tx.sendto(junk, ("127.0.0.1", run.ports["netflow"]))
                    sent_garbage += 1
                if rnd % 2 == 0:
                    for d in good:
                        tx.sendto(d, ("127.0.0.1", run.ports["netflow"]))
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        flows_delivered = lambda: run.worker.metrics.registry.get_sample_value(  # noqa: E731
            "fabricflow_ingest_kafka_delivered_records_total", {"topic": s.kafka.topics.flows_raw}
        ) or 0
        assert wait_for(lambda: flows_delivered() >= 230 * 10)
    finally:
        report = run.stop()
    assert flows_delivered() == 230 * 10
    errors = sum(smp.value for fam in run.worker.metrics.registry.collect() if fam.name == "fabricflow_ingest_decode_errors" for smp in fam.samples if smp.name.endswith("_total"))
    received = run.worker.metrics.registry.get_sample_value("fabricflow_ingest_datagrams_total", {"exporter": "127.0.0.1", "protocol": "ipfix"})
    drops = run.worker.metrics.registry.get_sample_value("fabricflow_ingest_socket_drops_total", {"listener": f"netflow://127.0.0.1:0"}) or 0
    assert received == 10 * len(good)
    assert errors + drops == sent_garbage  # every junk datagram was rejected and counted (or dropped by the kernel, counted)
    assert report["failed_records"] == 0


@pytest.fixture
def s3_broker(tmp_path):
    """A separate broker on the persistent s3 storage engine, which tests may stop and restart."""
    with s3_engine_broker(tmp_path / "st", 1) as st:
        yield st


def test_broker_outage_nothing_lost_silently(s3_broker, unique_topic):
    boot = s3_broker.bootstrap
    s = settings_for(
        boot,
        unique_topic,
        ingest={"metrics_port": 0, "batch_max_delay_ms": 50, "producer": {"message_timeout_ms": 8000, "queue_max_messages": 1000}},
    )
    create_topics(s)
    run = Running(s, schemes=("netflow", "sflow"))
    sink = run.worker.sink
    try:
        replay(EXPORTS / "softflowd_v9.pcap", run.ports["netflow"])
        assert wait_for(lambda: sink.delivered_records == 230)
        s3_broker.stop_broker()
        replay(EXPORTS / "softflowd_ipfix.pcap", run.ports["netflow"])  # while the broker is down
        time.sleep(2)
        s3_broker.start_broker()
        replay(EXPORTS / "pmacct_sfprobe_rate8.pcap", run.ports["sflow"])
        assert wait_for(lambda: sink.in_flight_records == 0, timeout_s=60)
    finally:
        report = run.stop()
    sent = 230 + 230 + 723 + 3
    # Every record is accounted for: delivered, failed or dropped -- none silently lost.
    assert report["delivered_records"] + report["failed_records"] + report["dropped_records"] == sent
    assert report["undelivered_records"] == 0
    # Records acknowledged are all in the topics, exactly once.
    t = s.kafka.topics
    flows = batch_rows(consume(boot, t.flows_raw, timeout_s=30, idle_s=4))
    counters = batch_rows(consume(boot, t.counters_raw, timeout_s=15, idle_s=3))
    assert len(flows) + len(counters) == report["delivered_records"]
    # Exactly once per capture: each capture's records appear 0 or 1 times, never twice.
    per_proto = {p: int((flows["export_protocol"] == p).sum()) for p in (1, 3, 4)}
    assert per_proto[3] == 230  # sent before the outage
    assert per_proto[1] == 723 and len(counters) == 3  # sent after the broker came back
    assert per_proto[4] in (0, 230)  # sent during the outage: delivered after the restart, or counted as failed
    assert report["failed_records"] + report["dropped_records"] == 230 - per_proto[4]
    assert report["delivered_records"] >= 230 + 723  # before and after the outage got through
