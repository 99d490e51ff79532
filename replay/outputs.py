"""Replay's outputs: JSON-ready records, a report file (``.json`` / ``.parquet``), and the ``replay.*`` topics."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from fabricflow import streams
from processors.logic.engine import Output
from schemas.outputs import encode_outputs, plain

from .core import ReplayError


def output_records(outputs: Iterable[Output]) -> list[dict]:
    """``[{"kind", "key", "value"}]`` with plain JSON-compatible values."""
    return [{"kind": o.kind, "key": o.key, "value": plain(o.value)} for o in outputs]


def canonical(outputs: Iterable[Output]) -> list[str]:
    """Outputs as sorted JSON lines: compares two runs regardless of output order."""
    return sorted(json.dumps(r, sort_keys=True) for r in output_records(outputs))


def write_report(outputs: Sequence[Output], path: str, meta: Mapping[str, Any] | None = None) -> str:
    """Write every output (kind, key, value) to ``path``: ``.json`` (object with ``replay`` metadata and
    ``outputs``) or ``.parquet`` (columns seq, kind, key, value = JSON text; metadata in the schema)."""
    recs = output_records(outputs)
    low = path.lower()
    if low.endswith(".json"):
        with open(path, "w") as fh:
            json.dump({"replay": dict(meta or {}), "outputs": recs}, fh, indent=1, sort_keys=False)
            fh.write("\n")
        return path
    if low.endswith(".parquet"):
        import pyarrow.parquet as pq

        t = pa.table({
            "seq": pa.array(range(len(recs)), type=pa.int64()),
            "kind": pa.array([r["kind"] for r in recs], type=pa.string()),
            "key": pa.array([r["key"] for r in recs], type=pa.string()),
            "value": pa.array([json.dumps(r["value"], sort_keys=True) for r in recs], type=pa.string()),
        })
        t = t.replace_schema_metadata({b"fabricflow.replay": json.dumps(dict(meta or {})).encode()})
        pq.write_table(t, path, compression="zstd")
        return path
    raise ReplayError(f"--report {path}: use a .json or .parquet file name")


def replay_topic_names(kafka_settings) -> dict[str, str]:
    """Output kind -> replay topic name (``replay_prefix`` + live topic)."""
    return streams.output_topics(kafka_settings, prefix=kafka_settings.topics.replay_prefix)


def encode_output(o: Output) -> bytes:
    """Message value of one output (as the live workers write it)."""
    return encode_outputs(o.kind, [o.value])[0]


def publish(outputs: Sequence[Output], kafka_settings, *, producer=None, producer_settings=None,
            timeout_s: float = 30.0) -> dict[str, int]:
    """Create the ``replay.*`` topics (idempotent) and produce every output to them; returns counts per topic.

    Keys are the outputs' keys; the producer is the live one's (:func:`fabricflow.kafka.producer_config` with
    ``producer_settings``, ``ingest.producer``; its defaults when None), so keys land on the same partitions.
    """
    from confluent_kafka import Producer

    from fabricflow.kafka import ensure_topics, producer_config
    from fabricflow.settings import ProducerSettings
    from fabricflow.streams import TopicSpec, topic_specs

    names = replay_topic_names(kafka_settings)
    live = {s.key: s for s in topic_specs(kafka_settings)}
    specs = [TopicSpec("replay_" + s.name, names[kind], live[s.name].partitions, dict(live[s.name].config),
                       live[s.name].schema, "replay of " + live[s.name].name)
             for kind, s in streams.OUTPUTS.items()]
    ensure_topics(kafka_settings, specs)
    own = producer is None
    if own:
        producer = Producer(producer_config(kafka_settings, producer_settings or ProducerSettings()))
    counts: dict[str, int] = {}
    errors: list[str] = []

    def done(err, _msg):
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    for o in outputs:
        topic = names[o.kind]
        while True:
            try:
                producer.produce(topic, key=o.key.encode(), value=encode_output(o), on_delivery=done)
                break
            except BufferError:
                producer.poll(0.1)
        counts[topic] = counts.get(topic, 0) + 1
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left or errors:
        raise ReplayError(f"publishing to replay topics failed: {left} undelivered"
                          + (f"; {errors[0]}" if errors else ""))
    return counts
