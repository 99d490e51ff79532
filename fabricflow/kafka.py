"""Kafka client settings shared by every fabricflow consumer (one place for group and commit behaviour)."""

from __future__ import annotations

from typing import Any

from .settings import KafkaSettings


def consumer_config(kafka: KafkaSettings, group: str, client: str, **extra: Any) -> dict[str, Any]:
    """librdkafka settings of a consumer in ``group`` that commits offsets itself, from the earliest offset.

    ``client``: suffix of the client id (``<kafka.client_id>-<client>``); ``extra`` overrides or adds settings.
    Joins take about half of ``kafka.session_timeout_ms`` (docs/embedded-stack.md), so it stays short.
    """
    conf = kafka.client_config()
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
