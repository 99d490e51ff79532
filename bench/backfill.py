"""Benchmark: `fabricflow backfill` throughput, records/s and datagrams/s per CPU-second, against decoding alone.

    .venv/bin/python -m bench.backfill [--scenario healthy] [--seconds 300] [--repeat 3]

The scenario is simulated into a capture first (not timed). Then, each repeat: the capture decoded alone
(`ingest.offline.summarize_pcap`, what `fabricflow decode` does: the floor for reading it) and the capture
backfilled into a fresh local archive (ingest pipeline, processors' cores, archive sink and rollups). Prints
CPU seconds (process time, so other work on the machine does not count), records/s and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from devtools.simulator.engine import Simulation
from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
from fabricflow.settings import load_settings
from ingest.offline import summarize_pcap
from replay.backfill import Backfill
from replay.config import core_factory_from


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument("--seconds", type=float, default=300.0, help="scenario seconds to capture")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    inv = REPO / "scenarios" / f"{a.scenario}.yaml"
    with tempfile.TemporaryDirectory(prefix="bench-backfill-") as tmp:
        cap = Path(tmp) / "c.pcap"
        sim = Simulation(a.scenario, duration_s=a.seconds, kinds={"sflow", "netflow9", "ipfix", "marks"})
        n = write_pcap(cap, sim.run(), sources=DistinctSources())
        print(f"capture: {a.scenario}, {a.seconds:.0f} s of scenario, {n} datagrams, {cap.stat().st_size / 1e6:.1f} MB")
        for r in range(a.repeat):
            t0 = time.process_time()
            sm = summarize_pcap(cap)
            dec = time.process_time() - t0
            records = sum(sm.flows.values())
            s = load_settings(None)
            t0 = time.process_time()
            st = Backfill(s, str(cap), root=f"{tmp}/a{r}",
                          core_factory=core_factory_from(s.processors, inventory=str(inv))).run()
            bf = time.process_time() - t0
            print(f"run {r + 1}: decode only {dec:.2f} CPU-s ({records / dec:,.0f} records/s); backfill {bf:.2f} "
                  f"CPU-s ({st.flow_records / bf:,.0f} records/s, {st.datagrams / bf:,.0f} datagrams/s, "
                  f"{st.files_written} files); backfill / decode = {bf / dec:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
