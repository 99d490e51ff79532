"""Each fault kind changes traffic, counters or exports as documented in faults.py."""

from collections import Counter, defaultdict
from datetime import datetime, timezone

import pytest

from devtools.simulator import Simulation, scenario_from_dict

from tests.support.simulator import small, small_doc
from tests.support.wire import parse_sflow, parse_v9


def windows(sim):
    return [x for x in sim.truth.lines() if x["type"] == "window"]


def pair_bytes(win, src, dst):
    return sum(p["bytes"] for p in win["pairs"] if p["src"] == src and p["dst"] == dst)


def node_out(win, node):
    return sum(p["bytes"] for p in win["pairs"] if p["src"] == node)


def run(faults, duration_s=30, kinds=None, scen=None):
    sim = Simulation(scen or small(faults), duration_s=duration_s, kinds=kinds)
    return sim, list(sim.run())


def labels(sim):
    return [x for x in sim.truth.lines() if x["type"] == "fault"]


def test_straggler_sends_fraction_of_peers():
    sim, _ = run([{"kind": "straggler", "start_s": 10, "end_s": 30, "node": "g2", "job": "job", "fraction": 0.25}], kinds=())
    w = windows(sim)
    before, during = w[0], w[2]
    ratio_before = pair_bytes(before, "g2", "g3") / pair_bytes(before, "g1", "g2")
    ratio_during = pair_bytes(during, "g2", "g3") / pair_bytes(during, "g1", "g2")
    assert ratio_before == pytest.approx(1, rel=0.02)
    assert ratio_during == pytest.approx(0.25, rel=0.05)
    (lab,) = labels(sim)
    assert lab["kind"] == "straggler" and lab["entities"] == {"node": "g2", "job": "job"}
    assert lab["start_ms"] == sim.start_ms + 10_000 and lab["end_ms"] == sim.start_ms + 30_000


def test_link_downgrade_counters_and_cap():
    f = {"kind": "link_downgrade", "start_s": 10, "end_s": 20, "node": "g3", "speed": "100M", "crc_errors_per_s": 100}
    doc = small_doc()
    doc["simulation"]["workloads"][0]["allreduce_mb"] = 400  # 4 Gbit/s bursts per node
    doc["simulation"]["faults"] = [f]
    sim, dgs = run(None, kinds={"sflow"}, scen=scenario_from_dict(doc))
    speeds, errors = {}, {}
    for t, _, d in dgs:
        p = parse_sflow(d)
        if p["agent"] != "10.9.255.2":
            continue
        for c in p["counters"]:
            if c["if_index"] == 1:
                speeds[t - sim.start_ms] = c["if_speed"]
                errors[t - sim.start_ms] = (c["in_errors"], c["dot3"][1])
    assert {s for t, s in speeds.items() if 10_000 <= t < 20_000} == {10**8}
    assert {s for t, s in speeds.items() if t < 10_000 or t >= 20_000} == {25 * 10**9}
    ts = sorted(errors)
    first, last = errors[ts[0]], errors[ts[-1]]
    assert last[0] - first[0] >= 100 * 5 and last[1] - first[1] >= 100 * 5  # CRC/FCS errors grow
    w = windows(sim)
    assert node_out(w[1], "g3") < 0.1 * node_out(w[0], "g3")  # capped at 100 Mbit/s
    assert max(node_out(w[1], "g3"), sum(p["bytes"] for p in w[1]["pairs"] if p["dst"] == "g3")) <= 1e8 / 8 * 10 * 1.01
    (lab,) = labels(sim)
    assert lab["entities"] == {"node": "g3", "switch": "t2", "if_index": 1}


def test_incast_bursts_and_discards():
    f = {"kind": "incast", "start_s": 10, "end_s": 20, "destination": "g1", "sources": ["g2", "g3", "g4", "st", "ms"],
         "gbps_per_source": 8, "burst_ms": 200, "period_ms": 1000}  # fmt: skip
    sim, dgs = run([f], kinds={"sflow"})
    w = windows(sim)
    into = [sum(p["bytes"] for p in x["pairs"] if p["dst"] == "g1" and p["src"] in f["sources"]) for x in w]
    # 5 sources x 8 Gbit/s = 40 Gbit/s for 200 ms per second -> 1 GB per second on top
    assert into[1] - into[0] > 9e9
    disc = {}
    for t, _, d in dgs:
        p = parse_sflow(d)
        if p["agent"] == "10.9.255.1":
            for c in p["counters"]:
                if c["if_index"] == 1:
                    disc[t - sim.start_ms] = c["out_discards"]
    ts = sorted(disc)
    assert disc[ts[0]] == 0 and disc[ts[-1]] > 1000
    assert all(disc[t] == disc[ts[-1]] for t in ts if t >= 21_000)
    (lab,) = labels(sim)
    assert lab["entities"]["destination"] == "g1" and lab["entities"]["if_index"] == 1


def inference_scenario(faults):
    doc = small_doc()
    doc["jobs"].append({"name": "inf", "nodes": ["g1", "g2", "g3"]})
    doc["simulation"]["workloads"] = [{"job": "inf", "kind": "inference", "frontend": "lb", "request_mbps": 80}]
    doc["simulation"]["faults"] = faults
    return scenario_from_dict(doc)


def test_lb_skew_shifts_share():
    scen = inference_scenario([{"kind": "lb_skew", "start_s": 10, "end_s": 30, "job": "inf", "replica": "g2", "share": 0.8}])
    sim, _ = run(None, kinds=(), scen=scen)
    w = windows(sim)
    share = [pair_bytes(x, "lb", "g2") / sum(pair_bytes(x, "lb", n) for n in ("g1", "g2", "g3")) for x in w]
    assert share[0] == pytest.approx(1 / 3, rel=0.01)
    assert share[2] == pytest.approx(0.8, rel=0.01)


def test_storage_slowdown_is_not_a_network_fault():
    f = {"kind": "storage_slowdown", "start_s": 10, "end_s": 30, "storage": "st", "factor": 0.2}
    base, base_dgs = run([], kinds={"sflow"})
    sim, dgs = run([f], kinds={"sflow"})
    wb, wf = windows(base), windows(sim)
    # dataset reads in the window fully inside the fault drop to ~20 %
    assert pair_bytes(wf[2], "st", "g1") == pytest.approx(0.2 * pair_bytes(wb[2], "st", "g1"), rel=0.05)
    # the network looks healthy: same speeds, no errors or discards anywhere
    for t, _, d in dgs:
        for c in parse_sflow(d)["counters"]:
            assert c["in_errors"] == 0 and c["out_discards"] == 0 and c["in_discards"] == 0
            assert c["if_speed"] in (10**10, 25 * 10**9, 100 * 10**9)
    (lab,) = labels(sim)
    assert lab["entities"] == {"node": "st", "network_fault": False}


@pytest.mark.parametrize(
    "fault, src, dst",
    [
        ({"kind": "segmentation_violation", "src": "g1", "dst": "mg", "dport": 5432, "mbps": 30}, "g1", "mg"),
        ({"kind": "exfiltration", "src": "ms", "dst": "bad", "dport": 443, "mbps": 500}, "ms", "203.0.113.9"),
        ({"kind": "off_hours_transfer", "src": "st", "dst": "mirror", "mbps": 300}, "st", "198.51.100.7"),
    ],
)
def test_policy_faults_add_traffic_only_in_their_window(fault, src, dst):
    sim, _ = run([{**fault, "start_s": 10, "end_s": 20}], kinds=())
    w = windows(sim)
    got = [pair_bytes(x, src, dst) for x in w]
    expected = fault["mbps"] * 1e6 / 8 * 10
    assert got[0] < 0.01 * expected and got[2] < 0.01 * expected  # only baseline chatter (DNS) outside
    assert got[1] - got[0] == pytest.approx(expected, rel=0.01)
    (lab,) = labels(sim)
    assert lab["kind"] == fault["kind"] and lab["entities"]["src"] == fault["src"] and lab["entities"]["dst"] == fault["dst"]


def test_off_hours_label_lies_off_hours():
    scen = small([{"kind": "off_hours_transfer", "start_s": 5, "end_s": 25, "src": "st", "dst": "mirror", "mbps": 300}],
                 start="2026-12-02T02:00:00Z")  # fmt: skip
    sim = Simulation(scen, duration_s=30, kinds=())
    list(sim.run())
    (lab,) = labels(sim)
    assert datetime.fromtimestamp(lab["start_ms"] / 1000, timezone.utc).hour == 2


def test_unregistered_host_is_sampled_on_its_port():
    f = {"kind": "unregistered_host", "start_s": 5, "end_s": 25, "ip": "10.9.1.99", "switch": "t1", "if_index": 30,
         "dst": "st", "dport": 2049, "mbps": 200}  # fmt: skip
    sim, dgs = run([f], kinds={"sflow"})
    seen = [fl for _, _, d in dgs for fl in parse_sflow(d)["flows"] if fl["src"] == "10.9.1.99"]
    assert seen and all(fl["in_if"] == 30 and fl["source_id"] == 30 for fl in seen)
    assert any(p["src"] == "10.9.1.99" and p["dst"] == "st" for w in windows(sim) for p in w["pairs"])
    (lab,) = labels(sim)
    assert lab["entities"] == {"src": "10.9.1.99", "dst": "st", "switch": "t1", "if_index": 30}


def test_exporter_loss_shows_as_sequence_gaps():
    f = {"kind": "exporter_loss", "start_s": 5, "end_s": 25, "exporter": "t2", "fraction": 0.3}
    sim, dgs = run([f], kinds={"sflow"})
    seqs = defaultdict(list)
    for _, _, d in dgs:
        p = parse_sflow(d)
        seqs[p["agent"]].append(p["seq"])
    s1, s2 = seqs["10.9.255.1"], seqs["10.9.255.2"]
    assert s1 == list(range(1, len(s1) + 1))
    missing = s2[-1] - len(s2)
    assert 0.15 * s2[-1] < missing < 0.45 * s2[-1] * 20 / 30 + 5
    (lab,) = labels(sim)
    assert lab["entities"] == {"exporter": "t2", "dropped": missing}


def test_clock_skew_offsets_export_time():
    f = {"kind": "clock_skew", "start_s": 10, "end_s": 20, "exporter": "nf", "skew_s": 45}
    sim, dgs = run([f], kinds={"netflow9"})
    templates: dict = {}
    offsets = Counter()
    for t, _, d in dgs:
        p = parse_v9(d, templates)
        rel = t - sim.start_ms
        offsets[(10_000 < rel <= 20_000, p["secs"] * 1000 - t)] += 1
        for r in p["records"]:
            # flow times derived the collector's way carry the skew too
            first_abs = p["secs"] * 1000 - (p["uptime"] - r[22])
            if 10_000 < rel <= 20_000:
                assert first_abs >= sim.start_ms + 45_000
    assert set(offsets) == {(False, 0), (True, 45_000)}


def _decoded_sflow(dgs):
    """(send time ms, flow records) of each sFlow datagram, through the ingest decoder."""
    import numpy as np

    from ingest.decode import TemplateCache, decode
    from schemas.columns import addr_str

    tc, out = TemplateCache(), []
    for t, kind, d in dgs:
        if kind == "sflow":
            f = decode(d, "10.9.255.1", t, tc).flows
            out.append((t, f, np.array([addr_str(a) for a in f["src_addr"]]), np.array([addr_str(a) for a in f["dst_addr"]])))
    return out


def test_congestion_marks_ce_towards_the_receiver_and_it_answers_cnps():
    f = {"kind": "congestion", "start_s": 10, "end_s": 30, "job": "job", "nodes": ["g3"], "ce_fraction": 0.3,
         "cnp_ratio": 0.5}
    sim, dgs = run([f], kinds={"sflow"})
    start = sim.start_ms + 10_000
    ce_dst, cnp_src, before = Counter(), Counter(), 0
    for t, fl, src, dst in _decoded_sflow(dgs):
        ce = (fl["tos"] & 3) == 3
        cnp = fl["roce_opcode"] == 0x81
        if t < start - 1000:
            before += int(ce.sum() + cnp.sum())
        ce_dst.update(dst[ce].tolist())
        cnp_src.update(src[cnp].tolist())
    assert before == 0
    assert set(ce_dst) == {"10.9.2.1"} and ce_dst["10.9.2.1"] > 20  # only traffic into g3 is marked
    assert set(cnp_src) == {"10.9.2.1"} and cnp_src["10.9.2.1"] > 5  # g3 is the notification point
    (lab,) = labels(sim)
    assert lab["entities"] == {"job": "job", "nodes": ["g3"]}


def test_syn_storm_opens_connections_from_the_node_and_gets_resets():
    f = {"kind": "syn_storm", "start_s": 10, "end_s": 30, "node": "g1", "targets": ["g2", "g3"], "syn_per_s": 5000,
         "rst_fraction": 1.0, "dport": 29500}
    sim, dgs = run([f], kinds={"sflow"})
    start = sim.start_ms + 10_000
    syn, rst, before = Counter(), Counter(), 0
    for t, fl, src, dst in _decoded_sflow(dgs):
        tcp = fl["ip_protocol"] == 6
        is_syn, is_rst = tcp & ((fl["tcp_flags"] & 0x02) != 0), tcp & ((fl["tcp_flags"] & 0x04) != 0)
        if t < start - 1000:
            before += int(is_syn.sum() + is_rst.sum())
        syn.update(zip(src[is_syn].tolist(), dst[is_syn].tolist(), fl["dst_port"][is_syn].tolist()))
        rst.update(zip(src[is_rst].tolist(), dst[is_rst].tolist()))
    assert before == 0  # the healthy workloads open no connections the sampler sees
    assert set(syn) == {("10.9.1.1", "10.9.1.2", 29500), ("10.9.1.1", "10.9.2.1", 29500)}
    assert sum(syn.values()) == pytest.approx(20 * 5000 / 512, rel=0.3)  # 1 in 512 of the attempts
    assert set(rst) == {("10.9.1.2", "10.9.1.1"), ("10.9.2.1", "10.9.1.1")}
    (lab,) = labels(sim)
    assert lab["entities"] == {"node": "g1", "targets": ["g2", "g3"], "switch": "t1", "if_index": 1}
