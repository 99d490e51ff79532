"""Flow-metrics sink state for tests: a small inventory, matrix cells, and what a scrape of the state's registry says."""

from __future__ import annotations

from sinks.metrics.state import MetricsState

T0 = 1_800_000_000_000

INVENTORY = {
    "nodes": [
        {"name": "gpu-1", "addresses": ["10.0.0.1"], "group": "gpu", "rack": "r1", "switch": "tor-1", "capacity": "400G"},
        {"name": "gpu-2", "addresses": ["10.0.0.2"], "group": "gpu", "rack": "r1", "switch": "tor-1", "capacity": "400G"},
        {"name": "gpu-3", "addresses": ["10.0.0.3"], "group": "gpu", "rack": "r2", "switch": "tor-2", "capacity": "100G"},
        {"name": "st-1", "addresses": ["10.0.1.1"], "group": "storage", "rack": "r2", "switch": "tor-2"},
    ],
    "jobs": [{"name": "job-a", "nodes": ["gpu-1", "gpu-3"]}],
    "switches": [
        {"name": "tor-1", "agents": ["10.0.255.1"], "ports": {1: {"peer": "gpu-1", "speed": "400G"}, 2: {"peer": "gpu-2"}}},
        {"name": "tor-2", "agents": ["10.0.255.2"]},
    ],
}


def cell(level="node", src="gpu-1", dst="gpu-2", cat="collective", b=1000, p=10, end=T0 + 10_000, **signals):
    c = {"window_start_ms": end - 10_000, "window_end_ms": end, "level": level, "src": src, "dst": dst,
         "category": cat, "bytes_est": b, "packets_est": p, "flow_records": 1, "samples": 1}
    return c | {k: signals.get(k, 0) for k in ("syn_packets_est", "rst_packets_est", "ecn_ce_packets_est",
                                                 "cnp_packets_est")}


def values(state: MetricsState, name: str) -> dict[tuple, float]:
    """{label values in the family's label order: value} of one family as a scrape shows it."""
    for fam in state.collect(now=0.0):
        full = fam.name + ("_total" if fam.type == "counter" else "")
        if full == name:
            fam_def = next(f for f in state.families if f.name == name)
            return {tuple(s.labels[k] for k in fam_def.labels): s.value for s in fam.samples}
    raise KeyError(name)


def scrape(state: MetricsState) -> None:
    state.collect(now=0.0)
    state.scraped()
