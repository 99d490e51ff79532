"""Prometheus metrics of a processor worker (``fabricflow_processors_*``, docs/operations.md lists them)."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("fabricflow.processors")


class ProcessorMetrics:
    """The worker's metrics in their own registry, served on ``processors.metrics_port``; plus the last error."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        r = self.registry = CollectorRegistry()
        self.records = Counter("fabricflow_processors_records_total", "Flow records enriched", registry=r)
        self.unknown = Counter("fabricflow_processors_unknown_addresses_total", "Addresses not in the inventory (labelled unknown, kept)", registry=r)
        self.counters = Counter("fabricflow_processors_counter_samples_total", "sFlow counter samples processed", registry=r)
        self.outputs = Counter("fabricflow_processors_outputs_total", "Detector outputs produced", ["kind"], registry=r)
        self.too_late = Gauge("fabricflow_processors_too_late_records", "Records that arrived after their window closed (per worker, since start)", ["window"], registry=r)
        self.errors = Counter("fabricflow_processors_errors_total", "Batches skipped because processing failed", ["stage"], registry=r)
        self.duplicates = Counter("fabricflow_processors_duplicate_batches_total", "Shuffle batches skipped because their raw batch was already applied (re-produced after a restart)", registry=r)
        self.undecodable = Counter("fabricflow_processors_undecodable_messages_total", "Messages that are not fabricflow batches", ["topic"], registry=r)
        self.shards = Gauge("fabricflow_processors_shards", "Detector shards (shuffle partitions) owned by this worker", registry=r)
        self.shuffle_messages = Counter("fabricflow_processors_shuffle_messages_total", "Shuffle messages applied to a detector shard", registry=r)
        self.detect_records = Counter("fabricflow_processors_detect_records_total", "Flow records applied to a detector shard", registry=r)
        self.reused = Counter("fabricflow_processors_reused_batches_total", "Shuffle flow batches whose records prepare had enriched in this worker (not decoded and enriched again)", registry=r)
        self.snapshots = Counter("fabricflow_processors_snapshots_total", "Shard state snapshots written to the core-state table", registry=r)
        self.unsnapshotted = Gauge("fabricflow_processors_unsnapshotted_messages", "Shuffle messages applied but not yet covered by a snapshot (not acked)", registry=r)
        self.reloads = Counter("fabricflow_processors_inventory_reloads_total", "Inventory reloads", ["result"], registry=r)
        self.last_error: str | None = None
        self.last_error_at = 0.0

    def failed(self, stage: str, e: Exception) -> None:
        """A batch of ``stage`` raised: count it, log it, and mark the worker unhealthy for a while."""
        self.errors.labels(stage).inc()
        self.last_error = f"{stage}: {type(e).__name__}: {e}"
        self.last_error_at = time.monotonic()
        log.exception("%s failed on a batch; it is skipped and counted", stage)

    def count_outputs(self, outs) -> None:
        if not outs:
            return
        kinds: dict[str, int] = {}
        for o in outs:
            kinds[o.kind] = kinds.get(o.kind, 0) + 1
        for kind, n in kinds.items():
            self.outputs.labels(kind).inc(n)

    def healthy(self, window_s: float = 60.0) -> bool:
        """Unhealthy for a minute after a batch failed (the error is in the log and the errors counter)."""
        return self.last_error is None or time.monotonic() - self.last_error_at > window_s
