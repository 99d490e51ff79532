"""The columnar sFlow decoder (decode_sflow_many) against tshark and the capture input truth.

Same checks as test_sflow_golden.py, on the batch path: per-5-tuple sums of
the pmacct sfprobe captures equal tshark's, and every sample of the fabric
capture (VXLAN, QinQ, IPv6 extension headers, RoCEv2) decodes to its input frame.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from ingest.decode import DecodeResult, TemplateCache
from ingest.decode.sflow_batch import decode_sflow_many
from ingest.pcapread import read_udp
from schemas.columns import FLOW_DTYPE, addr_str
from tests.fixtures_path import SHARED_FIXTURES

EXPORTS = SHARED_FIXTURES / "exports"
SUMMARIES = SHARED_FIXTURES / "summaries"
FABRIC = Path(__file__).resolve().parents[1] / "captures" / "pmacct_sfprobe_fabric"


def _batch(path, size=64):
    pkts = list(read_udp(path))
    cache = TemplateCache()
    out = []
    for i in range(0, len(pkts), size):
        part = pkts[i : i + size]
        out += decode_sflow_many([p.payload for p in part], [p.src_ip for p in part],
                                 [int(p.timestamp_s * 1000) for p in part], cache)
    assert all(isinstance(r, DecodeResult) for r in out)
    return out


@pytest.mark.skipif(not EXPORTS.is_dir(), reason="shared fixtures not present")
@pytest.mark.parametrize("name", ["pmacct_sfprobe_rate1", "pmacct_sfprobe_rate8"])
def test_batch_per_5tuple_matches_tshark(name):
    results = _batch(EXPORTS / f"{name}.pcap")
    flows = np.concatenate([r.flows for r in results])
    summary = json.loads((SUMMARIES / f"{name}.summary.json").read_text())
    assert flows.dtype == FLOW_DTYPE and len(flows) == summary["flow_samples"]
    assert sum(sum(r.problems.values()) for r in results) == 0
    got = defaultdict(lambda: [0, 0, 0, 0])
    for f in flows:
        proto = int(f["ip_protocol"])
        sport, dport = (0, 0) if proto in (1, 58) else (int(f["src_port"]), int(f["dst_port"]))
        g = got[f"{addr_str(f['src_addr'])}|{addr_str(f['dst_addr'])}|{proto}|{sport}|{dport}"]
        g[0] += 1
        g[1] += int(f["bytes"])
        g[2] += int(f["packets_est"])
        g[3] += int(f["bytes_est"])
    want = {}
    with open(SUMMARIES / f"{name}.per5tuple.csv") as fh:
        for row in csv.DictReader(fh):
            want[row["key"]] = [int(row[c]) for c in ("samples", "ip_len_sum", "est_packets", "est_ip_bytes")]
    assert dict(got) == want
    ctr = np.concatenate([r.counters for r in results])
    assert len(ctr) == summary["counter_samples"] > 0


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
