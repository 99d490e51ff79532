"""Where decoded batches go: Kafka (confluent-kafka) or JSON lines on stdout.

Kafka: the producer of :func:`fabricflow.kafka.producer_config` (idempotent, lz4/zstd, linger and batch
tuned, bounded buffer).
``produce`` never blocks the receive loop: when librdkafka's buffer is full the
batch is dropped and counted (``fabricflow_ingest_kafka_dropped_records_total``);
delivery errors are counted per record. When the broker returns, librdkafka
reconnects by itself and delivery resumes. Keys are exporter addresses and the
partitioner is ``murmur2_random``, the hash Faust/aiokafka use, so keys land on
the partitions the processors expect.
"""

from __future__ import annotations

import json
import sys
from functools import partial

import numpy as np
from confluent_kafka import KafkaError, Producer

from fabricflow.kafka import producer_config
from schemas import codec
from schemas.columns import PROTOCOL_NAMES, addr_str

from .metrics import IngestMetrics


class KafkaSink:
    def __init__(self, kafka_settings, producer_settings, metrics: IngestMetrics, producer_factory=Producer):
        self.metrics = metrics
        t = kafka_settings.topics
        self.flows_topic, self.counters_topic, self.dlq_topic = t.flows_raw, t.counters_raw, t.dlq
        self.discards_topic = t.discards_raw
        self.quality_topic = t.quality
        self.mark_topics = {"step": t.steps, "change": t.changes}
        conf = producer_config(kafka_settings, producer_settings)  # idempotent, murmur2_random, bounded buffer
        self.flush_timeout_s = producer_settings.flush_timeout_s
        self.producer = producer_factory(conf)
        self.produced_records = 0
        self.delivered_records = 0
        self.failed_records = 0
        self.dropped_records = 0
        self.fatal: str | None = None
        self._delivered: dict = {}  # topic -> its bound delivered-records counter (one labels() per topic, not message)

    def _on_delivery(self, topic: str, n: int, err, msg) -> None:
        if err is None:
            self.delivered_records += n
            c = self._delivered.get(topic)
            if c is None:
                c = self._delivered[topic] = self.metrics.delivered.labels(topic)
            c.inc(n)
        else:
            self.failed_records += n
            self.metrics.failed.labels(topic).inc(n)
            if err.fatal():
                self.fatal = str(err)

    def _produce(self, topic: str, key: bytes, value: bytes, n: int, headers=None) -> bool:
        try:
            self.producer.produce(topic, value=value, key=key, headers=headers, on_delivery=partial(self._on_delivery, topic, n))
        except BufferError:
            self.dropped_records += n
            self.metrics.dropped.labels(topic).inc(n)
            return False
        except Exception as e:  # KafkaException (e.g. message too large): count, never crash the loop
            code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
            self.failed_records += n
            self.metrics.failed.labels(topic).inc(n)
            if code is None:
                raise
            return False
        self.produced_records += n
        return True

    def publish_flows(self, exporter: str, flows: np.ndarray) -> bool:
        return self._produce(self.flows_topic, exporter.encode(), codec.encode_batch("flow_batch", flows), len(flows))

    def publish_quality(self, exporter: str, value: bytes) -> bool:
        """One IngestQuality record (already encoded); not counted as records in the delivery metrics."""
        return self._produce(self.quality_topic, exporter.encode(), value, 0)

    def publish_mark(self, kind: str, record: dict) -> bool:
        """One step mark or change marker (``ingest.marks``); not counted as records in the delivery metrics."""
        from .marks import encode_mark, mark_key

        return self._produce(self.mark_topics[kind], mark_key(kind, record).encode(), encode_mark(kind, record), 0)

    def publish_counters(self, exporter: str, counters: np.ndarray) -> bool:
        return self._produce(self.counters_topic, exporter.encode(), codec.encode_batch("counter_batch", counters), len(counters))

    def publish_discards(self, exporter: str, discards: np.ndarray) -> bool:
        """sFlow discarded packet notifications (DISCARD_DTYPE rows) as one DiscardedPacketBatch."""
        return self._produce(self.discards_topic, exporter.encode(), codec.encode_batch("discard_batch", discards),
                             len(discards))

    def publish_dlq(self, exporter: str, protocol: str, reason: str, datagram: bytes, detail: str = "") -> bool:
        headers = [("exporter", exporter.encode()), ("protocol", protocol.encode()), ("reason", reason.encode()), ("detail", detail[:200].encode())]
        return self._produce(self.dlq_topic, exporter.encode(), datagram, 1, headers)

    def poll(self) -> None:
        self.producer.poll(0)
        self.metrics.queue.set(len(self.producer))

    @property
    def in_flight_records(self) -> int:
        return self.produced_records - self.delivered_records - self.failed_records

    def close(self) -> dict:
        remaining = self.producer.flush(self.flush_timeout_s)
        return {
            "produced_records": self.produced_records,
            "delivered_records": self.delivered_records,
            "failed_records": self.failed_records,
            "dropped_records": self.dropped_records,
            "undelivered_records": self.in_flight_records,
            "undelivered_messages": remaining,
        }


def _jsonable(rows: np.ndarray, kind: str):
    names = rows.dtype.names
    cols = {}
    for k in names:
        col = rows[k]
        cols[k] = [addr_str(a) for a in col] if col.ndim == 2 else col.tolist()
    for i in range(len(rows)):
        d = {"type": kind}
        for k in names:
            d[k] = cols[k][i]
        if "export_protocol" in d:
            d["export_protocol_name"] = PROTOCOL_NAMES.get(d["export_protocol"], "unknown")
        yield d


class StdoutSink:
    """JSON lines, one per flow record / counter sample: zero set-up way to look at decoded flows."""

    def __init__(self, metrics: IngestMetrics, out=None):
        self.metrics = metrics
        self.out = out or sys.stdout
        self.produced_records = 0

    def publish_flows(self, exporter: str, flows: np.ndarray) -> bool:
        for d in _jsonable(flows, "flow"):
            self.out.write(json.dumps(d) + "\n")
        self.produced_records += len(flows)
        return True

    def publish_counters(self, exporter: str, counters: np.ndarray) -> bool:
        for d in _jsonable(counters, "counter"):
            self.out.write(json.dumps(d) + "\n")
        self.produced_records += len(counters)
        return True

    def publish_discards(self, exporter: str, discards: np.ndarray) -> bool:
        for d in _jsonable(discards, "discard"):
            self.out.write(json.dumps(d) + "\n")
        self.produced_records += len(discards)
        return True

    def publish_mark(self, kind: str, record: dict) -> bool:
        self.out.write(json.dumps({"type": f"{kind}_mark", **record}) + "\n")
        return True

    def publish_dlq(self, exporter, protocol, reason, datagram, detail="") -> bool:
        sys.stderr.write(json.dumps({"type": "undecodable", "exporter": exporter, "protocol": protocol, "reason": reason, "detail": detail, "bytes": len(datagram)}) + "\n")
        return True

    def poll(self) -> None:
        self.out.flush()

    def close(self) -> dict:
        self.out.flush()
        return {"produced_records": self.produced_records, "undelivered_records": 0}
