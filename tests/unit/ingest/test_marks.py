"""ingest/marks.py and the worker's marks:// listener: mark lines are parsed, bounded, counted and published; a bad
line or a flood never reaches the flow path and never stops it."""

from __future__ import annotations

import socket
import threading
import time

from fabricflow.settings import load_settings
from ingest.listener import parse_listen
from ingest.marks import MarkReceiver, TokenBuckets, publish_marks
from ingest.metrics import IngestMetrics
from ingest.publish import KafkaSink
from schemas import codec
from tests.support.fake_kafka import FakeProducer

NOW = int(time.time() * 1000)
STEP = b'{"job":"train-a","event":"step_start","step":1}'


class Sink:
    def __init__(self):
        self.marks, self.flows = [], []

    def publish_mark(self, kind, rec):
        self.marks.append((kind, rec))
        return True

    def publish_flows(self, exporter, arr):
        self.flows.append(arr)
        return True

    def publish_counters(self, exporter, arr):
        return True

    def publish_dlq(self, *a, **k):
        return True

    def poll(self):
        pass

    def close(self):
        return {}


def _count(m: IngestMetrics, kind: str, result: str) -> float:
    return m.registry.get_sample_value("fabricflow_ingest_marks_total", {"kind": kind, "result": result}) or 0.0


def test_lines_are_published_and_bad_ones_counted_by_reason():
    sink, m = Sink(), IngestMetrics()
    rx = MarkReceiver(sink, m.registry)
    n = rx.handle(STEP + b"\n{oops}\n" + b'{"kind":"change","text":"x","job":"train-a"}', "10.0.1.1", NOW)
    assert n == 2 and [k for k, _ in sink.marks] == ["step", "change"]
    assert sink.marks[0][1]["source"] == "udp:10.0.1.1"
    assert _count(m, "step", "published") == 1 and _count(m, "change", "published") == 1
    assert _count(m, "unknown", "not_json") == 1


def test_rate_bounds_per_sender_and_in_all():
    sink, m = Sink(), IngestMetrics()
    rx = MarkReceiver(sink, m.registry, max_per_s=15, max_per_source_per_s=10)
    for _ in range(30):
        rx.handle(STEP, "10.0.1.1", NOW)
    assert len(sink.marks) == 10 and _count(m, "step", "rate_limited") == 20
    for _ in range(30):
        rx.handle(STEP, "10.0.1.2", NOW)
    assert len(sink.marks) == 15  # the total bucket (15) is spent
    rx.handle(STEP, "10.0.1.1", NOW + 2000)  # two seconds later the buckets have refilled
    assert len(sink.marks) == 16


def test_token_buckets_refill_on_the_given_clock():
    b = TokenBuckets(2, 0)
    assert [b.take("a", 0.0) for _ in range(3)] == [True, True, False]
    assert b.take("a", 0.5) and not b.take("a", 0.5)


def test_allowlist_applies_to_senders():
    sink, m = Sink(), IngestMetrics()
    rx = MarkReceiver(sink, m.registry, allowlist=["10.0.0.0/16"])
    rx.handle(STEP, "10.0.1.1", NOW)
    rx.handle(STEP, "192.0.2.1", NOW)
    assert len(sink.marks) == 1 and _count(m, "unknown", "not_allowed") == 1


def test_kafka_sink_and_publish_marks_write_avro_to_the_mark_topics():
    s = load_settings(None)
    prod = FakeProducer()
    sink = KafkaSink(s.kafka, s.ingest.producer, IngestMetrics(), producer_factory=lambda conf: prod)
    rx = MarkReceiver(sink, IngestMetrics().registry)
    rx.handle(STEP + b'\n{"kind":"change","text":"x","node":"gpu01"}', "10.0.1.1", NOW)
    assert [(t, k) for t, k, _v in prod.sent] == [("steps.v1", b"train-a"), ("changes.v1", b"gpu01")]
    assert codec.decode_record(prod.sent[0][2], expect="step_mark")["step"] == 1
    other = FakeProducer()
    from schemas.marks import change_record

    rec = change_record("y", NOW, NOW, "cli", job="train-b")
    assert publish_marks(s.kafka, [("change", rec)], producer_factory=lambda conf: other.__init__(conf) or other) == 1
    assert other.sent[0][:2] == ("changes.v1", b"train-b") and other.conf["partitioner"] == "murmur2_random"


def test_the_worker_takes_marks_on_their_own_listener_and_flows_on_theirs(tmp_path):
    from ingest.service import IngestWorker

    s = load_settings(None, ingest={"listen": ["sflow://127.0.0.1:0", "marks://127.0.0.1:0"], "metrics_port": 0,
                                    "capture_path": str(tmp_path / "cap.pcap")})
    sink = Sink()
    w = IngestWorker(s, [parse_listen(u) for u in s.ingest.listen], sink=sink)
    w.open()
    ports = {spec.scheme: sock.getsockname()[1] for sock, spec in w.sockets}
    t = threading.Thread(target=w.run, kwargs={"max_seconds": 20}, daemon=True)
    t.start()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        tx.sendto(STEP, ("127.0.0.1", ports["marks"]))
        tx.sendto(b"{not json", ("127.0.0.1", ports["marks"]))
        deadline = time.monotonic() + 10
        while not sink.marks and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        w.stopping = True
        t.join(10)
        tx.close()
    assert [r["event"] for _k, r in sink.marks] == ["step_start"]
    assert _count(w.metrics, "unknown", "not_json") == 1
    assert w.metrics.registry.get_sample_value("fabricflow_ingest_decode_errors_total",
                                               {"protocol": "unknown", "reason": "bad_version"}) is None
    from ingest.pcapread import read_udp

    got = [p.payload for p in read_udp(str(tmp_path / "cap.pcap"))]
    assert got == [STEP, b"{not json"]  # the capture holds what the listener received
