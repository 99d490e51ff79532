"""A simulated scenario through the pipeline's own code with no broker, sockets or clock: for scoring many seeds.

The simulator's datagrams, in event-time order, go through the ingest pipeline (:class:`IngestPipeline`, the
live decoders and batching; each datagram received at its event time from its device's own address), then
every ``slice_ms`` of event time the batches go through the processors' cores (:func:`replay.core.replay_batches`,
the live sharding, ``partitions`` shards). Deterministic: a scenario, seed and settings give the same outputs
every run. ``bench/detection.py --offline`` scores these outputs with the live bench's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devtools.simulator.engine import Simulation
from devtools.simulator.model import find_scenario, load_scenario
from fabricflow.settings import load_settings
from ingest.metrics import IngestMetrics
from ingest.pipeline import IngestPipeline
from processors.logic.engine import Output
from replay.config import core_factory_from
from replay.core import replay_batches

__all__ = ["OfflineRun", "run_offline", "offline_settings"]


class _Collect:
    """An ingest sink that keeps the batches."""

    def __init__(self):
        self.flows: list[np.ndarray] = []
        self.counters: list[np.ndarray] = []
        self.discards: list[np.ndarray] = []

    def publish_flows(self, exporter: str, arr: np.ndarray) -> None:
        self.flows.append(arr)

    def publish_counters(self, exporter: str, arr: np.ndarray) -> None:
        self.counters.append(arr)

    def publish_discards(self, exporter: str, arr: np.ndarray) -> None:
        self.discards.append(arr)

    def publish_dlq(self, *args) -> None:  # undecodable datagrams: counted by the pipeline's metrics
        pass


@dataclass
class OfflineRun:
    scenario: str
    seed: int
    outputs: list[Output]
    truth: list[dict]
    datagrams: int


def offline_settings(extra: dict | None = None):
    """The settings of an offline run: the traffic detectors on sFlow only, as the detection bench runs them
    (``extra``: more overrides per section, e.g. ``{"processors": {"detectors": {...}}}``)."""
    processors = {"detector_protocols": ["sflow5"]}
    over = dict(extra or {})
    processors.update(over.pop("processors", {}))
    return load_settings(None, processors=processors, **over)


def run_offline(scenario: str | Path, seed: int | None = None, *, duration_s: float | None = None,
                start_ms: int | None = None, settings=None, partitions: int = 1, slice_ms: int = 1000,
                policy=None) -> OfflineRun:
    """Outputs of the processors for one simulated run, and its truth lines (``policy``: a policy dict or file
    for the policy rules, else the settings')."""
    path = find_scenario(str(scenario))
    scen = load_scenario(path)
    sim = Simulation(scen, seed=seed, start_ms=start_ms, duration_s=duration_s)
    settings = settings or offline_settings()
    addr = {s.name: s.agent for s in scen.cluster.switches.values()}
    addr.update({fe.name: fe.agent for fe in scen.flow_exporters})
    sink = _Collect()
    pipe = IngestPipeline(settings.ingest, sink, IngestMetrics())
    flows: list[np.ndarray] = []
    counters: list[np.ndarray] = []

    def drain() -> None:
        pipe.flush()
        flows.extend(f for f in sink.flows if len(f))
        counters.extend(c for c in sink.counters if len(c))
        sink.flows.clear()
        sink.counters.clear()

    n = 0
    edge = None
    for dg in sim.run():
        if edge is None:
            edge = dg.send_time_ms // slice_ms * slice_ms + slice_ms
        while dg.send_time_ms >= edge:
            drain()
            edge += slice_ms
        pipe.handle(dg.data, addr.get(dg.exporter, "127.0.0.1"), dg.send_time_ms)
        n += 1
    drain()
    factory = core_factory_from(settings.processors, inventory=str(path), policy=policy)
    outputs = replay_batches(flows, counters, factory, partitions)
    return OfflineRun(scen.name, sim.seed, outputs, list(sim.truth.lines()), n)
