"""Synthetic raw traffic for replay tests: a ring job with one straggler, an incast burst, counters.

Everything is deterministic (a seeded generator); flows are FLOW_DTYPE rows as
ingest would publish them, cut into "Kafka messages" per partition.
"""

from __future__ import annotations

import numpy as np

from processors.logic.enrich.inventory import Inventory
from schemas.columns import COUNTER_DTYPE, addr16, empty_flows

T0 = 1_796_083_200_000  # 2026-12-01T00:00:00Z (inside the job's time span)
N_GPU = 8
JOB = "llm-pretrain"
SLOW = "gpu-08"  # the straggler
DST = "gpu-01"  # the incast destination


def gpu(i: int) -> str:
    return f"gpu-{i:02d}"


def ip(i: int) -> str:
    return f"10.10.1.{10 + i}"


def inventory_dict() -> dict:
    nodes = [{"name": gpu(i), "addresses": [ip(i)], "group": "gpu", "rack": "r1", "switch": "tor-r1",
              "capacity": "100G"} for i in range(1, N_GPU + 1)]
    return {
        "version": 1,
        "cluster_ranges": ["10.10.0.0/16"],
        "nodes": nodes,
        "jobs": [{"name": JOB, "nodes": [gpu(i) for i in range(1, N_GPU + 1)],
                  "from": "2026-11-30T00:00:00Z", "until": "2026-12-03T00:00:00Z"}],
        "switches": [{"name": "tor-r1", "agents": ["10.10.255.1"], "rack": "r1"}],
    }


def inventory() -> Inventory:
    return Inventory.from_dict(inventory_dict())


def _rows(src: list[int], dst: list[int], t: list[int], nbytes: list[int], exporter: str) -> np.ndarray:
    n = len(src)
    f = empty_flows(n)
    f["export_protocol"] = 1  # sFlow: no duration, bytes count in their window
    f["exporter_addr"] = np.frombuffer(addr16(exporter), dtype=np.uint8)
    f["sampling_rate"] = 1000
    f["bytes"] = nbytes
    f["packets"] = np.maximum(1, np.asarray(nbytes) // 1500)
    f["bytes_est"] = f["bytes"] * 1000
    f["packets_est"] = f["packets"] * 1000
    f["ip_version"] = 4
    f["ip_protocol"] = 17
    f["src_port"] = 50000
    f["dst_port"] = 4791  # RoCEv2
    for k in range(n):
        f["src_addr"][k] = np.frombuffer(addr16(ip(src[k])), dtype=np.uint8)
        f["dst_addr"][k] = np.frombuffer(addr16(ip(dst[k])), dtype=np.uint8)
    f["time_start_ms"] = t
    f["time_end_ms"] = t
    f["time_received_ms"] = np.asarray(t) + 50
    f["time_export_ms"] = np.asarray(t) + 40
    return f


def traffic(seconds: int = 90, seed: int = 7, incast_at: tuple[int, int] = (30, 33), start: int = T0) -> np.ndarray:
    """All flows of the scenario in arrival order (by time, then generation order).

    Ring traffic gpu-i -> gpu-(i+1) every 250 ms; gpu-08 sends ~20 % of its peers.
    During ``incast_at`` seconds, gpu-02..gpu-07 each burst ~16 % of gpu-01's 100G
    link to gpu-01 (6 sources, aggregate ~96 %).
    """
    rng = np.random.default_rng(seed)
    src, dst, t, nb = [], [], [], []
    for step in range(seconds * 4):
        ms = start + step * 250
        for i in range(1, N_GPU + 1):
            base = 1_200_000 if gpu(i) != SLOW else 240_000
            src.append(i)
            dst.append(i % N_GPU + 1)
            t.append(ms + int(rng.integers(0, 200)))
            nb.append(int(base * rng.uniform(0.9, 1.1)))
    for s in range(*incast_at):
        for q in range(4):
            ms = start + s * 1000 + q * 250
            for i in range(2, 8):
                src.append(i)
                dst.append(1)
                t.append(ms + int(rng.integers(0, 200)))
                nb.append(int(100e9 * 0.16 / 8 / 1000 / 4))
    f = _rows(src, dst, t, nb, "10.10.255.1")
    return f[np.argsort(f["time_end_ms"], kind="stable")]


def with_unregistered_host(flows: np.ndarray, n: int = 200) -> np.ndarray:
    """Adds ``n`` SSH flows from 10.10.9.9 (inside the cluster range, not in the inventory): a policy alert."""
    extra = flows[:n].copy()
    extra["src_addr"] = np.frombuffer(addr16("10.10.9.9"), dtype=np.uint8)
    extra["ip_protocol"] = 6
    extra["dst_port"] = 22
    out = np.concatenate([flows, extra])
    return out[np.argsort(out["time_end_ms"], kind="stable")]


def messages(flows: np.ndarray, partitions: int = 2, per_message: int = 40) -> dict[int, list[np.ndarray]]:
    """Cut a time-ordered flow array into Kafka-like messages, round-robin over partitions.

    Messages hold consecutive rows, so every partition stays in time order (as
    with exporters spread over partitions by their address).
    """
    out: dict[int, list[np.ndarray]] = {p: [] for p in range(partitions)}
    for k, start in enumerate(range(0, len(flows), per_message)):
        out[k % partitions].append(flows[start : start + per_message])
    return out


def live_order(msgs: dict[int, list[np.ndarray]]) -> list[np.ndarray]:
    """Messages of all partitions in the order a live consumer would see them (by first row time)."""
    flat = [(int(m["time_end_ms"].min()), p, k, m) for p, ms in msgs.items() for k, m in enumerate(ms)]
    return [m for *_x, m in sorted(flat, key=lambda x: x[:3])]


def counters(seconds: int = 90, every_s: int = 10, start: int = T0) -> np.ndarray:
    """Counter samples of two ports of tor-r1, one of them renegotiating 100G -> 25G halfway."""
    rows = []
    for k, s in enumerate(range(0, seconds, every_s)):
        for port in (1, 2):
            speed = 25_000_000_000 if (port == 2 and s >= seconds // 2) else 100_000_000_000
            rows.append((port, start + s * 1000 + 5, speed, k))
    c = np.zeros(len(rows), dtype=COUNTER_DTYPE)
    c["exporter_addr"] = np.frombuffer(addr16("10.10.255.1"), dtype=np.uint8)
    for i, (port, t, speed, k) in enumerate(rows):
        c[i]["source_id"] = port
        c[i]["if_index"] = port
        c[i]["sample_sequence"] = k + 1
        c[i]["time_received_ms"] = t
        c[i]["agent_uptime_ms"] = 1_000_000 + (t - start)
        c[i]["if_speed"] = speed
        c[i]["if_admin_up"] = True
        c[i]["if_oper_up"] = True
        c[i]["in_octets"] = 10**9 * (k + 1)
        c[i]["out_octets"] = 10**9 * (k + 1)
    return c
