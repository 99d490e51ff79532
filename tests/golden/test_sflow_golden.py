"""pmacctd sfprobe captures decoded record for record against the tshark summaries.

Every check runs on both ways the compiled decoder is called -- one datagram
per ``decode`` call, and ``decode_sflow_many`` on groups of 64 datagrams as
ingest uses it -- and on the readable reference the differential tests hold it to.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from ingest.decode.reference.sflow import decode_sflow as decode_sflow_reference
from ingest.pcapread import read_udp
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, PROTO_SFLOW5, addr_str
from tests.support.captures import decode_sflow_groups
from tests.support.fixtures_path import SHARED_FIXTURES

EXPORTS = SHARED_FIXTURES / "exports"
SUMMARIES = SHARED_FIXTURES / "summaries"
CASES = {"pmacct_sfprobe_rate1": (5771, 1, 890), "pmacct_sfprobe_rate8": (723, 8, 116)}

pytestmark = pytest.mark.skipif(not EXPORTS.is_dir(), reason="shared fixtures not present")


def _decode_all(name, path="datagram", group=64):
    cache = TemplateCache()
    pkts = list(read_udp(EXPORTS / f"{name}.pcap"))
    if path in ("datagram", "reference"):
        one = decode if path == "datagram" else decode_sflow_reference
        return [one(p.payload, p.src_ip, int(p.timestamp_s * 1000), cache) for p in pkts]
    return decode_sflow_groups(pkts, group, cache)


@pytest.fixture(scope="module", params=[(n, path) for n in sorted(CASES) for path in ("datagram", "batch", "reference")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def decoded(request):
    name, path = request.param
    results = _decode_all(name, path)
    flows = np.concatenate([r.flows for r in results])
    counters = np.concatenate([r.counters for r in results])
    summary = json.loads((SUMMARIES / f"{name}.summary.json").read_text())
    return name, results, flows, counters, summary


def test_datagrams_and_headers(decoded):
    name, results, flows, counters, summary = decoded
    assert len(results) == summary["datagrams"] == CASES[name][2]
    agents = Counter(f"agent={r.header.exporter} sub_agent_id={r.header.domain}" for r in results)
    assert dict(agents) == summary["header"]["agents"]
    seqs = [r.header.sequence for r in results]
    assert min(seqs) == summary["header"]["sequence_min"] and max(seqs) == summary["header"]["sequence_max"]
    ups = [r.header.uptime_ms for r in results]
    assert min(ups) == summary["header"]["sysuptime_ms_min"] and max(ups) == summary["header"]["sysuptime_ms_max"]
    assert all(r.header.increment == 1 and r.header.protocol == "sflow5" for r in results)
    assert sum(sum(r.problems.values()) for r in results) == 0


def test_flow_columns(decoded):
    name, _results, flows, _counters, summary = decoded
    n, rate, _ = CASES[name]
    assert flows.dtype == FLOW_DTYPE
    assert len(flows) == summary["flow_samples"] == n
    assert set(flows["export_protocol"]) == {PROTO_SFLOW5}
    assert {addr_str(a) for a in flows["exporter_addr"]} == {"10.254.1.1"}
    assert set(flows["sampling_rate"]) == {rate}
    assert set(flows["packets"]) == {1}
    assert set(flows["in_if"]) == {3} and set(flows["out_if"]) == {0x3FFFFFFF}
    assert set(flows["sampler_id"]) == {1}  # source id type 0 index 1
    assert set(flows["observation_domain"]) == {rate}  # pmacct config sets sub-agent id = rate here
    assert (flows["time_start_ms"] == flows["time_received_ms"]).all()
    assert (flows["vxlan_vni"] == -1).all()
    roce = (flows["ip_protocol"] == 17) & (flows["dst_port"] == 4791)
    assert roce.any()
    assert ((flows["roce_opcode"] >= 0) == roce).all() and ((flows["roce_dest_qp"] >= 0) == roce).all()
    t = summary["totals"]
    assert int(flows["bytes"].sum()) == t["ip_len_sum"]
    assert int(flows["packets_est"].sum()) == t["est_packets"]
    assert int(flows["bytes_est"].sum()) == t["est_ip_bytes"]
    vlans = Counter(int(v) for v in flows["vlan"])
    want = Counter()
    for pair, cnt in summary["extended_switch_vlans"].items():
        want[int(pair.split()[0].split("=")[1])] += cnt
    assert vlans == want
    assert vlans[110] > 0 and vlans[210] > 0
    assert Counter(int(v) for v in flows["ip_version"])[6] > 0


def test_per_5tuple(decoded):
    name, _results, flows, _counters, _summary = decoded
    got = defaultdict(lambda: [0, 0, 0, 0])
    for f in flows:
        proto = int(f["ip_protocol"])
        sport, dport = (0, 0) if proto in (1, 58) else (int(f["src_port"]), int(f["dst_port"]))
        key = f"{addr_str(f['src_addr'])}|{addr_str(f['dst_addr'])}|{proto}|{sport}|{dport}"
        g = got[key]
        g[0] += 1
        g[1] += int(f["bytes"])
        g[2] += int(f["packets_est"])
        g[3] += int(f["bytes_est"])
    want = {}
    with open(SUMMARIES / f"{name}.per5tuple.csv") as fh:
        for row in csv.DictReader(fh):
            want[row["key"]] = [int(row[c]) for c in ("samples", "ip_len_sum", "est_packets", "est_ip_bytes")]
    assert dict(got) == want


def test_icmp_type_code(decoded):
    _name, _results, flows, _counters, _summary = decoded
    icmp = flows[np.isin(flows["ip_protocol"], (1, 58))]
    assert len(icmp) > 0
    # echo request/reply: type*256+code with code 0
    assert set(int(x) for x in icmp["dst_port"]) <= {8 * 256, 0, 128 * 256, 129 * 256}
    assert (icmp["src_port"] == 0).all()


def test_counter_samples(decoded):
    _name, results, _flows, counters, summary = decoded
    assert counters.dtype == COUNTER_DTYPE
    want = summary["counter_samples_list"]
    assert len(counters) == len(want) == summary["counter_samples"]
    by_seq = {r.header.sequence: r for r in results}
    for c, w in zip(counters, want):
        r = by_seq[w["datagram_seq"]]
        assert len(r.counters) == 1 and r.counters[0] == c
        assert c["agent_uptime_ms"] == w["datagram_uptime_ms"]
        assert c["sample_sequence"] == w["sample_seq"]
        assert c["source_id"] == (w["source_id_type"] << 24) | w["source_id_index"]
        assert addr_str(c["exporter_addr"]) == "10.254.1.1"
        pairs = {
            "if_index": "ifindex", "if_type": "iftype", "if_speed": "ifspeed", "if_direction": "ifdirection",
            "in_octets": "ifinoct", "in_ucast_pkts": "ifinpkt", "in_mcast_pkts": "ifinmcast",
            "in_bcast_pkts": "ifinbcast", "in_discards": "ifindisc", "in_errors": "ifinerr",
            "in_unknown_protos": "ifinunk", "out_octets": "ifoutoct", "out_ucast_pkts": "ifoutpkt",
            "out_mcast_pkts": "ifoutmcast", "out_bcast_pkts": "ifoutbcast", "out_discards": "ifoutdisc",
            "out_errors": "ifouterr", "promiscuous": "ifpromisc",
        }
        for col, key in pairs.items():
            assert int(c[col]) == int(w[key]), col
        assert bool(c["if_admin_up"]) == (w["ifadmin_status"] == "1")
        assert bool(c["if_oper_up"]) == (w["ifoper_status"] == "1")
        assert not c["has_ethernet"]


# --------------------------------------------------------------------------- own capture: fabric headers

FABRIC = Path(__file__).resolve().parents[1] / "captures" / "pmacct_sfprobe_fabric"


def _fabric_key(d):
    return (d["ip_version"], d["src"], d["dst"], d["proto"], d["sport"], d["dport"], d["ip_len"], d["vlan"], d["vni"],
            d["roce_opcode"], d["roce_dest_qp"], d["tcp_flags"], d["tos"])


def test_pmacct_fabric_capture_matches_input_truth():
    """pmacctd sfprobe fed VXLAN / QinQ / IPv6 ext headers / RoCEv2 / fragments: every sample decodes to the input."""
    truth = json.loads((FABRIC / "input_truth.json").read_text())["truth"]
    cache = TemplateCache()
    rows, results = [], []
    for pkt in read_udp(FABRIC / "pmacct_sfprobe_fabric.pcap"):
        r = decode(pkt.payload, pkt.src_ip, int(pkt.timestamp_s * 1000), cache)
        results.append(r)
        for f in r.flows:
            rows.append(dict(
                ip_version=int(f["ip_version"]), src=addr_str(f["src_addr"]), dst=addr_str(f["dst_addr"]),
                proto=int(f["ip_protocol"]), sport=int(f["src_port"]), dport=int(f["dst_port"]), ip_len=int(f["bytes"]),
                vlan=int(f["vlan"]), vni=int(f["vxlan_vni"]), roce_opcode=int(f["roce_opcode"]),
                roce_dest_qp=int(f["roce_dest_qp"]), tcp_flags=int(f["tcp_flags"]), tos=int(f["tos"]),
            ))
    assert all(not r.problems for r in results)
    assert {r.header.exporter for r in results} == {"10.254.9.9"} and {r.header.domain for r in results} == {3}
    # pmacctd 1.7.7 drops 802.1ad (0x88a8) frames before sampling: the 40 QinQ frames with TPID 0x88a8 never appear
    want = [t for t in truth if not t.get("tpid_88a8")]
    assert len(want) == len(truth) - 40
    assert Counter(_fabric_key(r) for r in rows) == Counter(_fabric_key(t) for t in want)
    assert sum(1 for r in rows if r["vni"] >= 0) == 40
    assert sum(1 for r in rows if r["roce_opcode"] >= 0) == 30
    assert sum(1 for r in rows if r["ip_version"] == 6) == 90
    # counter samples as tshark 4.0.17 decodes them (3 generic records, flushed at shutdown)
    ctr = np.concatenate([r.counters for r in results])
    assert list(ctr["agent_uptime_ms"]) == [3000, 23000, 43000] and list(ctr["sample_sequence"]) == [1, 2, 3]
    assert set(ctr["if_index"]) == {7} and set(ctr["if_speed"]) == {400_000_000_000}
    assert set(ctr["in_octets"]) == {343300} and set(ctr["in_ucast_pkts"]) == {140}
    assert set(ctr["in_bcast_pkts"]) == {90} and ctr["if_oper_up"].all()
