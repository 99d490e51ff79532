"""What a job source reports, and how it is counted: :class:`Feed` (thread-safe), :class:`SourceMetrics`."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from processors.logic.enrich.inventory.membership import Holding

__all__ = ["Feed", "SourceMetrics", "backoff_delays"]


class SourceMetrics:
    """``fabricflow_inventory_source_*`` in ``registry`` (docs/operations.md lists them)."""

    def __init__(self, registry, source: str):
        from prometheus_client import Counter, Gauge

        r = registry
        self.source = source
        self.last_sync = Gauge("fabricflow_inventory_source_last_sync_timestamp_seconds",
                               "When the job source last had a complete, current view (list, poll, or watch event)",
                               ["source"], registry=r).labels(source)
        self.events = Counter("fabricflow_inventory_source_events_total", "What the job source received, by type "
                              "(list, poll, ADDED, MODIFIED, DELETED, BOOKMARK)", ["source", "type"], registry=r)
        self.errors = Counter("fabricflow_inventory_source_errors_total", "Failed lists, watches and polls of the job "
                              "source (the last good membership stays in use)", ["source"], registry=r).labels(source)
        self.restarts = Counter("fabricflow_inventory_source_watch_restarts_total", "Watches started again, by reason "
                                "(expired: 410 Gone, re-listed; closed; error)", ["source", "reason"], registry=r)
        self.memberships = Gauge("fabricflow_inventory_source_memberships", "Pods / jobs the membership holds "
                                 "(running, and ended ones kept for late flows)", ["source"], registry=r).labels(source)
        self.unknown_hosts = Gauge("fabricflow_inventory_source_unknown_hosts", "Scheduler host names that are no "
                                   "inventory node (their jobs are not attributed)", ["source"], registry=r).labels(source)
        self.version = Gauge("fabricflow_inventory_source_version", "Membership versions applied since start",
                             ["source"], registry=r).labels(source)


class Feed:
    """What a source thread reports; thread-safe (a queue the owner drains in :meth:`LiveJobs.poll`)."""

    def __init__(self, metrics: SourceMetrics, clock: Callable[[], float] = time.time):
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.metrics = metrics
        self.clock = clock

    def relist(self, holdings: list[Holding], kind: str = "list") -> None:
        """A complete listing: what is not in it has ended (now)."""
        self.metrics.events.labels(self.metrics.source, kind).inc()
        self.q.put(("relist", holdings, int(self.clock() * 1000)))
        self.synced()

    def upsert(self, holding: Holding, kind: str | None) -> None:
        """A pod / job as it is now (``kind``: the event counted, None = counted already)."""
        if kind:
            self.metrics.events.labels(self.metrics.source, kind).inc()
        self.q.put(("upsert", holding))
        self.synced()

    def end(self, key: str, at_ms: int, kind: str | None) -> None:
        """A pod / job is gone since ``at_ms``."""
        if kind:
            self.metrics.events.labels(self.metrics.source, kind).inc()
        self.q.put(("end", key, at_ms))
        self.synced()

    def event(self, kind: str) -> None:
        """An event that changes no membership (a bookmark, a pod that holds nothing)."""
        self.metrics.events.labels(self.metrics.source, kind).inc()
        self.synced()

    def synced(self) -> None:
        self.metrics.last_sync.set(self.clock())
        self.q.put(("ok",))

    def error(self, message: str) -> None:
        """The source failed (one line); it retries after a backoff."""
        self.metrics.errors.inc()
        self.q.put(("error", message))

    def restart(self, reason: str) -> None:
        self.metrics.restarts.labels(self.metrics.source, reason).inc()


def backoff_delays(max_s: float, first_s: float = 1.0):
    """1, 2, 4, ... seconds, capped at ``max_s`` (an endless generator)."""
    d = first_s
    while True:
        yield min(d, max_s)
        d = min(d * 2, max_s)
