"""Small scenarios built in code for the simulator tests."""

from __future__ import annotations

import copy
import socket
from contextlib import contextmanager

from devtools.simulator import scenario_from_dict

BASE = {
    "cluster_ranges": ["10.9.0.0/16"],
    "external_authorized": ["198.51.100.0/24"],
    "nodes": [
        {"name": "g1", "ips": ["10.9.1.1"], "rack": "r1", "switch": "t1", "group": "gpu", "capacity": "25G"},
        {"name": "g2", "ips": ["10.9.1.2"], "rack": "r1", "switch": "t1", "group": "gpu", "capacity": "25G"},
        {"name": "g3", "ips": ["10.9.2.1"], "rack": "r2", "switch": "t2", "group": "gpu", "capacity": "25G"},
        {"name": "g4", "ips": ["10.9.2.2"], "rack": "r2", "switch": "t2", "group": "gpu", "capacity": "25G"},
        {"name": "st", "ips": ["10.9.3.1"], "rack": "r2", "switch": "t2", "group": "storage", "capacity": "100G"},
        {"name": "mg", "ips": ["10.9.4.1"], "rack": "r1", "switch": "t1", "group": "mgmt", "capacity": "10G"},
        {"name": "ms", "ips": ["10.9.5.1"], "rack": "r2", "switch": "t2", "group": "model-store", "capacity": "25G"},
        {"name": "lb", "ips": ["10.9.4.2"], "rack": "r1", "switch": "t1", "group": "frontend", "capacity": "25G"},
    ],
    "switches": [
        {"name": "t1", "agent": "10.9.255.1", "ports": [
            {"if_index": 1, "node": "g1", "speed": "25G"}, {"if_index": 2, "node": "g2", "speed": "25G"},
            {"if_index": 3, "node": "mg", "speed": "10G"}, {"if_index": 4, "node": "lb", "speed": "25G"}]},
        {"name": "t2", "agent": "10.9.255.2", "ports": [
            {"if_index": 1, "node": "g3", "speed": "25G"}, {"if_index": 2, "node": "g4", "speed": "25G"},
            {"if_index": 3, "node": "st", "speed": "100G"}, {"if_index": 4, "node": "ms", "speed": "25G"}]},
    ],
    "jobs": [{"name": "job", "nodes": ["g1", "g2", "g3", "g4"]}],
    "simulation": {
        "name": "small",
        "duration_s": 30,
        "start": "2026-12-01T10:00:00Z",
        "seed": 3,
        "window_s": 10,
        "externals": [{"name": "mirror", "ip": "198.51.100.7"}, {"name": "bad", "ip": "203.0.113.9"}],
        "workloads": [
            {"job": "job", "kind": "training", "collective": "ring", "transport": "both", "period_s": 2.0,
             "compute_s": 1.2, "comm_s": 0.6, "allreduce_mb": 40, "channels": 1,
             "dataset": {"storage": "st", "protocol": "nfs", "mbps_per_node": 100},
             "checkpoint": {"storage": "st", "protocol": "s3", "interval_s": 10, "mb_per_node": 100, "duration_s": 4}},
        ],
        "background": {"dns": "mg", "ssh_from": "mg", "metrics_from": "mg", "egress_to": "mirror"},
        "exporters": {
            "sflow": {"sampling_rate": 512, "counter_interval_s": 5},
            "flow": [
                {"name": "nf", "protocol": "netflow9", "agent": "10.9.255.10", "source_id": 7, "observe": "all",
                 "active_timeout_s": 10, "inactive_timeout_s": 5, "template_refresh_s": 10},
                {"name": "ix", "protocol": "ipfix", "agent": "10.9.255.11", "source_id": 8, "observe": "all",
                 "active_timeout_s": 10, "inactive_timeout_s": 5, "template_refresh_s": 10},
            ],
        },
        "faults": [],
    },
}  # fmt: skip


def small(faults: list | None = None, **sim_overrides):
    """The small scenario, with optional faults and ``simulation`` overrides (dotted keys not supported)."""
    doc = copy.deepcopy(BASE)
    doc["simulation"]["faults"] = faults or []
    doc["simulation"].update(sim_overrides)
    return scenario_from_dict(doc, "small")


def small_doc() -> dict:
    return copy.deepcopy(BASE)


@contextmanager
def udp_receiver(timeout_s: float):
    """A UDP socket on a free loopback port with a receive timeout, closed on exit: yields (socket, port)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(timeout_s)
        yield rx, rx.getsockname()[1]
    finally:
        rx.close()


def drain(rx: socket.socket, size: int = 65535) -> list[bytes]:
    """The datagrams ``rx`` receives until its timeout passes without one."""
    got = []
    while True:
        try:
            got.append(rx.recvfrom(size)[0])
        except socket.timeout:
            return got
