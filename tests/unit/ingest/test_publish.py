"""KafkaSink's delivery accounting: every delivered or failed record counted once, per topic."""

from __future__ import annotations

import numpy as np

from fabricflow.settings import load_settings
from ingest.metrics import IngestMetrics
from ingest.publish import KafkaSink
from schemas.columns import FLOW_DTYPE
from tests.support.fake_kafka import FakeProducer


class _Err:
    def fatal(self):
        return False


def test_delivered_and_failed_records_are_counted_per_topic_on_every_callback():
    s = load_settings(None)
    m = IngestMetrics()
    prod = FakeProducer()
    sink = KafkaSink(s.kafka, s.ingest.producer, m, producer_factory=lambda conf: prod)
    for n in (3, 5, 7):  # FakeProducer reports each message delivered at once
        assert sink.publish_flows("10.0.0.1", np.zeros(n, FLOW_DTYPE))
    sink.publish_dlq("10.0.0.1", "netflow9", "truncated", b"\x00\x09")
    sink._on_delivery(s.kafka.topics.flows_raw, 4, _Err(), None)  # a failed message: failed, not delivered
    delivered = lambda topic: m.registry.get_sample_value("fabricflow_ingest_kafka_delivered_records_total",  # noqa: E731
                                                          {"topic": topic})
    assert delivered(s.kafka.topics.flows_raw) == 15
    assert delivered(s.kafka.topics.dlq) == 1
    assert m.registry.get_sample_value("fabricflow_ingest_kafka_failed_records_total",
                                       {"topic": s.kafka.topics.flows_raw}) == 4
    assert (sink.delivered_records, sink.failed_records) == (16, 4)
