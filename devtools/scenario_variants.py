"""Variants of a shipped scenario file for the detection bench (bench/detection.py, docs/detection-quality.md)."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

__all__ = ["born_broken_file"]


def born_broken_file(name: str | Path, state_dir: Path) -> Path | None:
    """The scenario with every fault active from its job's start (issue 31: a job launched broken has no normal
    past): each fault's ``start_s`` becomes the start of the workload it names (job, or a node of it), else 0;
    its ``end_s`` stays. None when the scenario has no fault. Written to ``state_dir``."""
    scen = yaml.safe_load(Path(name).read_text())
    sim = scen["simulation"]
    faults = sim.get("faults") or []
    if not faults:
        return None
    starts: dict[str, float] = {}
    for w in sim.get("workloads", []):
        members = next((j.get("nodes", []) for j in scen.get("jobs", []) if j.get("name") == w.get("job")), [])
        for key in [w.get("job"), *members]:
            if key:
                starts[key] = min(starts.get(key, math.inf), float(w.get("start_s", 0.0)))
    for f in faults:
        named = [f.get(k) for k in ("job", "node", "destination", "src", "replica")] + list(f.get("nodes") or [])
        start = min((starts[k] for k in named if isinstance(k, str) and k in starts), default=0.0)
        f["start_s"] = start if start < float(f["end_s"]) else 0.0
    sim["name"] = f"{sim.get('name', Path(name).stem)}-born-broken"
    sim["description"] = f"{sim.get('description', '')} (born broken: every fault active from its job's start)"
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    out = state_dir / f"{Path(name).stem}-born-broken.yaml"
    out.write_text(yaml.safe_dump(scen, sort_keys=False))
    return out
