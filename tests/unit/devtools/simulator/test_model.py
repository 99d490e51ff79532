"""Scenario loading, validation and the inventory view."""

from pathlib import Path

import pytest
import yaml

from devtools.simulator import ScenarioError, load_scenario, scenario_from_dict
from devtools.simulator.model import format_speed, parse_speed

from tests.support.simulator import small_doc

SCENARIOS = Path(__file__).resolve().parents[4] / "scenarios"
SHIPPED = ["healthy", "straggler", "link_downgrade", "incast", "segmentation", "lb_skew", "storage_slowdown",
           "storage_link", "congestion", "syn_storm", "incast_ecn", "incast_dcqcn", "congestion_nocnp", "link_flap", "mixed"]


def test_speeds():
    assert parse_speed("25G") == 25_000_000_000
    assert parse_speed("100M") == 100_000_000
    assert parse_speed("1.5G") == 1_500_000_000
    assert format_speed(25_000_000_000) == "25G"
    assert format_speed(1_000_000_000) == "1G"
    with pytest.raises(ScenarioError):
        parse_speed("fast")


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load(name):
    scen = load_scenario(SCENARIOS / f"{name}.yaml")
    assert scen.name == name
    gpu = [n for n in scen.cluster.nodes.values() if n.group == "gpu"]
    assert 8 <= len(gpu) <= 16
    assert len(scen.cluster.switches) == 2
    assert {"storage", "mgmt", "model-store"} <= {n.group for n in scen.cluster.nodes.values()}
    # the YAML's inventory keys say the same as the model's inventory view
    doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    inv = scen.cluster.to_inventory_dict()
    assert inv["nodes"] == doc["nodes"]
    assert inv["switches"] == doc["switches"]
    assert inv["jobs"] == doc["jobs"]
    assert inv["cluster_ranges"] == doc["cluster_ranges"]


def test_inventory_dict_shape():
    inv = scenario_from_dict(small_doc()).cluster.to_inventory_dict()
    assert set(inv) == {"nodes", "jobs", "switches", "cluster_ranges", "external_authorized"}
    assert set(inv["nodes"][0]) == {"name", "ips", "rack", "switch", "group", "capacity"}
    assert inv["nodes"][0]["capacity"] == "25G"
    assert set(inv["switches"][0]) == {"name", "agent", "ports"}
    assert set(inv["switches"][0]["ports"][0]) == {"if_index", "node", "speed"}
    assert all(p["node"] for s in inv["switches"] for p in s["ports"])  # uplinks are not inventory ports
    assert inv["jobs"] == [{"name": "job", "nodes": ["g1", "g2", "g3", "g4"]}]


@pytest.mark.parametrize("name", ["healthy", "mixed"])
def test_processors_inventory_loader_accepts_scenarios(name):
    from processors.config_files import read_inventory
    from processors.logic.enrich.inventory import Inventory

    scen = load_scenario(SCENARIOS / f"{name}.yaml")
    a = read_inventory(SCENARIOS / f"{name}.yaml")
    b = Inventory.from_dict(scen.cluster.to_inventory_dict())
    assert a.n_entries == b.n_entries >= len(scen.cluster.nodes)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["simulation"]["faults"].append({"kind": "meteor", "start_s": 1, "end_s": 2}), "unknown fault kind"),
        (lambda d: d["simulation"]["faults"].append({"kind": "straggler", "start_s": 5, "end_s": 2, "node": "g1"}), "end_s"),
        (lambda d: d["simulation"]["faults"].append({"kind": "straggler", "start_s": 1, "end_s": 2, "node": "zz"}), "unknown node"),
        (lambda d: d["simulation"]["faults"].append({"kind": "clock_skew", "start_s": 1, "end_s": 2, "exporter": "t1"}), "sFlow"),
        (lambda d: d["switches"][0]["ports"].pop(0), "no port"),
        (lambda d: d["jobs"].append({"name": "x", "nodes": ["nope"]}), "unknown node"),
        (lambda d: d["simulation"]["workloads"][0].update(compute_s=2.0), "exceeds period"),
        (lambda d: d["simulation"]["workloads"][0].update(colective="ring"), "unknown keys"),
    ],
)
def test_bad_scenarios_are_rejected(mutate, message):
    doc = small_doc()
    mutate(doc)
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(doc)


def test_healthy_minute_is_a_few_thousand_datagrams():
    from devtools.simulator import generate

    n = sum(1 for _ in generate(SCENARIOS / "healthy.yaml", duration_s=60))
    assert 1000 <= n <= 10000


@pytest.mark.parametrize("name", SHIPPED[1:])
def test_shipped_fault_scenarios_label_their_faults(name):
    from devtools.simulator.faults import fault_labels

    scen = load_scenario(SCENARIOS / f"{name}.yaml")
    labels = fault_labels(scen, scen.start_ms, int(scen.duration_s * 1000))
    assert len(labels) == len(scen.faults) and all(lab["entities"] for lab in labels)
    assert all(scen.start_ms < lab["start_ms"] < lab["end_ms"] <= scen.start_ms + scen.duration_s * 1000 for lab in labels)
    if name == "mixed":  # demo: something to detect within the first minute of scenario time
        assert min(lab["start_ms"] for lab in labels) - scen.start_ms <= 30_000
