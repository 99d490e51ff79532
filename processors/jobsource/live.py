"""Live job membership for a service: a scheduler source in a thread, applied on the service's timer.

:class:`LiveJobs` starts the source (:mod:`.kubernetes` or :mod:`.slurm`) in a daemon thread. The source
only reports what it saw through a :class:`Feed` (a queue); the owner calls :meth:`LiveJobs.poll` from its
own timer, which applies the reports to the pure :class:`~processors.logic.enrich.inventory.membership.MembershipBook`
and returns a new :class:`Inventory` when the membership changed: the file's inventory (``set_base`` when it
is reloaded) with the live jobs in place of its ``jobs:``. A source that fails keeps the last good membership;
:meth:`LiveJobs.note` says so for ``/healthz``. Metrics: ``fabricflow_inventory_source_*``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from fabricflow.jobs_settings import JobsSettings
from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import Holding, MembershipBook, holding_row

from .feed import Feed, SourceMetrics
from .kubernetes import KubernetesSource
from .slurm import SlurmSource

__all__ = ["LiveJobs", "make_source"]

log = logging.getLogger("fabricflow.jobsource")


def make_source(settings: JobsSettings):
    """The source object of the settings (``run(feed, stop_event)``); ValueError (one line) when it cannot be made."""
    if settings.source == "kubernetes":
        return KubernetesSource(settings.kubernetes, settings.backoff_max_s)
    if settings.source == "slurm":
        return SlurmSource(settings.slurm, settings.backoff_max_s)
    raise ValueError(f"processors.jobs.source {settings.source!r} is not a live source")


class LiveJobs:
    """A live job source applied to a base inventory (see the module's doc)."""

    def __init__(self, settings: JobsSettings, base: Inventory, registry=None, source=None,
                 clock: Callable[[], float] = time.time):
        from prometheus_client import CollectorRegistry

        self.settings = settings
        self.name = settings.source
        self.base = base
        self.book = MembershipBook(int(settings.keep_ended_s * 1000))
        self.metrics = SourceMetrics(registry if registry is not None else CollectorRegistry(), self.name)
        self.feed = Feed(self.metrics, clock)
        self.source = source if source is not None else make_source(settings)
        self.clock = clock
        self.inventory: Inventory | None = None  # None until the first complete view arrived
        self.last_error: str | None = None
        self.unknown_hosts: list[str] = []
        self._applied = (-1, base)
        self._next_snapshot_ms = -1
        self._synced = False  # a first complete view arrived: until then the file's jobs: stay in use
        self._changed: dict[str, Holding | None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"jobs-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.source.run(self.feed, self._stop)
        except Exception as e:  # a bug in a source must not pass silently: report, the last membership stays
            log.exception("job source %s stopped", self.name)
            self.feed.error(f"stopped: {type(e).__name__}: {e}")

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def set_base(self, base: Inventory) -> None:
        """The inventory file was reloaded: the next :meth:`poll` applies the membership to it."""
        self.base = base
        self._applied = (-1, None)

    def poll(self, now_s: float | None = None) -> Inventory | None:
        """Apply what the source reported; the new inventory when the membership (or the base) changed."""
        now_ms = int((self.clock() if now_s is None else now_s) * 1000)
        while True:
            try:
                op = self.feed.q.get_nowait()
            except queue.Empty:
                break
            self._apply_op(op)
        self.book.prune(now_ms)
        if not self._synced:  # no complete view yet: the file's inventory (with its jobs:) stays in use
            if self._applied[1] is self.base:
                return None
            self._applied = (-1, self.base)
            return self.base
        if self._applied == (self.book.version, self.base):
            return None
        try:
            inv, self.unknown_hosts = self.book.apply_to(self.base, self._with_addresses())
        except ValueError as e:  # e.g. a pod IP in the file's inventory in another form: keep the last good one
            self._error(f"membership not applied: {str(e).splitlines()[0]}")
            self._applied = (self.book.version, self.base)
            return None
        self._applied = (self.book.version, self.base)
        self.metrics.memberships.set(len(self.book.holdings))
        self.metrics.unknown_hosts.set(len(self.unknown_hosts))
        self.metrics.version.set(self.book.version)
        self.inventory = inv
        return inv

    def _with_addresses(self) -> bool:
        return self.name == "kubernetes" and self.settings.kubernetes.pod_addresses

    def _apply_op(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "relist":
            before = dict(self.book.holdings)
            if self.book.relist(op[1], op[2]):
                self._note_changes(before)
        elif kind == "upsert":
            if self.book.upsert(op[1]):
                self._changed[op[1].key] = op[1]
        elif kind == "end":
            if self.book.end(op[1], op[2]):
                self._changed[op[1]] = self.book.holdings[op[1]]
        elif kind == "ok":
            self._synced = True
            if self.last_error is not None:
                log.info("job source %s is back", self.name)
            self.last_error = None
        elif kind == "error":
            self._error(op[1])

    def _note_changes(self, before: dict[str, Holding]) -> None:
        for k, h in self.book.holdings.items():
            if before.get(k) != h:
                self._changed[k] = h

    def _error(self, message: str) -> None:
        if message != self.last_error:
            log.warning("job source %s: %s (the last good membership stays in use)", self.name, message)
        self.last_error = message

    def take_changes(self) -> list[Holding]:
        """Holdings changed since the last call (for the membership versions topic)."""
        out = [h for h in self._changed.values() if h is not None]
        self._changed.clear()
        return out

    def version_rows(self, now_ms: int, snapshot_every_ms: int = 3_600_000) -> list[dict]:
        """``job_membership`` rows to publish now: every holding (a snapshot) at the first call after the first
        complete view and then every ``snapshot_every_ms``, else the holdings changed since the last call."""
        if not self._synced:
            return []
        if now_ms >= self._next_snapshot_ms:
            self._next_snapshot_ms = now_ms + snapshot_every_ms
            self._changed.clear()
            return [holding_row(h, self.name, now_ms, snapshot=True) for h in self.book.holdings.values()]
        return [holding_row(h, self.name, now_ms) for h in self.take_changes()]

    def note(self) -> str | None:
        """For ``/healthz``: why the membership in use may be stale, None when current."""
        if self.last_error is None and self.inventory is not None:
            return None
        if self.inventory is None:
            why = self.last_error or "waiting for the first listing"
            return f"{self.name}: {why}; no live jobs yet"
        return f"{self.name}: {self.last_error}; using the last good membership (version {self.book.version})"
