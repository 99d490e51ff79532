"""The simulator's fabric: ECMP over a leaf's uplinks, polarisation, rails, the scenario as an inventory, the
512-node generator."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from devtools.fabricgen import fabric_inventory_text, main as fabricgen_main
from devtools.simulator.engine import Simulation
from devtools.simulator.model import ScenarioError, ip_int, load_scenario, scenario_from_dict
from devtools.simulator.truth import TruthRecorder
from processors.logic.enrich.inventory import Inventory


def routed(name: str, t0: int = 0):
    """(simulation, segments of the chunk at t0 (a communication phase), ssw, dsw, up_src, up_dst)."""
    sim = Simulation(name, duration_s=10)
    segs = sim._segments(t0, t0 + 1000)
    ssw, _ = sim._where(segs["src"])
    dsw, _ = sim._where(segs["dst"])
    up_src, up_dst = sim.ecmp.route(segs, ssw, dsw, t0, t0 + 1000)
    return sim, segs, ssw, dsw, up_src, up_dst


def test_ecmp_spreads_leaf_to_leaf_flows_over_the_uplinks_and_keeps_local_traffic_local():
    sim, segs, ssw, dsw, up_src, up_dst = routed("fabric_healthy", 1000)
    cross = (ssw != dsw) & (ssw >= 0) & (dsw >= 0)
    assert cross.any() and (up_src[cross] >= 0).all() and (up_dst[cross] >= 0).all()
    assert (up_src[~cross] == -1).all()
    leaf = sim.sw_names.index("leaf-su01-r0")
    ports, n = np.unique(up_src[cross & (ssw == leaf)], return_counts=True)
    assert ports.tolist() == [9, 10, 11, 12] and n.max() <= 2 * n.min()  # 32 flows on 4 uplinks, none idle
    # the destination leaf receives each segment on its link from the spine the source chose
    fab = sim.scen.cluster.fabric
    for i in np.flatnonzero(cross)[:20].tolist():
        spine = next(s for p, s, _, _ in fab.uplinks[sim.sw_names[ssw[i]]] if p == up_src[i])
        assert up_dst[i] in fab.towards(sim.sw_names[dsw[i]], spine)


def test_polarised_leaf_puts_every_flow_on_one_uplink():
    sim, segs, ssw, dsw, up_src, _ = routed("ecmp_polarised", 61_000)
    leaf = sim.sw_names.index("leaf-su01-r0")
    mine = (ssw == leaf) & (dsw >= 0) & (dsw != leaf)
    assert mine.any() and set(up_src[mine].tolist()) == {9}
    other = (ssw == sim.sw_names.index("leaf-su02-r0")) & (dsw >= 0) & (dsw != ssw)
    assert len(set(up_src[other].tolist())) == 4  # other leaves still hash normally
    # before the fault the same leaf spreads
    _, _, ssw0, dsw0, up0, _ = routed("ecmp_polarised", 1000)
    assert len(set(up0[(ssw0 == leaf) & (dsw0 >= 0) & (dsw0 != leaf)].tolist())) == 4


def test_rails_carry_rank_r_traffic_nic_to_nic_and_a_degraded_rail_carries_less():
    scen = load_scenario("scenarios/rail_degraded.yaml")
    nics = {c.ip: (n.name, c.rail) for n in scen.cluster.nodes.values() for c in n.nics}
    by_ip = {ip_int(ip): v for ip, v in nics.items()}
    for t0, expect in ((1000, 1.0), (61_000, 0.3)):
        sim = Simulation(scen, duration_s=70)
        segs = sim._segments(t0, t0 + 1000)
        rails = {}
        for s, d, b in zip(segs["src"].tolist(), segs["dst"].tolist(), segs["bytes"].tolist()):
            (sn, sr), (dn, dr) = by_ip[s], by_ip[d]
            assert sr == dr  # NIC r to NIC r
            if sn == "gpu-su01-03":
                rails[sr] = rails.get(sr, 0) + b
        assert rails[1] / rails[0] == pytest.approx(expect, rel=0.02)


def test_fabric_scenarios_are_valid_inventories_and_truth_sums_a_nodes_nics():
    for name in ("fabric_healthy", "ecmp_polarised", "rail_degraded", "job_spread"):
        scen = load_scenario(f"scenarios/{name}.yaml")
        inv = Inventory.from_dict(scen.cluster.to_inventory_dict())
        assert inv.topology.uplinks("leaf-su01-r0") == [(9, "spine-01", 1, 25e9), (10, "spine-01", 2, 25e9),
                                                       (11, "spine-02", 1, 25e9), (12, "spine-02", 2, 25e9)]
        assert inv.topology.rails == [0, 1]
    sim = Simulation("fabric_healthy", duration_s=10)
    truth = TruthRecorder(sim.scen, 1, 0, 10_000, 10_000)
    truth.add(sim._segments(1000, 2000))
    window = next(x for x in truth.lines() if x["type"] == "window")
    pairs = [(p["src"], p["dst"]) for p in window["pairs"]]
    assert len(pairs) == len(set(pairs)) and ("gpu-su01-01", "gpu-su01-02") in pairs


def test_scenario_fabric_errors():
    doc = yaml.safe_load(open("scenarios/fabric_healthy.yaml"))
    doc["links"][0] = {"a": "leaf-su01-r0:9", "b": "spine-09:1", "speed": "25G"}
    with pytest.raises(ScenarioError, match="unknown switch 'spine-09'"):
        scenario_from_dict(doc)
    doc = yaml.safe_load(open("scenarios/fabric_healthy.yaml"))
    doc["simulation"]["faults"] = [{"kind": "ecmp_polarised", "switch": "spine-01", "start_s": 1, "end_s": 2}]
    with pytest.raises(ScenarioError, match="not a leaf with uplinks"):
        scenario_from_dict(doc)


def test_generator_writes_a_valid_fabric_and_refuses_bad_counts(capsys):
    inv = Inventory.parse(fabric_inventory_text(nodes=64, rails=4, per_leaf=16, spines=4, links_per_spine=2),
                          "gen.yaml")
    t = inv.topology
    assert (len(inv.node_names), len(t.leaves), len(t.spines), len(t.links), len(t.nics)) == (64, 16, 4, 128, 256)
    assert t.uplinks("leaf-su01-r0")[0] == (17, "spine-01", 1, 400e9)
    assert [n.rail for n in t.node_nics("gpu-su04-16")] == [0, 1, 2, 3]
    assert fabricgen_main(["--nodes", "30", "--nodes-per-leaf", "32"]) == 2
    assert "not a multiple" in capsys.readouterr().err
