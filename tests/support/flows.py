"""Builders of synthetic enriched flow batches and counter samples for detector tests."""

from __future__ import annotations

import numpy as np

from schemas.columns import COUNTER_DTYPE, FLOW_ABSENT, addr16, dtype_for

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


def counters(samples: list[dict]) -> np.ndarray:
    """Counter sample batch from dicts (keys: exporter, if_index, t, uptime, speed, oper, counters...)."""
    arr = np.zeros(len(samples), dtype=COUNTER_DTYPE)
    for i, s in enumerate(samples):
        arr[i]["exporter_addr"] = np.frombuffer(addr16(s.get("exporter", "192.0.2.10")), np.uint8)
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
