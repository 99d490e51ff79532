"""born_broken_file: each fault of a shipped scenario from its job's start, the rest of the file unchanged."""

from pathlib import Path

import yaml

from devtools.scenario_variants import born_broken_file
from devtools.simulator.model import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_faults_start_with_the_job_they_name_and_keep_their_end(tmp_path):
    out = born_broken_file(SCENARIOS / "congestion.yaml", tmp_path)
    assert out == tmp_path / "congestion-born-broken.yaml"
    scen = yaml.safe_load(out.read_text())
    assert scen["simulation"]["faults"] == [
        {"kind": "congestion", "start_s": 0.3, "end_s": 210, "job": "train-b", "nodes": ["gpu07"],
         "ce_fraction": 0.15, "cnp_ratio": 0.3}]  # train-b starts at 0.3 s
    assert scen["simulation"]["name"] == "congestion-born-broken"
    original = yaml.safe_load((SCENARIOS / "congestion.yaml").read_text())
    assert scen["simulation"]["workloads"] == original["simulation"]["workloads"]
    assert scen["nodes"] == original["nodes"]
    load_scenario(out)  # still a valid scenario


def test_a_fault_naming_no_job_starts_at_zero_and_a_scenario_without_faults_has_no_variant(tmp_path):
    scen = yaml.safe_load(born_broken_file(SCENARIOS / "storage_slowdown.yaml", tmp_path).read_text())
    assert [(f["kind"], f["start_s"], f["end_s"]) for f in scen["simulation"]["faults"]] == [
        ("storage_slowdown", 0.0, 220)]
    assert born_broken_file(SCENARIOS / "healthy.yaml", tmp_path) is None
