"""In-memory sinks for ingest pipeline tests (what the pipeline would publish, kept in lists) and capture payloads."""

from __future__ import annotations

from ingest.pcapread import read_udp
from schemas import codec
from tests.support.fixtures_path import SHARED_FIXTURES


class FakeSink:
    def __init__(self):
        self.flows, self.counters, self.dlq = [], [], []
        self.produced_records = 0

    def publish_flows(self, exporter, arr):
        self.flows.append((exporter, arr))
        return True

    def publish_counters(self, exporter, arr):
        self.counters.append((exporter, arr))
        return True

    def publish_dlq(self, exporter, protocol, reason, datagram, detail=""):
        self.dlq.append((exporter, protocol, reason, datagram))
        return True

    def poll(self):
        pass

    def close(self):
        return {}


def payloads(name):
    return [pkt.payload for pkt in read_udp(str(SHARED_FIXTURES / "exports" / name))]


class QualitySink(FakeSink):
    def __init__(self):
        super().__init__()
        self.quality = []

    def publish_quality(self, exporter, value):
        self.quality.append((exporter, codec.decode_record(value, expect="ingest_quality")))
        return True
