"""Benchmark: records/s through Engine.process_flows on realistic enriched batches.

Synthetic cluster: ``--nodes`` GPU nodes in jobs of ``--job-size`` doing ring
collectives (RoCEv2 / collective), plus storage reads/writes, DNS, management
and a few unknown hosts; sFlow-like 1-in-4096 sampling; event time advancing
so main (10 s) and incast (1 s) windows keep closing. Batches are built before
timing; the timed part is process_flows only (windows, all flow detectors).

Run: .venv/bin/python bench/detectors.py [--batches 60 --batch-size 10000]
Target: >= 300,000 records/s on one core.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # before bench/ itself: bench/processors.py must not shadow the processors package

from processors.logic.engine import Engine  # noqa: E402
from schemas.columns import FLOW_ABSENT, dtype_for, v4_column_to_addr16  # noqa: E402

ENRICHED = dtype_for("flow_enriched")


def make_batches(nodes: int, job_size: int, batches: int, batch_size: int, records_per_s: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    names = np.array([f"gpu-{i:04d}" for i in range(nodes)] + ["stor-01", "stor-02", "mgmt-01", ""], dtype=object)
    groups = np.array(["gpu"] * nodes + ["storage", "storage", "mgmt", "unknown"], dtype=object)
    jobs = np.array([f"job-{i // job_size:03d}" for i in range(nodes)] + ["", "", "", ""], dtype=object)
    racks = np.array([f"r{i // 16:03d}" for i in range(nodes)] + ["rs", "rs", "rm", ""], dtype=object)
    ips = (np.uint32(10 << 24) + np.arange(len(names), dtype=np.uint32)).astype(np.uint32)
    cats = np.array(["collective", "rocev2", "storage", "dns", "mgmt", "other"], dtype=object)
    out = []
    t0 = 1_800_000_000_000
    for b in range(batches):
        n = batch_size
        arr = np.zeros(n, dtype=ENRICHED)
        for k, v in FLOW_ABSENT.items():
            arr[k] = v
        kind = rng.choice(6, size=n, p=[0.45, 0.30, 0.15, 0.03, 0.02, 0.05])
        src = rng.integers(0, nodes, n)
        ring_dst = (src // job_size) * job_size + (src % job_size + 1) % job_size
        dst = np.where(kind <= 1, ring_dst, rng.integers(0, len(names), n))
        dst = np.where(kind == 2, nodes + rng.integers(0, 2, n), dst)
        src = np.where(rng.random(n) < 0.01, len(names) - 1, src)  # some unknown sources
        rate = 4096
        arr["export_protocol"] = 1
        arr["sampling_rate"] = rate
        arr["bytes"] = rng.integers(64, 4200, n)
        arr["packets"] = 1
        arr["bytes_est"] = arr["bytes"] * rate
        arr["packets_est"] = rate
        arr["ip_version"] = 4
        arr["src_addr"] = v4_column_to_addr16(ips[src])
        arr["dst_addr"] = v4_column_to_addr16(ips[dst])
        arr["exporter_addr"] = v4_column_to_addr16(np.full(n, (192 << 24) + 10, dtype=np.uint32))
        arr["ip_protocol"] = 17
        arr["dst_port"] = 4791
        t = t0 + (b * batch_size + np.arange(n)) * 1000 // records_per_s
        arr["time_start_ms"] = t
        arr["time_end_ms"] = t
        arr["time_received_ms"] = t
        arr["time_export_ms"] = t
        arr["src_node"], arr["dst_node"] = names[src], names[dst]
        arr["src_group"], arr["dst_group"] = groups[src], groups[dst]
        arr["src_rack"], arr["dst_rack"] = racks[src], racks[dst]
        arr["src_switch"], arr["dst_switch"] = racks[src], racks[dst]
        arr["src_job"], arr["dst_job"] = jobs[src], jobs[dst]
        arr["category"] = cats[kind]
        out.append(arr)
    return out


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
