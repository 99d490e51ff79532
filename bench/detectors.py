"""Benchmark: records/s through Engine.process_flows on realistic enriched batches.

Synthetic cluster: ``--nodes`` GPU nodes in jobs of ``--job-size`` doing ring
collectives (RoCEv2 / collective), plus storage reads/writes, DNS, management
and a few unknown hosts; sFlow-like 1-in-4096 sampling; event time advancing
so main (10 s) and incast (1 s) windows keep closing. Batches are built before
timing; the timed part is process_flows only (windows, all flow detectors).

Run: .venv/bin/python -m bench.detectors [--batches 60 --batch-size 10000]
Target: >= 300,000 records/s on one core.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
from processors.logic.engine import Engine
from tests.support.flows import make_batches

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--job-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=10_000)
    ap.add_argument("--stream-rate", type=int, default=5_000, help="records per second of event time")
    args = ap.parse_args()
    batches = make_batches(args.nodes, args.job_size, args.batches, args.batch_size, args.stream_rate)
    engine = Engine()
    engine.process_flows(batches[0])  # warm-up (interner, imports)
    outputs = 0
    start = time.perf_counter()
    cpu0 = time.process_time()
    for b in batches[1:]:
        outputs += len(engine.process_flows(b))
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    n = sum(len(b) for b in batches[1:])
    print(f"records: {n}  batches: {len(batches) - 1} x {args.batch_size}  outputs: {outputs}")
    print(f"process_flows: {n / elapsed:,.0f} records/s wall ({elapsed:.2f} s), {n / cpu:,.0f} per CPU-second")
    print(f"stats: {engine.stats}")


if __name__ == "__main__":
    main()
