"""How every fabricflow client talks to Kafka: client, consumer and producer settings, and topic creation.

One place for what all clients share: the security settings (:mod:`fabricflow.kafka_security`), a consumer
that commits offsets itself (:func:`consumer_config`), one producer configuration (:func:`producer_config`:
ingest, the processors' output producer and replay use it) and the topics of the stream catalog created
idempotently (:func:`ensure_topics`).
"""

from __future__ import annotations

import logging
from typing import Any

from .kafka_security import librdkafka_config
from .settings import KafkaSettings, ProducerSettings
from .streams import TopicSpec, topic_specs

log = logging.getLogger(__name__)

#: Largest message any fabricflow producer writes (a raw or enriched batch, a shuffle message).
MAX_MESSAGE_BYTES = 8_000_000


def client_config(kafka: KafkaSettings) -> dict[str, Any]:
    """librdkafka configuration shared by producers, consumers and admin clients: bootstrap servers, client id,
    SASL and TLS (:func:`fabricflow.kafka_security.librdkafka_config`)."""
    return librdkafka_config(kafka)


def consumer_config(kafka: KafkaSettings, group: str, client: str, **extra: Any) -> dict[str, Any]:
    """librdkafka settings of a consumer in ``group`` that commits offsets itself, from the earliest offset.

    ``client``: suffix of the client id (``<kafka.client_id>-<client>``); ``extra`` overrides or adds settings.
    The embedded broker holds each join for half of ``kafka.session_timeout_ms`` (docs/embedded-stack.md).
    """
    conf = client_config(kafka)
    conf.update({
        "client.id": f"{kafka.client_id}-{client}",
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": kafka.session_timeout_ms,
        "heartbeat.interval.ms": max(100, kafka.session_timeout_ms // 3),
    })
    conf.update(extra)
    return conf


def producer_config(kafka: KafkaSettings, producer: ProducerSettings, **extra: Any) -> dict[str, Any]:
    """librdkafka settings of every fabricflow producer (ingest, the processors' output producer, replay).

    Idempotent with ``acks=all``; ``partitioner=murmur2_random``, the key hash Faust/aiokafka use, so a key
    lands on the partition the processors' consumer group expects (librdkafka's default
    ``consistent_random`` would place it elsewhere); messages up to :data:`MAX_MESSAGE_BYTES`; compression,
    linger, batch size, buffer bounds and delivery timeout from ``producer`` (``ingest.producer``).
    ``extra`` overrides or adds settings (the processors' own linger, a delivery callback).
    """
    conf = client_config(kafka)
    conf.update({
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "message.max.bytes": MAX_MESSAGE_BYTES,
        "compression.type": producer.compression,
        "linger.ms": producer.linger_ms,
        "batch.size": producer.batch_bytes,
        "queue.buffering.max.messages": producer.queue_max_messages,
        "queue.buffering.max.kbytes": producer.queue_max_kbytes,
        "message.timeout.ms": producer.message_timeout_ms,
    })
    conf.update(extra)
    return conf


def ensure_topics(
    kafka: KafkaSettings,
    specs: list[TopicSpec] | None = None,
    timeout_s: float = 15.0,
) -> dict[str, str]:
    """Create missing topics (default: every topic of the stream catalog); return {topic: "created" | "exists"}.

    An existing topic with fewer partitions than wanted is reported (not fixed:
    the embedded broker cannot add partitions; on Apache Kafka use
    ``kafka-topics --alter``).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    specs = specs if specs is not None else topic_specs(kafka)
    admin = AdminClient(client_config(kafka))
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
