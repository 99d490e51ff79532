"""A simulator scenario as an archive, offline: simulate -> pcap -> ``fabricflow backfill``'s code.

No broker: the scenario's datagrams (with its step marks and changes) are written to a capture and backfilled into
a local archive. The tests (``tests/support/scenario_archives.py``, cached per session) and ``bench/detection.py``'s
compare scoring build their archives with it.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def backfill_scenario(doc: dict, d: Path, seed: int | None = None,
                      duration_s: float | None = None) -> tuple[Path, Path]:
    """Simulate scenario document ``doc`` into ``d/capture.pcap`` and backfill it into ``d/archive``.

    Returns (archive directory, inventory file). The inventory is the scenario document itself (its top-level
    inventory keys), written to ``d/scenario.yaml``.
    """
    from devtools.simulator.engine import Simulation
    from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
    from devtools.simulator.model import scenario_from_dict
    from fabricflow.settings import load_settings
    from replay.backfill import Backfill
    from replay.config import core_factory_from

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
    return d / "archive", inv
