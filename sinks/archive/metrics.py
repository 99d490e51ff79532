"""Prometheus metrics of the archive sink (``fabricflow_sink_*``, listed in docs/archive.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class SinkMetrics:
    """Prometheus metrics of the archive sink (own registry, served by the service's /metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry or CollectorRegistry()
        self.messages = Counter("fabricflow_sink_messages_total", "Kafka messages consumed", ["dataset"], registry=r)
        self.rows_in = Counter("fabricflow_sink_rows_received_total", "Rows decoded from Kafka messages", ["dataset"], registry=r)
        self.rows = Counter("fabricflow_sink_rows_written_total", "Rows written to Parquet", ["dataset"], registry=r)
        self.files = Counter("fabricflow_sink_files_written_total", "Parquet files written", ["dataset"], registry=r)
        self.duplicates = Counter("fabricflow_sink_rows_duplicate_total", "Re-read rows already in the archive (dropped)", ["dataset"], registry=r)
        self.late = Counter("fabricflow_sink_rows_late_total", "Rows for an already closed hour (written to late files)", ["dataset"], registry=r)
        self.undecodable = Counter("fabricflow_sink_undecodable_messages_total", "Messages skipped: not decodable with the topic's schema", ["dataset", "reason"], registry=r)
        self.errors = Counter("fabricflow_sink_errors_total", "Errors by stage (write, commit, produce, kafka)", ["stage"], registry=r)
        self.commits = Counter("fabricflow_sink_commits_total", "Synchronous offset commits", registry=r)
        self.lag = Gauge("fabricflow_sink_commit_lag_records", "Kafka records consumed but not yet committed", ["dataset"], registry=r)
        self.buffered = Gauge("fabricflow_sink_buffered_rows", "Rows buffered, not yet written", ["dataset"], registry=r)
        self.summaries = Counter("fabricflow_sink_summaries_total", "Hourly summaries produced", ["partial"], registry=r)
        self.summary_late = Counter("fabricflow_sink_summary_late_rows_total", "Flow rows for an hour whose summary was already produced", registry=r)
        self.retention_runs = Counter("fabricflow_sink_retention_runs_total", "Scheduled archive retention passes completed", registry=r)
        self.retention_deleted = Counter("fabricflow_sink_retention_deleted_partitions_total", "Archive partitions deleted by retention", registry=r)
        self.retention_errors = Counter("fabricflow_sink_retention_errors_total", "Scheduled archive retention passes that failed (retried next interval)", registry=r)
        self.compaction_runs = Counter("fabricflow_sink_compaction_runs_total", "Scheduled rollup compaction passes completed", registry=r)
        self.compaction_files = Counter("fabricflow_sink_compaction_files_total", "Rollup files merged away by compaction (each into its hour's merged file)", registry=r)
        self.compaction_errors = Counter("fabricflow_sink_compaction_errors_total", "Rollup compactions that failed (a pass, or one hour of one partition; retried next interval)", registry=r)
