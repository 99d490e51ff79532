"""Archives of simulator scenarios for tests, built offline: simulate -> pcap -> ``fabricflow backfill``'s code.

No broker: the scenario's datagrams (with its step marks and changes) are written to a capture and backfilled into
a local archive, once per (scenario, seed, duration) and test session. ``constant_faults(name)`` turns a scenario
into one "without a change": every fault spans the whole run, so nothing changes between any two periods.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import yaml

from tests.fixtures_path import REPO

_CACHE: dict[str, tuple[Path, Path]] = {}


def scenario_doc(name: str) -> dict:
    return yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())


def constant_faults(name: str, duration_s: float | None = None) -> dict:
    """The scenario with every fault active from start to end and no changes (a run where nothing changes)."""
    doc = copy.deepcopy(scenario_doc(name))
    sim = doc["simulation"]
    dur = float(duration_s or sim.get("duration_s", 300))
    sim["duration_s"] = dur
    for f in sim.get("faults") or []:
        f["start_s"], f["end_s"] = 0, dur + 60
    sim.pop("changes", None)
    sim["name"] = f"{sim.get('name', name)}-constant"
    return doc


def build(tmp_root: Path, doc: dict, seed: int | None = None, duration_s: float | None = None) -> tuple[Path, Path]:
    """(archive directory, inventory file) of one scenario document, backfilled once per session."""
    from devtools.simulator.engine import Simulation
    from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
    from devtools.simulator.model import scenario_from_dict
    from fabricflow.settings import load_settings
    from replay.backfill import Backfill
    from replay.config import core_factory_from

    key = hashlib.sha256(json.dumps([doc, seed, duration_s], sort_keys=True, default=str).encode()).hexdigest()[:16]
    if key in _CACHE:
        return _CACHE[key]
    d = tmp_root / key
    d.mkdir(parents=True, exist_ok=True)
    inv = d / "scenario.yaml"
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    scen = scenario_from_dict(doc, str(inv))
    sim = Simulation(scen, seed=seed, duration_s=duration_s, kinds={"sflow", "netflow9", "ipfix", "marks"})
    pcap = d / "capture.pcap"
    write_pcap(pcap, sim.run(), sources=DistinctSources())
    settings = load_settings(None, archive={"url": f"file://{d / 'archive'}"})
    Backfill(settings, str(pcap), root=str(d / "archive"),
             core_factory=core_factory_from(settings.processors, inventory=str(inv))).run()
    _CACHE[key] = (d / "archive", inv)
    return _CACHE[key]


def start_ms(doc: dict) -> int:
    from devtools.simulator.model import parse_time_ms

    return parse_time_ms(doc["simulation"]["start"]) // 1000 * 1000
