"""The one catalog of fabricflow's Kafka streams.

Each :class:`Stream` says what a topic carries (kind, Avro schema, what its key
means), where it is archived (dataset, row schema, event-time column) and how
long it is kept. The topic settings (``kafka.topics``), the topic list, the archive's
datasets, the processors' output schemas and replay's tables are all derived from
:data:`STREAMS`: adding an output kind means one entry here and its producer.

Topics are created from it (:func:`fabricflow.kafka.ensure_topics`) idempotently with their final
partition count (the embedded broker cannot add partitions later). Compaction is never relied on.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

DAY_MS = 86_400_000


class TopicSettings(Protocol):
    """What this module reads of the ``kafka`` settings (:class:`fabricflow.settings.KafkaSettings`, whose
    ``kafka.topics`` are built from this catalog: this module does not import settings)."""

    @property
    def topics(self) -> Any: ...

    @property
    def partitions(self) -> int: ...


@dataclass(frozen=True)
class Stream:
    """One Kafka stream of fabricflow.

    ``name``: the setting ``kafka.topics.<name>`` (:class:`fabricflow.settings.TopicNames`, built from this
    catalog) holding the topic name; ``topic``: its default; ``about``: its description in docs/configuration.md.
    ``schema``: Avro schema of a message value ("" = raw bytes); ``batch``: the value is a columnar batch.
    ``output``: processor output kind published here (``Output.kind``), if any.
    ``dataset``/``row_schema``/``time_column``: the archive dataset, the Avro schema of one archived row and
    its event-time column (unix ms); no dataset = not archived.
    ``topic_days``: Kafka retention; ``archive_days``: default archive retention (None = forever).
    ``event_kind``: what the hourly summaries count of it (``sinks.archive.summaries``), if anything.
    """

    name: str
    schema: str
    key: str
    doc: str
    batch: bool = False
    output: str | None = None
    dataset: str | None = None
    row_schema: str | None = None
    time_column: str | None = None
    topic_days: int = 30
    archive_days: int | None = 90
    event_kind: str | None = None
    partitions: int | None = None  # None = kafka.partitions
    internal: bool = False
    topic: str = field(kw_only=True)
    about: str = field(kw_only=True)


STREAMS: tuple[Stream, ...] = (
    Stream("flows_raw", "flow_batch", "exporter address", "FlowBatch per message (records of one datagram or a bounded batch)",
           batch=True, dataset="flows_raw", row_schema="flow_record", time_column="time_end_ms", topic_days=7, archive_days=7,
           topic="flows.raw.v1", about="Decoded flow records (batched, Avro) from ingest"),
    Stream("counters_raw", "counter_batch", "exporter address", "CounterBatch per message (sFlow counter samples)",
           batch=True, dataset="counters_raw", row_schema="counter_sample", time_column="time_received_ms", topic_days=7,
           archive_days=30,
           topic="counters.raw.v1", about="Decoded sFlow counter samples from ingest"),
    Stream("discards_raw", "discard_batch", "exporter address", "DiscardedPacketBatch per message (sFlow dropped "
           "packet notifications: where, why, what)", batch=True, dataset="discards_raw", row_schema="discarded_packet",
           time_column="time_received_ms", topic_days=7, archive_days=30,
           topic="discards.raw.v1", about="Decoded sFlow dropped-packet notifications from ingest (never traffic)"),
    Stream("dlq", "", "exporter address", "capped sample of undecodable datagrams; headers exporter/protocol/reason",
           topic_days=7, partitions=1,
           topic="ingest.dlq.v1", about="Capped sample of undecodable datagrams (raw bytes + reason headers)"),
    Stream("flows_enriched", "flow_enriched_batch_v2", "exporter address",
           "EnrichedFlowBatch v2 per message (labels dictionary-coded: a string table per message, int codes per record)",
           batch=True, dataset="flows_enriched", row_schema="flow_enriched", time_column="time_end_ms", topic_days=7,
           archive_days=30,
           topic="flows.enriched.v2", about="Flows with inventory and app-category enrichment (labels dictionary-coded)"),
    Stream("flows_enriched_v1", "flow_enriched_batch", "exporter address",
           "EnrichedFlowBatch per message (label strings per record); written only with processors.publish_v1",
           batch=True, topic_days=7,
           topic="flows.enriched.v1", about="Deprecated: flows.enriched.v2 with label strings per record, for "
           "consumers not yet on v2; published only with processors.publish_v1 (removed in the next release)"),
    Stream("matrix", "matrix_window_v2", "window|level|shard (|part when split)",
           "MatrixWindow per message: the cells of one window, level and shard as columns (names dictionary-coded)",
           output="matrix", dataset="matrix_windows", row_schema="matrix_cell", time_column="window_start_ms",
           topic="matrix.windows.v2", about="Traffic-matrix cells per window (one columnar message per window, "
           "level and shard)"),
    Stream("matrix_v1", "matrix_cell", "window|level|src|dst|category|shard",
           "one traffic-matrix cell per message; written only with processors.publish_v1",
           topic="matrix.windows.v1", about="Deprecated: matrix.windows.v2 as one message per cell, for consumers "
           "not yet on v2; published only with processors.publish_v1 (removed in the next release)"),
    Stream("incast", "incast_event", "destination", "incast detections", output="incast", dataset="incast_events",
           row_schema="incast_event", time_column="window_start_ms", event_kind="incast",
           topic="incast.events.v1", about="Incast detections"),
    Stream("straggler", "straggler_score", "job", "straggler scores per job/window/node", output="straggler",
           dataset="straggler_scores", row_schema="straggler_score", time_column="window_start_ms", event_kind="straggler",
           topic="straggler.scores.v1", about="Straggler scores per job/window/node"),
    Stream("link_health", "link_health", "switch|ifIndex", "link health samples and events from counters", output="link",
           dataset="link_health", row_schema="link_health", time_column="time_ms", event_kind="link",
           topic="link.health.v1", about="Link health samples and events from counters"),
    Stream("alerts", "alert", "dedup key", "policy and security alerts", output="alert", dataset="alerts",
           row_schema="alert", time_column="window_start_ms", event_kind="alert",
           topic="alerts.v1", about="Policy and security alerts"),
    Stream("patterns", "pattern", "job", "job patterns: baselines, deviations and the training timeline per window",
           output="pattern", dataset="patterns", row_schema="pattern", time_column="window_start_ms",
           topic="patterns.v1",
           about="Job patterns: baselines, deviations and the training timeline (Avro, pattern.avsc)"),
    Stream("shuffle", "", "shard", "internal: raw flows and counters re-partitioned to detector shards "
           "(processors/worker/shuffle.py)", topic_days=1, internal=True,
           topic="processors.shuffle.v1", about="Internal: raw flows (sharded by their enriched destination job/node) "
           "and counters re-partitioned to detector shards"),
    Stream("quality", "ingest_quality", "exporter address", "data quality per exporter and window from ingest "
           "(records lost by sequence gaps, records without a sampling rate, clock skew, sFlow sampler drops)", dataset="ingest_quality",
           row_schema="ingest_quality", time_column="window_start_ms",
           topic="ingest.quality.v1", about="Data quality per exporter and window from ingest (loss, records "
           "without sampling rate, clock skew)"),
    Stream("changes", "change_mark", "job, else node, else switch, else group pair, else 'cluster'",
           "change markers: what an operator changed and when (fabricflow mark, console POST /api/marks/change)",
           dataset="changes", row_schema="change_mark", time_column="time_ms", topic_days=365, archive_days=None,
           partitions=1,
           topic="changes.v1", about="Change markers (a tuning step, a configuration push) for before/after comparisons"),
    Stream("steps", "step_mark", "job", "training step and phase marks sent by training jobs (ingest marks "
           "listener, console POST /api/marks/step)", dataset="step_marks", row_schema="step_mark",
           time_column="time_ms", topic_days=7, archive_days=90,
           topic="steps.v1", about="Training step and phase marks (step N started/ended, checkpoint, eval) from training jobs"),
    Stream("jobs", "job_membership", "source (kubernetes or slurm)", "live job membership versions: one row per change "
           "of a pod / Slurm job holding nodes, and an hourly snapshot (docs/inventory.md)", dataset="job_memberships",
           row_schema="job_membership", time_column="version_ms", topic_days=30, archive_days=365, partitions=1,
           topic="inventory.jobs.v1", about="Live job membership versions (Kubernetes pods, Slurm jobs) for replay"),
    Stream("summaries", "summary_hourly", "hour start (ms)", "hourly summaries", dataset="summaries_hourly",
           row_schema="summary_hourly", time_column="hour_start_ms", topic_days=365, archive_days=365,
           topic="summaries.hourly.v1", about="Hourly summaries"),
)



@dataclass(frozen=True)
class Derived:
    """An archive dataset derived by the archive sink from another one (no topic of its own).

    ``derived_from``: the dataset whose every written file also gets one file of this dataset, under the
    same file name (``sinks.archive.rollups``); ``bucket_ms``: the time bucket of its rows; ``archive_days``:
    default archive retention (None = forever).
    """

    name: str
    derived_from: str
    bucket_ms: int
    doc: str
    archive_days: int | None = 30


#: Rollups (docs/archive.md, "Rollups"): per-minute and per-hour aggregates written beside the raw files.
DERIVED: tuple[Derived, ...] = (
    Derived("traffic_1m", "flows_enriched", 60_000, "flows_enriched per minute: node pair x category sums",
            archive_days=30),
    Derived("traffic_1h", "flows_enriched", 3_600_000, "flows_enriched per hour: node pair x category sums",
            archive_days=365),
    Derived("ports_1m", "counters_raw", 60_000, "counters_raw per minute: first/last counters per port",
            archive_days=30),
    Derived("ports_1h", "counters_raw", 3_600_000, "counters_raw per hour: first/last counters per port",
            archive_days=365),
)

BY_NAME: dict[str, Stream] = {s.name: s for s in STREAMS}
#: Processor output kind -> its stream.
OUTPUTS: dict[str, Stream] = {s.output: s for s in STREAMS if s.output}
#: Archive dataset -> its stream.
DATASETS: dict[str, Stream] = {s.dataset: s for s in STREAMS if s.dataset}


def topic_of(kafka: TopicSettings, stream: Stream | str) -> str:
    """The configured topic name of a stream (or of a stream name)."""
    s = BY_NAME[stream] if isinstance(stream, str) else stream
    return getattr(kafka.topics, s.name)


def output_topics(kafka: TopicSettings, prefix: str = "") -> dict[str, str]:
    """Processor output kind -> topic name (``prefix`` + name: replay publishes to ``replay.<topic>``)."""
    return {kind: prefix + topic_of(kafka, s) for kind, s in OUTPUTS.items()}


@dataclass(frozen=True)
class TopicSpec:
    key: str  # the stream name (attribute of TopicNames)
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    schema: str = ""  # avsc name of the message value
    doc: str = ""


def topic_specs(kafka: TopicSettings) -> list[TopicSpec]:
    """Every topic of the catalog with its configured name, partition count and retention."""
    return [
        TopicSpec(s.name, topic_of(kafka, s), s.partitions or kafka.partitions,
                  {"retention.ms": str(s.topic_days * DAY_MS)}, s.schema, f"{s.doc}; key = {s.key}")
        for s in STREAMS
    ]


def topic_names(kafka: TopicSettings) -> dict[str, str]:
    return {s.key: s.name for s in topic_specs(kafka)}


def counter_shard(exporter: str | bytes, partitions: int) -> int:
    """The detector shard (shuffle partition) that reports the link health of an exporter's counter samples:
    CRC32 of the exporter address as text (``counters.raw``'s key, as ingest writes it) modulo ``partitions``.

    The one rule for live and replay: the worker's ``prepare`` applies it to the message key, replay to the
    text of each row's ``exporter_addr``. Every other shard keeps the same port state without reporting, so
    which shard reports changes no value; one rule keeps a replay's per-shard work equal to live.
    """
    key = exporter.encode() if isinstance(exporter, str) else bytes(exporter)
    return zlib.crc32(key) % partitions if partitions > 1 else 0
