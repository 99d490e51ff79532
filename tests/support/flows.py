"""Builders of synthetic enriched flow batches and counter samples for detector tests."""

from __future__ import annotations

import numpy as np

from schemas.columns import COUNTER_DTYPE, DISCARD_DTYPE, FLOW_ABSENT, addr16, dtype_for, v4_column_to_addr16

ENRICHED = dtype_for("flow_enriched")
STRING_FIELDS = [n for n in ENRICHED.names if ENRICHED[n] == np.dtype(object)]


def node_ip(node: str) -> str:
    """Deterministic 10.x address for a node name (tests only)."""
    h = sum(ord(c) * (i + 1) for i, c in enumerate(node)) % 60000
    return f"10.{h // 250 % 250}.{h % 250}.{len(node) % 250 + 1}"


def flows(records: list[dict]) -> np.ndarray:
    """Enriched flow batch from dicts.

    Keys: src, dst (node names, "" = unknown), t (event time ms = time_start = time_end
    unless t_start given), bytes, packets, rate (sampling), category, src_job, dst_job,
    src_group, dst_group, src_rack, dst_rack, src_ip, dst_ip, ip_protocol (17), dst_port (4791),
    tcp_flags, tos, roce_opcode (-1). bytes_est/packets_est are scaled by rate.
    """
    arr = np.zeros(len(records), dtype=ENRICHED)
    for k, v in FLOW_ABSENT.items():
        arr[k] = v
    for f in STRING_FIELDS:
        arr[f] = ""
    for i, r in enumerate(records):
        rate = r.get("rate", 1)
        src, dst = r.get("src", ""), r.get("dst", "")
        arr[i]["export_protocol"] = r.get("proto", 1)
        arr[i]["exporter_addr"] = np.frombuffer(addr16(r.get("exporter", "192.0.2.1")), np.uint8)
        arr[i]["sampling_rate"] = rate
        arr[i]["bytes"] = r.get("bytes", 1000)
        arr[i]["packets"] = r.get("packets", 1)
        arr[i]["bytes_est"] = arr[i]["bytes"] * rate
        arr[i]["packets_est"] = arr[i]["packets"] * rate
        arr[i]["ip_version"] = 4
        arr[i]["src_addr"] = np.frombuffer(addr16(r.get("src_ip", node_ip(src) if src else "198.51.100.7")), np.uint8)
        arr[i]["dst_addr"] = np.frombuffer(addr16(r.get("dst_ip", node_ip(dst) if dst else "198.51.100.8")), np.uint8)
        arr[i]["ip_protocol"] = r.get("ip_protocol", 17)
        arr[i]["dst_port"] = r.get("dst_port", 4791)
        arr[i]["tcp_flags"] = r.get("tcp_flags", 0)
        arr[i]["tos"] = r.get("tos", 0)
        arr[i]["roce_opcode"] = r.get("roce_opcode", -1)
        arr[i]["src_rack"] = r.get("src_rack", "")
        arr[i]["dst_rack"] = r.get("dst_rack", "")
        arr[i]["time_end_ms"] = r["t"]
        arr[i]["time_start_ms"] = r.get("t_start", r["t"])
        arr[i]["time_received_ms"] = r["t"]
        arr[i]["time_export_ms"] = r["t"]
        arr[i]["src_node"] = src
        arr[i]["dst_node"] = dst
        arr[i]["src_group"] = r.get("src_group", "gpu" if src else "unknown")
        arr[i]["dst_group"] = r.get("dst_group", "gpu" if dst else "unknown")
        arr[i]["src_job"] = r.get("src_job", r.get("job", ""))
        arr[i]["dst_job"] = r.get("dst_job", r.get("job", ""))
        arr[i]["category"] = r.get("category", "collective")
    return arr


G25 = 25_000_000_000
EXPORTER = "192.0.2.10"  # the exporter of :func:`counters` rows unless given
NODES = [f"n{i}" for i in range(5)]
PORTS = {i + 1: n for i, n in enumerate(NODES)}  # ifIndex 1-5 of EXPORTER: n0-n4


def port_info(exporter, if_index, speeds: dict[int, float] | None = None) -> tuple[str, float]:
    """An engine's ``port_info`` for :data:`PORTS`: (node, configured bps), 25G unless ``speeds`` (ifIndex -> bps)
    says otherwise; ("", nan) for any other port."""
    node = PORTS.get(if_index, "") if exporter == EXPORTER else ""
    return node, float((speeds or {}).get(if_index, G25)) if node else float("nan")


def counters(samples: list[dict]) -> np.ndarray:
    """Counter sample batch from dicts (keys: exporter, if_index, t, uptime, speed, oper, counters...)."""
    arr = np.zeros(len(samples), dtype=COUNTER_DTYPE)
    for i, s in enumerate(samples):
        arr[i]["exporter_addr"] = np.frombuffer(addr16(s.get("exporter", EXPORTER)), np.uint8)
        arr[i]["source_id"] = s.get("if_index", 1)
        arr[i]["if_index"] = s.get("if_index", 1)
        arr[i]["sample_sequence"] = s.get("seq", i + 1)
        arr[i]["time_received_ms"] = s["t"]
        arr[i]["agent_uptime_ms"] = s.get("uptime", s["t"])
        arr[i]["if_speed"] = s.get("speed", 25_000_000_000)
        arr[i]["if_admin_up"] = s.get("admin", True)
        arr[i]["if_oper_up"] = s.get("oper", True)
        for c in ("in_octets", "out_octets", "in_errors", "out_errors", "in_discards", "out_discards"):
            v = s.get(c, 0)
            if v >= 2**63:  # u64 stored as signed int64
                v -= 2**64
            arr[i][c] = v
    return arr


def discards(rows: list[dict]) -> np.ndarray:
    """sFlow dropped-packet notifications (DISCARD_DTYPE) from dicts (keys: t, exporter, in_if, out_if (default
    1: an egress drop on :data:`PORTS`' n0), reason (default 259 no_buffer_space), drops, src, dst)."""
    arr = np.zeros(len(rows), dtype=DISCARD_DTYPE)
    arr["egress_queue"] = arr["roce_opcode"] = -1
    for i, r in enumerate(rows):
        arr[i]["exporter_addr"] = np.frombuffer(addr16(r.get("exporter", EXPORTER)), np.uint8)
        arr[i]["src_addr"] = np.frombuffer(addr16(r.get("src", "10.0.0.3")), np.uint8)
        arr[i]["dst_addr"] = np.frombuffer(addr16(r.get("dst", "10.0.0.1")), np.uint8)
        arr[i]["in_if"], arr[i]["out_if"] = r.get("in_if", 0), r.get("out_if", 1)
        arr[i]["reason"] = r.get("reason", 259)
        arr[i]["drops"] = r.get("drops", 0)
        arr[i]["sample_sequence"] = i + 1
        arr[i]["time_received_ms"] = r["t"]
    return arr


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
