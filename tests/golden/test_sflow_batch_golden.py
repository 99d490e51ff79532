"""The columnar sFlow decoder (decode_sflow_many) against the fabric capture's input truth.

Every sample of the fabric capture (VXLAN, QinQ, IPv6 extension headers,
RoCEv2) decodes to its input frame. (The tshark comparisons of the pmacct
captures run on both decoding paths in test_sflow_golden.py.)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from ingest.pcapread import read_udp
from schemas.columns import addr_str
from tests.support.captures import decode_sflow_groups

FABRIC = Path(__file__).resolve().parents[1] / "captures" / "pmacct_sfprobe_fabric"


def _batch(path, size=64):
    return decode_sflow_groups(list(read_udp(path)), size)


def test_batch_fabric_capture_matches_input_truth():
    truth = json.loads((FABRIC / "input_truth.json").read_text())["truth"]
    results = _batch(FABRIC / "pmacct_sfprobe_fabric.pcap", size=7)

    def key(d):
        return (d["ip_version"], d["src"], d["dst"], d["proto"], d["sport"], d["dport"], d["ip_len"], d["vlan"],
                d["vni"], d["roce_opcode"], d["roce_dest_qp"], d["tcp_flags"], d["tos"])

    rows = [
        dict(ip_version=int(f["ip_version"]), src=addr_str(f["src_addr"]), dst=addr_str(f["dst_addr"]),
             proto=int(f["ip_protocol"]), sport=int(f["src_port"]), dport=int(f["dst_port"]), ip_len=int(f["bytes"]),
             vlan=int(f["vlan"]), vni=int(f["vxlan_vni"]), roce_opcode=int(f["roce_opcode"]),
             roce_dest_qp=int(f["roce_dest_qp"]), tcp_flags=int(f["tcp_flags"]), tos=int(f["tos"]))
        for r in results for f in r.flows
    ]
    want = [t for t in truth if not t.get("tpid_88a8")]
    assert Counter(key(r) for r in rows) == Counter(key(t) for t in want)
    assert sum(1 for r in rows if r["vni"] >= 0) == 40 and sum(1 for r in rows if r["roce_opcode"] >= 0) == 30
    ctr = np.concatenate([r.counters for r in results])
    assert list(ctr["agent_uptime_ms"]) == [3000, 23000, 43000] and set(ctr["in_octets"]) == {343300}
