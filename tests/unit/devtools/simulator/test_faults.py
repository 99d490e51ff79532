"""The faults behind the diagnosis classes: incast transport / ECN / CE marks / CNPs / DCQCN, link flaps, and the
class each fault's truth line names."""

from __future__ import annotations

import pytest

from devtools.simulator import Simulation, scenario_from_dict
from devtools.simulator.faults import expected_diagnosis
from devtools.simulator.model import ScenarioError, ip_int, load_scenario
from tests.support.simulator import small, small_doc
from tests.support.wire import parse_sflow

SOURCES = ["g1", "g2", "g4"]


def incast(**kw) -> dict:
    return {"kind": "incast", "start_s": 0, "end_s": 10, "destination": "g3", "sources": SOURCES,
            "gbps_per_source": 12.0, "burst_ms": 500, "period_ms": 1000} | kw


def burst_segments(fault: dict):
    sim = Simulation(small([fault]), duration_s=10, kinds=set())
    segs = sim._segments(0, 1000)
    d = ip_int("10.9.2.1")
    srcs = [ip_int(n.ip) for n in sim.scen.cluster.nodes.values() if n.name in SOURCES]
    into = segs[(segs["dst"] == d) & (segs["t0"] < 500) & (segs["sport"] >= 32768) & (segs["proto"] > 0)]
    into = into[[s in srcs for s in into["src"].tolist()]]
    back = segs[(segs["src"] == d) & (segs["bth_op"] == 0x81)]
    return sim, segs, into, back


def test_a_tcp_incast_carries_no_ecn_codepoint_and_overflows_the_port():
    sim, segs, into, back = burst_segments(incast())
    assert len(into) and set((into["tos"] & 3).tolist()) == {0} and not len(back)
    drops = sim.effects.incast_excess_packets("g3", 0, 1000, segs, ip_int("10.9.2.1"), 25 * 10**9, 1500)
    assert drops > 0


def test_an_ect_incast_without_marking_is_ecn_capable_and_never_ce():
    _sim, _segs, into, _back = burst_segments(incast(ecn="ect"))
    assert set((into["tos"] & 3).tolist()) == {2}


def test_a_rocev2_incast_is_marked_answered_with_cnps_and_held_below_the_port_by_dcqcn():
    f = incast(transport="roce", ce_fraction=0.2, cnp_ratio=0.25, dcqcn=True)
    sim, segs, into, back = burst_segments(f)
    assert set(into["dport"].tolist()) == {4791}
    marked = into[(into["tos"] & 3) == 3]["packets"].sum()
    assert marked / into["packets"].sum() == pytest.approx(0.2, abs=0.01)
    assert back["packets"].sum() == pytest.approx(0.25 * marked, rel=0.05)  # CNPs from g3 back to the senders
    rate = into["bytes"].sum() * 8 / 0.5  # bytes of the 500 ms burst
    assert rate == pytest.approx(0.95 * 25e9, rel=0.02)
    assert sim.effects.incast_excess_packets("g3", 0, 1000, segs, ip_int("10.9.2.1"), 25 * 10**9, 1500) == 0


def test_a_flapping_port_reports_oper_down_and_carries_nothing_while_down():
    f = {"kind": "link_flap", "start_s": 5, "end_s": 25, "node": "g3", "down_s": 6, "period_s": 10}
    sim = Simulation(small([f]), duration_s=30, kinds={"sflow"})
    status = {}
    for _t, _k, d in sim.run():
        p = parse_sflow(d)
        if p["agent"] == "10.9.255.2":
            for c in p["counters"]:
                if c["if_index"] == 1:
                    status[(p["uptime"])] = c["status"]
    assert set(status.values()) == {1, 3}  # admin up; oper down (1) and up (3)
    assert not sim.effects.oper_up("g3", 5_000) and not sim.effects.oper_up("g3", 10_999)
    assert sim.effects.oper_up("g3", 11_000) and sim.effects.oper_up("g3", 26_000)
    segs = sim._segments(6000, 7000)
    g3 = ip_int("10.9.2.1")
    assert segs[(segs["src"] == g3) | (segs["dst"] == g3)]["bytes"].sum() == 0


@pytest.mark.parametrize("fault, want", [
    (incast(), "switch_buffer_microburst"),
    (incast(ecn="ect"), "congestion_control_not_reacting"),
    (incast(ecn="ect", ce_fraction=0.1), "switch_buffer_microburst"),
    (incast(transport="roce", ce_fraction=0.2, cnp_ratio=0.25, dcqcn=True), "congestion_handled_by_dcqcn"),
    (incast(transport="roce", ce_fraction=0.2, cnp_ratio=0.0), "congestion_control_not_reacting"),
    (incast(gbps_per_source=1.0), None),  # within the port: no drops, no marks
    ({"kind": "link_flap", "start_s": 0, "end_s": 10, "node": "g3"}, "physical_link_fault"),
    ({"kind": "straggler", "start_s": 0, "end_s": 10, "node": "g2", "job": "job"}, "host_not_network"),
    ({"kind": "congestion", "start_s": 0, "end_s": 10, "job": "job", "cnp_ratio": 0.0}, "congestion_control_not_reacting"),
    ({"kind": "congestion", "start_s": 0, "end_s": 10, "job": "job", "cnp_ratio": 0.3}, "congestion_handled_by_dcqcn"),
])  # fmt: skip
def test_each_fault_names_the_class_it_physically_is(fault, want):
    scen = small([fault])
    assert expected_diagnosis(scen, scen.faults[0]) == want
    (lab,) = [x for x in Simulation(scen, duration_s=10, kinds=set()).truth.lines() if x["type"] == "fault"]
    assert lab["diagnosis"] == want


def test_a_straggler_on_a_faulty_link_is_a_link_fault():
    scen = small([{"kind": "straggler", "start_s": 0, "end_s": 10, "node": "g3", "job": "job"},
                  {"kind": "link_flap", "start_s": 5, "end_s": 20, "node": "g3"}])
    assert expected_diagnosis(scen, scen.faults[0]) == "physical_link_fault"


@pytest.mark.parametrize("name, want", [("incast_ecn", "congestion_control_not_reacting"),
                                        ("incast_dcqcn", "congestion_handled_by_dcqcn"),
                                        ("congestion_nocnp", "congestion_control_not_reacting"),
                                        ("link_flap", "physical_link_fault"), ("incast", "switch_buffer_microburst"),
                                        ("straggler", "host_not_network"), ("congestion", "congestion_handled_by_dcqcn")])
def test_shipped_scenarios_label_their_class(name, want):
    from pathlib import Path

    scen = load_scenario(Path(__file__).resolve().parents[4] / "scenarios" / f"{name}.yaml")
    assert [expected_diagnosis(scen, f) for f in scen.faults] == [want]


@pytest.mark.parametrize("bad, msg", [
    ({"kind": "link_flap", "start_s": 0, "end_s": 10, "node": "g3", "down_s": 12, "period_s": 10}, "down_s"),
    ({"kind": "link_flap", "start_s": 0, "end_s": 10}, "needs node"),
    (incast(transport="ib"), "transport"),
    (incast(ce_fraction=1.5), "ce_fraction"),
])
def test_bad_fault_parameters_are_refused(bad, msg):
    doc = small_doc()
    doc["simulation"]["faults"] = [bad]
    with pytest.raises(ScenarioError, match=msg):
        scenario_from_dict(doc)


@pytest.mark.parametrize("name, want", [("weak_cnp", "congestion_handled_by_dcqcn"),
                                        ("few_marks", "congestion_control_not_reacting"),
                                        ("short_incast", "switch_buffer_microburst"),
                                        ("mild_straggler", "host_not_network")])
def test_the_bench_variants_load_and_label_their_class(name, want):
    from pathlib import Path

    scen = load_scenario(Path(__file__).resolve().parents[4] / "scenarios" / "variants" / f"{name}.yaml")
    assert scen.name == name and [expected_diagnosis(scen, f) for f in scen.faults] == [want]
