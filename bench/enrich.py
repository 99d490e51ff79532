"""Benchmark: longest-prefix lookups/s and enriched records/s on a synthetic cluster.

    .venv/bin/python -m bench.enrich [--records N] [--nodes N] [--repeat R]

The inventory has N GPU nodes (IPv4 /32 and IPv6 /128 each), storage and
management subnets, cluster ranges and time-bounded jobs; flows pick sources
and destinations among nodes, subnets and unknown addresses.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
from processors.logic.enrich.enricher import Enricher
from processors.logic.enrich.inventory import Inventory
from schemas.columns import empty_flows


def synthetic_inventory(n_nodes: int) -> dict:
    nodes = []
    for i in range(n_nodes):
        rack = i // 32
        nodes.append({
            "name": f"gpu-{i:05d}",
            "addresses": [f"10.{16 + rack // 256}.{rack % 256}.{i % 32 + 1}", f"fd00:1:{rack:x}::{i % 32 + 1:x}"],
            "group": "gpu",
            "rack": f"r{rack}",
            "switch": f"tor-{rack}",
            "capacity": "400G",
        })
    networks = [{"prefix": f"10.200.{k}.0/24", "group": "storage"} for k in range(64)]
    networks += [{"prefix": "10.250.0.0/16", "group": "mgmt"}, {"prefix": "fd00:9::/48", "group": "storage"}]
    names = [n["name"] for n in nodes]
    jobs = []
    for k in range(0, n_nodes, 64):
        jobs.append({"name": f"job-{k}", "nodes": names[k:k + 64], "from": "2026-12-01T00:00:00Z",
                     "until": "2026-12-02T00:00:00Z"})
        jobs.append({"name": f"job-{k}-b", "nodes": names[k:k + 64], "from": "2026-12-02T00:00:00Z"})
    return {"cluster_ranges": ["10.0.0.0/8", "fd00::/16"], "nodes": nodes, "networks": networks, "jobs": jobs}


def synthetic_flows(inv: Inventory, n: int, rng: np.random.Generator) -> np.ndarray:
    f = empty_flows(n)
    f["ip_version"] = 4
    known = np.array([[int(b) for b in ip.split("/")[0].split(".")] for ip in inv.entry_prefixes
                      if "." in ip and ip.endswith("/32")], dtype=np.uint8)
    for col in ("src_addr", "dst_addr"):
        a = np.zeros((n, 16), dtype=np.uint8)
        a[:, 10:12] = 0xFF
        pick = rng.integers(0, len(known), n)
        a[:, 12:16] = known[pick]
        other = rng.random(n)
        sub = other < 0.15  # inside storage / mgmt subnets
        a[sub, 12] = 10
        a[sub, 13] = rng.choice([200, 250], sub.sum())
        a[sub, 14:16] = rng.integers(0, 64, (sub.sum(), 2))
        unk = other > 0.95  # unknown addresses
        a[unk, 12:16] = rng.integers(0, 256, (unk.sum(), 4))
        f[col] = a
    f["ip_protocol"] = rng.choice([6, 17], n, p=[0.8, 0.2])
    f["src_port"] = rng.choice([45000, 2049, 22, 53, 4791, 51000], n)
    f["dst_port"] = rng.choice([51000, 443, 2049, 4791, 33000], n)
    f["time_start_ms"] = 1796000000000 + rng.integers(0, 200_000_000, n)
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=10_000, help="records per enrich() call (one Kafka message)")
    args = ap.parse_args()
    rng = np.random.default_rng(1)

    t0 = time.perf_counter()
    inv = Inventory.from_dict(synthetic_inventory(args.nodes), source="<synthetic>")
    t_load = time.perf_counter() - t0
    flows = synthetic_flows(inv, args.records, rng)
    enricher = Enricher(inv)
    print(f"inventory: {inv.n_entries} prefixes, {len(inv.node_names)} nodes, lengths {inv.lpm.lengths}, "
          f"built in {t_load * 1000:.0f} ms")

    best = min(_timed(lambda: inv.lookup(flows["src_addr"])) for _ in range(args.repeat))
    print(f"lookups:  {args.records / best:,.0f} lookups/s ({args.records} addresses in {best * 1000:.1f} ms)")
    def batches(enrich):
        for a in range(0, len(flows), args.batch):
            enrich(flows[a:a + args.batch])

    best = min(_timed(lambda: batches(enricher.enrich)) for _ in range(args.repeat))
    print(f"enrich:   {args.records / best:,.0f} records/s ({args.records} records in batches of {args.batch} "
          f"in {best * 1000:.1f} ms)")
    best = min(_timed(lambda: batches(enricher.enrich_labels)) for _ in range(args.repeat))
    print(f"enrich_labels: {args.records / best:,.0f} records/s (same batches; label codes, no string objects, "
          f"as the worker does)")
    best = min(_timed(lambda: enricher.enrich(flows)) for _ in range(args.repeat))
    print(f"enrich:   {args.records / best:,.0f} records/s (one batch of {args.records} in {best * 1000:.1f} ms)")
    out = enricher.enrich(flows)
    cats, counts = np.unique(out["category"].astype(str), return_counts=True)
    print("categories:", dict(zip(cats.tolist(), counts.tolist())), f"unknown addresses/call: {enricher.last_unknown}")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
