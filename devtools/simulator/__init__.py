"""Cluster traffic simulator: scenario YAML -> sFlow v5 / NetFlow v9 / IPFIX datagrams + ground truth.

    from devtools.simulator import generate, load_scenario
    truth = []
    for send_time_ms, kind, datagram in generate("healthy", seed=1, truth=truth):
        ...
    truth[0].write("truth.jsonl")

:func:`generate` is pure (no sockets, no clock); :mod:`.sender` puts its output on UDP
(loopback only unless allowed) and :func:`.cli.run_simulate` is the CLI entry point.
"""

from .engine import SimDatagram, Simulation, generate
from .model import Cluster, Scenario, ScenarioError, find_scenario, load_scenario, scenario_from_dict

__all__ = [
    "Cluster",
    "Scenario",
    "ScenarioError",
    "SimDatagram",
    "Simulation",
    "find_scenario",
    "generate",
    "load_scenario",
    "scenario_from_dict",
]
