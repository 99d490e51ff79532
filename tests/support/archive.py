"""Synthetic flow/counter batches and a fake Kafka log for the sink tests."""

from __future__ import annotations

import numpy as np
from confluent_kafka import TopicPartition

from schemas import codec
from schemas.columns import FLOW_DTYPE, addr16, dtype_for, empty_flows
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.layout import HOUR_MS
from tests.support.fake_kafka import FakeMessage

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def flows(times_ms, ids=None, n_src=4) -> np.ndarray:
    """Raw flows with the given time_end_ms; ``in_if`` carries a unique row id."""
    times = np.asarray(times_ms, dtype=np.int64)
    n = len(times)
    f = empty_flows(n)
    f["time_end_ms"] = times
    f["time_start_ms"] = times - 1000
    f["time_received_ms"] = times + 10
    f["time_export_ms"] = times + 5
    f["in_if"] = np.arange(n) if ids is None else ids
    f["bytes"] = 1000
    f["packets"] = 1
    f["sampling_rate"] = 1
    f["bytes_est"] = 1000
    f["packets_est"] = 1
    f["ip_version"] = 4
    f["export_protocol"] = 1
    f["exporter_addr"] = np.frombuffer(addr16("192.0.2.1"), dtype=np.uint8)
    for i in range(n):
        f["src_addr"][i] = np.frombuffer(addr16(f"10.0.0.{i % n_src + 1}"), dtype=np.uint8)
        f["dst_addr"][i] = np.frombuffer(addr16("10.0.1.1" if i % 2 else "2001:db8::1"), dtype=np.uint8)
    return f


def flow_table(times_ms, ids=None):
    return table_from_columns(flows(times_ms, ids), "flow_record")


def enriched(rows: list[dict]) -> np.ndarray:
    """Enriched flows from small dicts (unspecified fields take defaults)."""
    dt = dtype_for("flow_enriched")
    out = np.zeros(len(rows), dtype=dt)
    base = flows([T0] * len(rows))
    for name in FLOW_DTYPE.names:
        out[name] = base[name]
    for name in dt.names:
        if dt[name] == np.dtype(object):
            out[name] = ""
    for i, r in enumerate(rows):
        for k, v in r.items():
            if k in ("src_addr", "dst_addr", "exporter_addr"):
                out[k][i] = np.frombuffer(addr16(v), dtype=np.uint8)
            else:
                out[k][i] = v
    return out


class FakeLog:
    """One Kafka partition: messages (offset -> table), and a committed offset."""

    def __init__(self, messages):
        self.messages = messages  # list of pa.Table, offset = index
        self.committed = 0  # next offset to read

    def commit(self, offset: int) -> None:
        assert offset >= self.committed, "commits never go backwards"
        self.committed = offset


def hour_ms(h: int) -> int:
    return T0 + h * HOUR_MS


# ----------------------------------------------------------------------------- fake Kafka clients for ArchiveService


Msg = FakeMessage  # the name the sink tests use


class FakeConsumer:
    def __init__(self, committed=None):
        self.commits = []
        self._committed = committed or {}

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        return offsets

    def committed(self, partitions, timeout=None):
        return [TopicPartition(p.topic, p.partition, self._committed.get((p.topic, p.partition), -1001))
                for p in partitions]

    def pause(self, tps):
        pass

    def resume(self, tps):
        pass


class FakeProducer:
    def __init__(self):
        self.sent = []

    def produce(self, topic, key, value, on_delivery=None):
        self.sent.append((topic, key, codec.decode_record(value)))

    def flush(self, timeout=None):
        return 0
