"""The worker's confluent-kafka producer: shuffle messages, ``flows.enriched.v2`` and detector outputs
(``matrix.windows.v2`` and the other output topics).

Faust does not know this producer: offsets are committed and snapshots written only after it has
delivered what it holds (:mod:`processors.worker.checkpoint`).
"""

from __future__ import annotations

import logging

import numpy as np
from confluent_kafka import Producer

from fabricflow import streams
from fabricflow.kafka import producer_config
from fabricflow.settings import Settings
from schemas import codec
from schemas.outputs import encode_outputs
from schemas.records import encode_records

log = logging.getLogger("fabricflow.processors")


class OutputPublisher:
    """confluent-kafka producer for the shuffle, enriched flows and detector outputs (never drops a message)."""

    def __init__(self, settings: Settings, producer=None):
        """``producer``: a stand-in with confluent-kafka's ``produce``/``poll``/``flush`` (``fabricflow backfill``
        writes into memory); default a confluent-kafka producer of the settings."""
        k = settings.kafka
        self.topics = k.topics
        self.output_topics = streams.output_topics(k)
        self.failed = 0
        self.publish_v1 = settings.processors.publish_v1
        if producer is not None:
            self.producer = producer
            return
        self.producer = Producer(producer_config(
            k, settings.ingest.producer,
            **{"linger.ms": settings.processors.output_linger_ms,
               # delivery reports only for failures, to one callback set here: no callable kept per message
               "delivery.report.only.error": True, "on_delivery": self._cb},
        ))

    def _cb(self, err, _msg):
        if err is not None:
            self.failed += 1
            log.warning("output delivery failed: %s", err)

    def produce(self, topic, key: bytes, value: bytes, partition: int | None = None, headers=None):
        kw = {}
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, value, key, **kw)
                return
            except BufferError:  # outputs must not be dropped: wait for the buffer to drain
                self.producer.poll(0.1)

    def enriched(self, key: bytes, batch, max_records: int, coded: codec.Coded | None = None,
                 raw: tuple[bytes, dict] | None = None) -> None:
        """Publish ``batch`` to ``flows.enriched.v2`` (and ``flows.enriched.v1`` with ``processors.publish_v1``)
        in messages of at most ``max_records`` (``coded``: ``Enricher.label_codes(batch)``).

        ``raw``: (the raw message whose rows ``batch`` enriches, its field spans from ``decode_batch``); when
        one message carries them all, the flow fields' encodings are copied from it.
        """
        formats = [("flow_enriched_batch_v2", codec.encode_coded, self.topics.flows_enriched)]
        if self.publish_v1:
            formats.append(("flow_enriched_batch", codec.encode_batch, self.topics.flows_enriched_v1))
        for schema, encode, topic in formats:
            verbatim = None
            if raw is not None and len(batch) <= max_records:
                verbatim = codec.field_encodings(*raw, schema)
            for i in range(0, len(batch), max_records):
                rows = slice(i, i + max_records)
                self.produce(topic, key, encode(schema, batch[rows], codec.coded_rows(coded, rows), verbatim))

    def outputs(self, outputs) -> None:
        """Produce detector outputs in order; the records of each kind are Avro-encoded together (matrix: one
        ``matrix.windows.v2`` message per window, level and shard; with ``processors.publish_v1`` also one
        ``matrix.windows.v1`` message per cell)."""
        by_kind: dict[str, list] = {}
        for o in outputs:
            by_kind.setdefault(o[0], []).append(o[2])
        encoded = {kind: iter(encode_outputs(kind, values)) for kind, values in by_kind.items()}
        produce, topics = self.produce, self.output_topics
        for kind, key, _value in outputs:
            produce(topics[kind], key.encode(), next(encoded[kind]))
        if self.publish_v1 and "matrix" in by_kind:
            self._matrix_v1(by_kind["matrix"])

    def _matrix_v1(self, windows) -> None:
        """The deprecated ``matrix.windows.v1``: one ``matrix_cell`` message per cell, keyed as before v2."""
        cells, keys = [], []
        for w in windows:
            for c in w.cells():
                cells.append(c)
                keys.append(f"{w.window_start_ms}|{w.level}|{c['src']}|{c['dst']}|{c['category']}|{w.shard}")
        topic = self.topics.matrix_v1
        for key, value in zip(keys, encode_records("matrix_cell", cells)):
            self.produce(topic, key.encode(), value)

    def poll(self):
        self.producer.poll(0)

    def flush(self, timeout: float = 10.0) -> int:
        return self.producer.flush(timeout)
