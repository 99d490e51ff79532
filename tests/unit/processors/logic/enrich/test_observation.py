"""Observation policy: each packet counted once, whichever and however many exporters saw it."""

from __future__ import annotations

import ipaddress
from collections import defaultdict

import numpy as np
import pytest

from devtools.simulator import generate
from ingest.decode import TemplateCache, decode
from processors.logic.core import ProcessorCore
from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.observation import ObservationPolicy
from schemas.columns import PROTO_IPFIX, PROTO_NETFLOW9, PROTO_SFLOW5, addr16, addr_str, empty_flows
from tests.support.simulator import small

INV = {
    "cluster_ranges": ["10.0.0.0/16"],
    "nodes": [
        {"name": "gpu1", "addresses": ["10.0.1.1"], "switch": "tor1", "group": "gpu"},
        {"name": "gpu2", "addresses": ["10.0.1.2"], "switch": "tor1", "group": "gpu"},
        {"name": "gpu3", "addresses": ["10.0.2.1"], "switch": "tor2", "group": "gpu"},
        {"name": "lone", "addresses": ["10.0.9.1"], "group": "gpu"},  # behind a switch without sFlow: not covered
    ],
    "switches": [
        {"name": "tor1", "agents": ["10.0.255.1"], "ports": {1: {"peer": "gpu1"}, 2: {"peer": "gpu2"}}},
        {"name": "tor2", "agents": ["10.0.255.2"], "ports": {1: {"peer": "gpu3"}, 49: {"speed": "100G"}}},
    ],
}
TOR1, TOR2, CORE, BORDER = "10.0.255.1", "10.0.255.2", "10.0.255.10", "10.0.255.20"
EXT, EXT2, UNREG = "203.0.113.5", "198.51.100.9", "10.0.1.200"

# (exporter, protocol, in_if, src, dst, counted?)
CASES = [
    (TOR1, PROTO_SFLOW5, 1, "10.0.1.1", "10.0.2.1", True),     # source ToR, host port: the primary view
    (TOR2, PROTO_SFLOW5, 49, "10.0.1.1", "10.0.2.1", False),   # destination ToR's uplink: tor1 counted it
    (CORE, PROTO_NETFLOW9, 7, "10.0.1.1", "10.0.2.1", False),  # core NetFlow: a primary sees this path
    (TOR2, PROTO_SFLOW5, 49, EXT, "10.0.2.1", True),           # from outside: the uplink is the first to see it
    (BORDER, PROTO_IPFIX, 3, EXT, "10.0.2.1", False),          # ... and the border saw it again
    (BORDER, PROTO_IPFIX, 3, EXT, EXT2, True),                 # transit only the border sees
    (TOR1, PROTO_SFLOW5, 30, UNREG, "10.0.2.1", True),         # unregistered host on an unlisted port
    (CORE, PROTO_NETFLOW9, 7, UNREG, "10.0.2.1", False),       # ... and the core saw it again
    (CORE, PROTO_NETFLOW9, 7, "10.0.9.1", EXT, True),          # no primary for either end
    (TOR1, PROTO_SFLOW5, 2, "10.0.1.2", "10.0.1.1", True),     # intra-rack, host port
    (TOR1, PROTO_SFLOW5, 0, "10.0.1.2", "10.0.2.1", True),     # the source's ToR, ingress interface unknown (0)
    (TOR2, PROTO_SFLOW5, 1, "10.0.1.2", "10.0.2.1", False),    # egress-side sample at the destination's ToR
]


def flows_of(cases) -> np.ndarray:
    f = empty_flows(len(cases))
    for i, (exp, proto, in_if, src, dst, _c) in enumerate(cases):
        f[i]["exporter_addr"] = np.frombuffer(addr16(exp), np.uint8)
        f[i]["export_protocol"] = proto
        f[i]["in_if"] = in_if
        f[i]["src_addr"] = np.frombuffer(addr16(src), np.uint8)
        f[i]["dst_addr"] = np.frombuffer(addr16(dst), np.uint8)
        f[i]["ip_version"] = 4
        f[i]["bytes_est"] = 1000
    return f


def counted(inv: dict, cases, exporters=None) -> list[bool]:
    core = ProcessorCore(Inventory.from_dict(inv), observation=exporters)
    return (~core.enrich_labels(flows_of(cases))["duplicate"]).tolist()


def test_each_case_counts_as_the_rule_says():
    assert counted(INV, CASES) == [c[-1] for c in CASES]


def test_enriched_records_carry_the_flag():
    core = ProcessorCore(Inventory.from_dict(INV))
    arr = core.enrich(flows_of(CASES))
    assert (~arr["duplicate"]).tolist() == [c[-1] for c in CASES]


def test_exporter_overrides():
    got = counted(INV, CASES, {CORE: "primary", TOR2: "ignore", BORDER: "secondary"})
    want = [True if c[0] == CORE else False if c[0] == TOR2 else c[-1] for c in CASES]
    assert got == want


def test_without_switches_every_record_counts():
    inv = {k: v for k, v in INV.items() if k != "switches"}
    assert counted(inv, CASES) == [True] * len(CASES)


def test_bad_role_is_a_clear_error():
    with pytest.raises(ValueError, match="role 'main' is not one of primary, secondary, ignore"):
        ObservationPolicy(Inventory.from_dict(INV), {CORE: "main"})


def test_selection_keeps_the_flag_aligned():
    core = ProcessorCore(Inventory.from_dict(INV))
    lab = core.enrich_labels(flows_of(CASES))
    want = ~np.array([c[-1] for c in CASES])
    assert lab[2:7]["duplicate"].tolist() == want[2:7].tolist()
    mask = np.arange(len(CASES)) % 2 == 0
    assert lab[mask]["duplicate"].tolist() == want[mask].tolist()
    assert lab[np.array([9, 0])]["duplicate"].tolist() == [want[9], want[0]]


def test_counted_totals_match_the_simulators_truth_with_three_exporters_on_every_packet():
    """The small scenario has ToR sFlow (1:512) plus a NetFlow v9 and an IPFIX exporter that both see every
    packet: all records together count inter-node traffic about three times; counted records once."""
    scen = small()
    agents = {fe.name: fe.agent for fe in scen.flow_exporters}
    truth: list = []
    templates = TemplateCache()
    batches = []
    for dg in generate(scen, truth=truth):
        exporter = agents.get(dg.exporter, "0.0.0.0")  # sFlow carries its agent address itself
        res = decode(dg.data, exporter, dg.send_time_ms, templates)
        if len(res.flows):
            batches.append(res.flows)
    core = ProcessorCore(Inventory.from_dict(scen.cluster.to_inventory_dict()))
    lab = core.enrich_labels(np.concatenate(batches))
    src = np.where(lab["src_node"] != "", lab["src_node"], [addr_str(a) for a in lab["src_addr"]])
    dst = np.where(lab["dst_node"] != "", lab["dst_node"], [addr_str(a) for a in lab["dst_addr"]])
    got, everything = defaultdict(int), defaultdict(int)
    for s, d, b, dup in zip(src.tolist(), dst.tolist(), lab["bytes_est"].tolist(), lab["duplicate"].tolist()):
        everything[(s, d)] += b
        if not dup:
            got[(s, d)] += b
    want, packets = defaultdict(int), defaultdict(int)
    rec = truth[0]
    for line in rec.lines():
        if line["type"] == "window":
            for p in line["pairs"]:
                want[(p["src"], p["dst"])] += p["bytes"]
                packets[(p["src"], p["dst"])] += p["packets"]
    big = [k for k, v in want.items() if v > 50e6]
    assert len(big) >= 8
    for k in big:  # sFlow 1:512: within 4 standard errors of a packet-sampled estimate
        bound = 4 * want[k] / np.sqrt(packets[k] / 512)
        assert abs(got[k] - want[k]) <= bound, (k, got[k], want[k], bound)
        assert everything[k] > 2.5 * want[k], (k, everything[k], want[k])  # three views without the policy
    total_want = sum(want.values())
    assert abs(sum(got.values()) - total_want) <= 0.03 * total_want
    assert {str(ipaddress.ip_address(a)) for a in agents.values()}  # exporters were NetFlow/IPFIX agents
