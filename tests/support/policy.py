"""Builders of enriched flow batches for the policy tests (per-record loops are fine here)."""

from __future__ import annotations

import ipaddress

import fastavro
import numpy as np

from schemas.columns import FLOW_ABSENT, addr16, dtype_for, load_avsc

ENRICHED = dtype_for("flow_enriched")
CLUSTER = ["10.0.0.0/16", "fd00:1::/64"]
GB = 1_000_000_000
MIN = 60_000
T0 = 1_760_000_000_000  # 2025-10-09T08:53:20Z

# ip -> (node, group, rack, switch)
INVENTORY = {
    "10.0.1.1": ("gpu-01", "gpu", "r1", "tor1"),
    "10.0.1.2": ("gpu-02", "gpu", "r1", "tor1"),
    "10.0.1.3": ("gpu-03", "gpu", "r2", "tor2"),
    "10.0.2.1": ("stor-01", "storage", "r3", "tor3"),
    "10.0.2.2": ("stor-02", "storage", "r3", "tor3"),
    "10.0.3.1": ("mgmt-01", "mgmt", "r4", "tor4"),
    "10.0.4.1": ("ms-01", "model-store", "r4", "tor4"),
    "10.0.4.2": ("ms-02", "model-store", "r4", "tor4"),
    "10.0.5.1": ("dns-01", "dns", "r4", "tor4"),
    "fd00:1::10": ("gpu-v6", "gpu", "r2", "tor2"),
    "198.51.100.7": ("backup-ext", "external-authorized", "", ""),
}
JOBS = {"gpu-01": "job-a", "gpu-02": "job-a", "gpu-03": "job-b"}
_PORT_CAT = {2049: "storage", 3260: "storage", 445: "storage", 988: "storage", 4791: "rocev2", 53: "dns",
             22: "mgmt", 29500: "collective"}
_CLUSTER_NETS = [ipaddress.ip_network(c) for c in CLUSTER]


def in_cluster(ip: str) -> bool:
    a = ipaddress.ip_address(ip)
    return any(a.version == n.version and a in n for n in _CLUSTER_NETS)


def flow(src, dst, sport=40000, dport=2049, *, nbytes=1000, t=T0, dur=0, proto=6, category=None,
         exporter="10.255.0.1", in_if=1, out_if=2, src_group=None, dst_group=None, src_job=None):
    """One flow as a dict; enrichment is looked up from INVENTORY unless given."""
    return dict(src=src, dst=dst, sport=sport, dport=dport, nbytes=nbytes, t_end=t, t_start=t - dur, proto=proto,
                category=category, exporter=exporter, in_if=in_if, out_if=out_if, src_group=src_group,
                dst_group=dst_group, src_job=src_job)


def _category(f) -> str:
    if f["category"]:
        return f["category"]
    for p in (f["dport"], f["sport"]):
        if p in _PORT_CAT:
            return _PORT_CAT[p]
    if not in_cluster(f["dst"]) or not in_cluster(f["src"]):
        return "external"
    return "other"


def make_batch(flows: list[dict]) -> np.ndarray:
    """An enriched batch (``flow_enriched`` dtype) from flow dicts."""
    arr = np.zeros(len(flows), dtype=ENRICHED)
    for k, v in FLOW_ABSENT.items():
        arr[k] = v
    for name in ENRICHED.names:
        if ENRICHED[name] == np.dtype(object):
            arr[name] = ""
    for i, f in enumerate(flows):
        r = arr[i : i + 1]
        r["export_protocol"] = 4
        r["exporter_addr"][0] = np.frombuffer(addr16(f["exporter"]), np.uint8)
        r["sampling_rate"] = 1
        r["bytes"] = r["bytes_est"] = f["nbytes"]
        r["packets"] = r["packets_est"] = max(1, f["nbytes"] // 1500)
        r["ip_version"] = 6 if ":" in f["src"] else 4
        r["src_addr"][0] = np.frombuffer(addr16(f["src"]), np.uint8)
        r["dst_addr"][0] = np.frombuffer(addr16(f["dst"]), np.uint8)
        r["src_port"], r["dst_port"], r["ip_protocol"] = f["sport"], f["dport"], f["proto"]
        r["in_if"], r["out_if"] = f["in_if"], f["out_if"]
        r["time_start_ms"], r["time_end_ms"] = f["t_start"], f["t_end"]
        r["time_received_ms"] = r["time_export_ms"] = f["t_end"]
        for side, ip in (("src", f["src"]), ("dst", f["dst"])):
            node, group, rack, switch = INVENTORY.get(str(ipaddress.ip_address(ip)), ("", "unknown", "", ""))
            if f.get(f"{side}_group"):
                group = f[f"{side}_group"]
            r[f"{side}_node"], r[f"{side}_group"] = node, group
            r[f"{side}_rack"], r[f"{side}_switch"] = rack, switch
            r[f"{side}_job"] = JOBS.get(node, "")
        if f.get("src_job") is not None:
            r["src_job"] = f["src_job"]
        r["category"] = _category(f)
    return arr


_ALERT_SCHEMA = fastavro.parse_schema(load_avsc("alert"))


def assert_valid_alerts(alerts: list[dict]) -> None:
    """Every alert dict has exactly the Avro fields and validates against alert.avsc."""
    names = [f["name"] for f in load_avsc("alert")["fields"]]
    for a in alerts:
        assert list(a) == names, set(a) ^ set(names)
        fastavro.validation.validate(a, _ALERT_SCHEMA, raise_errors=True)
        assert len(a["sample_flows"]) <= 5


def by_state(alerts, rule=None):
    return [(a["rule"], a["state"]) for a in alerts if rule is None or a["rule"] == rule]


def assert_lifecycle(alerts: list[dict]) -> None:
    """Per dedup key: firing, then updated*, then resolved, possibly again; never two open at once."""
    open_ = set()
    for a in alerts:
        k = a["dedup_key"]
        if a["state"] == "firing":
            assert k not in open_, f"{k} fired twice without resolving"
            open_.add(k)
        else:
            assert k in open_, f"{k} {a['state']} while not firing"
            if a["state"] == "resolved":
                open_.remove(k)
