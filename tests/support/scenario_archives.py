"""Archives of simulator scenarios for tests (devtools/scenario_archive.py), built once per (scenario, seed,
duration) and test session. ``constant_faults(name)`` turns a scenario
into one "without a change": every fault spans the whole run, so nothing changes between any two periods.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import yaml

from tests.support.fixtures_path import REPO

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
    from devtools.scenario_archive import backfill_scenario

    key = hashlib.sha256(json.dumps([doc, seed, duration_s], sort_keys=True, default=str).encode()).hexdigest()[:16]
    if key in _CACHE:
        return _CACHE[key]
    _CACHE[key] = backfill_scenario(doc, tmp_root / key, seed, duration_s)
    return _CACHE[key]


def start_ms(doc: dict) -> int:
    from devtools.simulator.model import parse_time_ms

    return parse_time_ms(doc["simulation"]["start"]) // 1000 * 1000
