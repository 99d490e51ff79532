"""The synthetic cluster and traffic of ``bench/processors.py``: an inventory of GPU nodes, ToR switches and
storage, and raw flow / counter messages of collective phases over it (deterministic for a seed)."""

from __future__ import annotations

import math

import numpy as np

from schemas.columns import empty_counters, empty_flows, v4_column_to_addr16

T0_MS = 1_796_083_200_000  # 2026-12-01T00:00:00Z
STORAGE = ["nfs-1", "nfs-2", "nfs-3", "nfs-4"]


# --------------------------------------------------------------------------- synthetic cluster and traffic


def _ip(a: int, b: int, c: int, d: int) -> int:
    return (a << 24) | (b << 16) | (c << 8) | d


def node_ip(i: int) -> int:
    return _ip(10, 1, i // 200, i % 200 + 1)


def inventory_dict(nodes: int, job_size: int, rack_size: int, capacity: str = "100G") -> dict:
    racks = math.ceil(nodes / rack_size)
    inv = {
        "version": 1,
        "cluster_ranges": ["10.0.0.0/8"],
        "nodes": [
            {"name": f"gpu-{i:04d}", "addresses": [_str(node_ip(i))], "group": "gpu", "rack": f"r{i // rack_size:02d}",
             "switch": f"tor-{i // rack_size:02d}", "capacity": capacity}
            for i in range(nodes)
        ],
        "jobs": [{"name": f"job-{k:02d}", "nodes": [f"gpu-{i:04d}" for i in range(k, min(k + job_size, nodes))]}
                 for k in range(0, nodes, job_size)],
        "switches": [
            {"name": f"tor-{r:02d}", "agents": [_str(_ip(10, 255, 0, r + 1))], "rack": f"r{r:02d}",
             "ports": {p + 1: {"peer": f"gpu-{r * rack_size + p:04d}", "speed": capacity}
                       for p in range(min(rack_size, nodes - r * rack_size))}}
            for r in range(racks)
        ],
    }
    inv["nodes"] += [{"name": n, "addresses": [_str(_ip(10, 200, 0, k + 1))], "group": "storage", "rack": "rs",
                      "switch": "tor-s", "capacity": "400G"} for k, n in enumerate(STORAGE)]
    inv["nodes"].append({"name": "dns-1", "addresses": ["10.250.0.53"], "group": "mgmt", "rack": "rs", "switch": "tor-s"})
    inv["nodes"].append({"name": "mgmt-1", "addresses": ["10.250.0.10"], "group": "mgmt", "rack": "rs", "switch": "tor-s"})
    return inv


def _str(ip: int) -> str:
    return ".".join(str((ip >> s) & 255) for s in (24, 16, 8, 0))


def make_input(nodes=256, job_size=32, rack_size=16, messages=240, records=4096, sampling=1024, event_s=300.0, phase_s=1.0, seed=7):
    """(flow messages, counter messages): lists of (exporter, array) ordered by event time."""
    rng = np.random.default_rng(seed)
    racks = math.ceil(nodes / rack_size)
    per_exporter = max(1, messages // racks)
    span_ms = int(event_s * 1000)
    step_ms = span_ms // per_exporter
    phase_ms = max(1, min(step_ms, int(phase_s * 1000)))
    ips = np.array([node_ip(i) for i in range(nodes)], dtype=np.uint32)
    storage = np.array([_ip(10, 200, 0, k + 1) for k in range(len(STORAGE))], dtype=np.uint32)
    dns, mgmt = np.uint32(_ip(10, 250, 0, 53)), np.uint32(_ip(10, 250, 0, 10))
    job_of = np.arange(nodes) // job_size
    a2a_jobs = set(range(0, int(job_of.max()) + 1, 4))  # a quarter of the jobs also do all-to-all (MoE)
    slow = {j: j * job_size + 3 for j in range(int(job_of.max()) + 1)}  # one straggler per job
    flows: list[tuple[int, str, np.ndarray]] = []
    for r in range(racks):
        members = np.arange(r * rack_size, min((r + 1) * rack_size, nodes))
        weight = np.array([0.5 if slow[job_of[i]] == i else 1.0 for i in members])
        n = per_exporter * records
        # Message k of every exporter holds the k-th communication phase (synchronous training: all
        # exporters see the collective at the same time), so exporters stay within phase_ms of each other.
        t = (T0_MS + np.repeat(np.arange(per_exporter, dtype=np.int64) * step_ms, records)
             + np.sort(rng.integers(0, phase_ms, (per_exporter, records)), axis=1).ravel())
        src = rng.choice(members, n, p=weight / weight.sum())
        job = job_of[src]
        first = job * job_size
        size = np.minimum(job_size, nodes - first)
        ring = first + (src - first + 1) % size
        a2a = first + rng.integers(0, size)
        kind = rng.choice(6, n, p=[0.70, 0.10, 0.12, 0.03, 0.03, 0.02])  # ring, a2a, storage, dns, mgmt, unregistered
        kind = np.where((kind == 1) & ~np.isin(job, list(a2a_jobs)), 0, kind)
        dst_ip = np.select(
            [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
            [ips[ring], ips[np.minimum(a2a, nodes - 1)], storage[rng.integers(0, len(storage), n)], np.full(n, dns), np.full(n, mgmt)],
            default=_ip(10, 1, 250, 1) + rng.integers(0, 20, n),
        ).astype(np.uint32)
        f = empty_flows(n)
        f["export_protocol"] = 1
        f["exporter_addr"] = v4_column_to_addr16(np.full(n, _ip(10, 255, 0, r + 1), dtype=np.uint32))
        f["sampling_rate"] = sampling
        f["packets"] = 1
        f["bytes"] = np.where(kind <= 1, 4158, rng.integers(64, 9000, n))
        f["packets_est"] = sampling
        f["bytes_est"] = f["bytes"] * sampling
        f["ip_version"] = 4
        f["src_addr"] = v4_column_to_addr16(ips[src])
        f["dst_addr"] = v4_column_to_addr16(dst_ip)
        f["ip_protocol"] = np.select([kind <= 1, kind == 3], [17, 17], default=6)
        f["src_port"] = rng.integers(40000, 60000, n)
        f["dst_port"] = np.select([kind <= 1, kind == 2, kind == 3, kind == 4], [4791, 2049, 53, 22], default=443)
        f["in_if"] = src - r * rack_size + 1
        for col in ("time_start_ms", "time_end_ms", "time_received_ms", "time_export_ms"):
            f[col] = t
        for k in range(per_exporter):
            m = f[k * records : (k + 1) * records]
            flows.append((int(m["time_received_ms"][0]), _str(_ip(10, 255, 0, r + 1)), m))
    # Incast: in every other phase all members of one job send to one node within 200 ms (RoCEv2), > its capacity.
    jobs = int(job_of.max()) + 1
    for b, at in enumerate(range(phase_ms // 2, span_ms, 2 * step_ms)):
        j = b % jobs
        dst = j * job_size + 1
        senders = np.array([i for i in range(j * job_size, min((j + 1) * job_size, nodes)) if i != dst])
        k = len(senders) * 40
        f = empty_flows(k)
        src = np.repeat(senders, 40)
        f["export_protocol"], f["sampling_rate"], f["packets"], f["bytes"] = 1, sampling, 1, 4158
        f["packets_est"], f["bytes_est"] = sampling, 4158 * sampling
        f["ip_version"], f["ip_protocol"], f["src_port"], f["dst_port"] = 4, 17, 49152, 4791
        f["src_addr"] = v4_column_to_addr16(ips[src])
        f["dst_addr"] = v4_column_to_addr16(np.full(k, ips[dst], dtype=np.uint32))
        tt = T0_MS + at + np.sort(rng.integers(0, 200, k))
        for col in ("time_start_ms", "time_end_ms", "time_received_ms", "time_export_ms"):
            f[col] = tt
        for r in np.unique(src // rack_size):
            sel = f[src // rack_size == r]
            sel["exporter_addr"] = v4_column_to_addr16(np.full(len(sel), _ip(10, 255, 0, r + 1), dtype=np.uint32))
            flows.append((int(tt[0]), _str(_ip(10, 255, 0, r + 1)), sel))
    flows.sort(key=lambda x: x[0])
    # Interface counters: every switch, every port, every 10 s; steady utilisation, a few errors on one port.
    counters = []
    octets = rng.integers(10**12, 10**13, (racks, rack_size)).astype(np.int64)
    for step, at in enumerate(range(0, span_ms, 10_000)):
        for r in range(racks):
            c = empty_counters(rack_size)
            c["exporter_addr"] = v4_column_to_addr16(np.full(rack_size, _ip(10, 255, 0, r + 1), dtype=np.uint32))
            c["source_id"] = np.arange(1, rack_size + 1)
            c["sample_sequence"] = step
            c["time_received_ms"] = T0_MS + at
            c["agent_uptime_ms"] = 3_600_000 + at
            c["if_index"] = np.arange(1, rack_size + 1)
            c["if_type"], c["if_speed"], c["if_direction"] = 6, 100_000_000_000, 1
            c["if_admin_up"] = c["if_oper_up"] = True
            octets[r] += rng.integers(10**9, 6 * 10**10, rack_size)
            c["in_octets"] = c["out_octets"] = octets[r]
            c["in_ucast_pkts"] = c["out_ucast_pkts"] = octets[r] // 4096
            c["in_errors"] = np.where(np.arange(rack_size) == 5, step * 50, 0)
            counters.append((T0_MS + at, _str(_ip(10, 255, 0, r + 1)), c))
    return [(e, a) for _t, e, a in flows], [(e, a) for _t, e, a in counters]
