"""A processor worker: the stages, the shards and the checkpoint put together.

:class:`Processors` is what the Faust wiring (:func:`processors.worker.faust_app.make_app`) drives and what
the tests and the benchmark call without Faust; :mod:`processors.worker.run` builds both and runs them.
"""

from __future__ import annotations

import logging

from fabricflow.service import Service
from fabricflow.settings import Settings
from fabricflow.streams import topic_of
from schemas.registry import encode_record

from ..config_files import (
    ConfigFiles,
    ConfigFileWatcher,
    load_categories_file,
    load_config_files,
    load_inventory_file,
    load_policy_file,
)
from ..jobsource import LiveJobs
from ..logic.core import ProcessorCore, engine_config
from ..logic.enrich.inventory import Inventory
from .checkpoint import Checkpoint
from .detect import Detect
from .metrics import ProcessorMetrics
from .prepare import Prepare, ReuseCache
from .publish import OutputPublisher
from .shard import Shards

log = logging.getLogger("fabricflow.processors")


class Processors:
    """One worker: ``prepare`` and ``detect`` over this worker's shards, checkpointed to the Faust table."""

    def __init__(self, settings: Settings, inventory: Inventory | None = None, files: ConfigFiles | None = None):
        self.settings = s = settings
        p = s.processors
        self.config = engine_config(p)
        # Inventory, policy and category rules: loaded (and checked) once here, or by run_processors before it
        # connects; re-read every inventory_reload_s by on_tick, a bad version keeps the last good one.
        files = files if files is not None else load_config_files(p)
        self.watchers = {
            name: ConfigFileWatcher(path, loader, p.inventory_reload_s, initial=getattr(files, name))
            for name, path, loader in (("inventory", p.inventory, load_inventory_file), ("policy", p.policy, load_policy_file),
                                       ("categories", p.categories, load_categories_file))
            if path
        }
        self.policy = files.policy  # a PolicyConfig (None: built-in defaults)
        self.rules = files.categories  # CategoryRules (None: built-in defaults)
        self.inventory = inventory or files.inventory or Inventory.empty()
        self.publisher = OutputPublisher(s)
        self.metrics = ProcessorMetrics()
        # stalled when the timer (every tick_s) has not run for a while: the event loop is stuck
        self.service = Service("processors", self.metrics.registry, stall_s=max(30.0, 10 * p.tick_s))
        self.service.add_check("batches", lambda: self.metrics.healthy() or self.metrics.last_error)
        self.checkpoint = Checkpoint(self.publisher, self.metrics, p.snapshot_every_messages, p.snapshot_interval_s,
                                     before_commit=self.prepare_pending)
        self.shards = Shards(self._new_core, self.checkpoint.load)
        self.reuse = ReuseCache(p.reuse_enriched_records, self.inventory)
        self.prepare = Prepare(s, ProcessorCore(self.inventory, self.config, rules=self.rules,
                                                observation=p.observation_exporters),
                               self.shards, self.reuse,
                               self.publisher, self.metrics)
        self.detect = Detect(s, self.shards, self.reuse, self.publisher, self.metrics)
        # Live job membership (processors.jobs.source kubernetes / slurm): a thread reports, on_tick applies
        self.live_jobs: LiveJobs | None = None
        if p.jobs.source != "file":
            self.live_jobs = LiveJobs(p.jobs, self.inventory, registry=self.metrics.registry)
            self.service.add_note("jobs source", self.live_jobs.note)

    def start_live_jobs(self) -> None:
        """Start the live job source's thread (``fabricflow process``; tests drive :meth:`apply_live_jobs`)."""
        if self.live_jobs is not None:
            self.live_jobs.start()
            self.service.on_stop(self.live_jobs.stop, "jobs source")

    def _new_core(self) -> ProcessorCore:
        p = self.settings.processors
        return ProcessorCore(self.inventory, self.config, self.policy, rules=self.rules,
                             detector_protocols=p.detector_protocols, observation=p.observation_exporters)

    @property
    def state(self):
        """The ``core-state`` table (a dict in tests)."""
        return self.checkpoint.store

    @state.setter
    def state(self, store) -> None:
        self.checkpoint.store = store

    # ------------------------------------------------------------------ what the agents and timers call

    def handle_raw(self, topic: str, key: bytes | None, value: bytes, partition: int = -1, offset: int = -1) -> None:
        """One raw message (:meth:`Prepare.handle_many` of one)."""
        self.prepare.handle_many([(topic, key, value, partition, offset)])

    def handle_raw_many(self, items) -> None:
        self.prepare.handle_many(items)

    def prepare_pending(self) -> None:
        self.prepare.prepare_taken()

    def handle_shuffle(self, partition: int, offset: int, value: bytes, source: tuple | None = None,
                       segments: list | None = None, state_only: bool = False) -> bool:
        return self.detect.handle(partition, offset, value, source, segments, state_only=state_only)

    def handle_shuffle_events(self, events, generation: int | None = None) -> None:
        self.detect.handle_events(events, generation)

    def write_due_snapshots(self, now: float, force: bool = False) -> list:
        """Write the due snapshots (every pending one with ``force``); return the events now covered."""
        return self.checkpoint.commit_due(self.shards, now, force)

    def apply_waiting_counters(self) -> None:
        self.detect.apply_waiting_counters()

    def core_for(self, partition: int) -> ProcessorCore:
        """The shard's core (created, and restored from its snapshot, on first use)."""
        return self.shards.active(partition).core

    def on_tick(self, now_ms: int) -> None:
        """Timer: reload the configuration files that changed, apply the live job membership, then :meth:`Detect.tick`."""
        self.reload_config_files(now_ms / 1000.0)
        self.apply_live_jobs(now_ms / 1000.0)
        self.detect.tick(now_ms)

    def apply_live_jobs(self, now_s: float) -> None:
        """What the live job source reported since the last tick: a new inventory (the file's with the live jobs)
        to every core; the changed memberships (and an hourly snapshot) to ``inventory.jobs.v1`` for replay."""
        live = self.live_jobs
        if live is None:
            return
        inv = live.poll(now_s)
        if inv is not None:
            self._apply("inventory", inv)
        rows = live.version_rows(int(now_s * 1000))
        if rows:
            topic = topic_of(self.settings.kafka, "jobs")
            for row in rows:
                self.publisher.produce(topic, row["source"].encode(), encode_record("job_membership", row))

    def reload_config_files(self, now_s: float) -> None:
        """Re-read the inventory, policy and category rules files that changed; a bad one keeps the last good
        version, is logged in one line and counted (``fabricflow_processors_config_reloads_total{result="error"}``)."""
        for name, w in self.watchers.items():
            errors = w.errors_total
            if w.maybe_reload(now_s):
                if name == "inventory" and self.live_jobs is not None:
                    self.live_jobs.set_base(w.value)  # applied with the live jobs by apply_live_jobs
                else:
                    self._apply(name, w.value)
                self.metrics.config_reloads.labels(name, "ok").inc()
                if name == "inventory":
                    self.metrics.reloads.labels("ok").inc()
                log.info("%s reloaded from %s", name, w.path)
            elif w.errors_total > errors:
                self.metrics.config_reloads.labels(name, "error").inc()
                if name == "inventory":
                    self.metrics.reloads.labels("error").inc()
                log.warning("%s not reloaded, the previous version stays in use: %s", name, w.last_error)

    def _apply(self, name: str, value) -> None:
        """A reloaded file's value to the prepare core and every shard's core (new shards get it too)."""
        cores = [self.prepare.core, *(shard.core for shard in self.shards if shard.core is not None)]
        if name == "inventory":
            self.inventory = self.reuse.inventory = value
            for core in cores:
                core.set_inventory(value)
        elif name == "policy":
            self.policy = value
            for core in cores[1:]:
                core.set_policy(value)
        elif name == "categories":
            self.rules = value
            for core in cores:
                core.set_rules(value)
        for shard in self.shards:  # rows kept by prepare were enriched with the previous version
            self.reuse.forget(shard)

    async def revoke(self, partitions: list[int], changelog_producer) -> None:
        """Shuffle partitions revoked: drop their shards at once (events of them still in Faust's buffers are
        not applied), then hand their state over (:meth:`Checkpoint.hand_over`)."""
        if self.shards.assigned is not None:
            self.shards.assigned.difference_update(partitions)
        dropped = []
        for part in partitions:
            shard = self.shards.drop(part)
            if shard is not None:
                self.reuse.forget(shard)
                dropped.append(shard)
        await self.checkpoint.hand_over(dropped, changelog_producer, revoked=bool(partitions))
