"""The one place that owns topic names, partition counts and topic configs.

Topics are created idempotently at start-up through the Admin API with their
final partition count: the embedded broker (Tansu) cannot add partitions later,
and keys (exporter address for raw topics) must keep landing on the same
partition. Compaction is never relied on (Tansu accepts but does not enforce it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from .settings import KafkaSettings

log = logging.getLogger(__name__)

DAY_MS = 86_400_000


@dataclass(frozen=True)
class TopicSpec:
    key: str  # attribute name in TopicNames
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    schema: str = ""  # avsc name of the message value
    doc: str = ""


def topic_specs(kafka: KafkaSettings) -> list[TopicSpec]:
    t = kafka.topics
    p = kafka.partitions
    week = str(7 * DAY_MS)
    month = str(30 * DAY_MS)
    return [
        TopicSpec("flows_raw", t.flows_raw, p, {"retention.ms": week}, "flow_batch", "FlowBatch per message, key = exporter address"),
        TopicSpec("counters_raw", t.counters_raw, p, {"retention.ms": week}, "counter_batch", "CounterBatch per message, key = exporter"),
        TopicSpec("dlq", t.dlq, 1, {"retention.ms": week}, "", "raw undecodable datagrams; headers exporter/protocol/reason"),
        TopicSpec("flows_enriched", t.flows_enriched, p, {"retention.ms": week}, "flow_enriched_batch", "EnrichedFlowBatch per message"),
        TopicSpec("matrix", t.matrix, p, {"retention.ms": month}, "matrix_cell", "one cell per message, key = window|level|src|dst"),
        TopicSpec("incast", t.incast, p, {"retention.ms": month}, "incast_event", "key = destination"),
        TopicSpec("straggler", t.straggler, p, {"retention.ms": month}, "straggler_score", "key = job"),
        TopicSpec("link_health", t.link_health, p, {"retention.ms": month}, "link_health", "key = switch|ifIndex"),
        TopicSpec("alerts", t.alerts, p, {"retention.ms": month}, "alert", "key = dedup key"),
        TopicSpec("patterns", t.patterns, p, {"retention.ms": month}, "", "pattern, Avro: baselines, deviations and the training timeline per window, key = job"),
        TopicSpec("shuffle", t.shuffle, p, {"retention.ms": str(DAY_MS)}, "flow_batch", "internal: raw flows re-partitioned by destination job/node (see processors/app.py)"),
        TopicSpec("summaries", t.summaries, p, {"retention.ms": str(365 * DAY_MS)}, "summary_hourly", "key = hour"),
    ]


def topic_names(kafka: KafkaSettings) -> dict[str, str]:
    return {s.key: s.name for s in topic_specs(kafka)}


def ensure_topics(
    kafka: KafkaSettings,
    specs: list[TopicSpec] | None = None,
    timeout_s: float = 15.0,
) -> dict[str, str]:
    """Create missing topics; return {topic: "created" | "exists"}.

    An existing topic with fewer partitions than wanted is reported (not fixed:
    the embedded broker cannot add partitions; on Apache Kafka use
    ``kafka-topics --alter``).
    """
    specs = specs if specs is not None else topic_specs(kafka)
    admin = AdminClient(kafka.client_config())
    md = admin.list_topics(timeout=timeout_s)
    result: dict[str, str] = {}
    new = []
    for s in specs:
        existing = md.topics.get(s.name)
        if existing is not None and existing.error is None:
            have = len(existing.partitions)
            result[s.name] = "exists"
            if have < s.partitions:
                log.warning("topic %s has %d partitions, configured %d; keys keep their placement", s.name, have, s.partitions)
            continue
        new.append(NewTopic(s.name, num_partitions=s.partitions, replication_factor=kafka.replication_factor, config=s.config))
    if new:
        futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
        for name, fut in futures.items():
            try:
                fut.result(timeout=timeout_s)
                result[name] = "created"
            except KafkaException as e:
                err = e.args[0]
                if err.code() == 36:  # TOPIC_ALREADY_EXISTS: created concurrently
                    result[name] = "exists"
                else:
                    raise
    return result
