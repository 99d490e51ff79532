"""devtools/scoring_compare.py: what compare must say around a scenario's change marker, from the scenario's faults."""

from __future__ import annotations

import yaml

from devtools.scoring_compare import CompareOutcome, expected_verdict
from tests.support.fixtures_path import REPO


def _doc(faults, changes):
    return {"simulation": {"faults": faults, "changes": changes}, "jobs": [{"name": "a"}, {"name": "b"}]}


def test_a_change_that_ends_a_fault_expects_improved_one_that_starts_one_worse():
    faults = [{"kind": "congestion", "job": "a", "start_s": 0, "end_s": 200}, {"kind": "straggler", "job": "b",
                                                                                   "start_s": 300, "end_s": 400}]
    assert expected_verdict(_doc(faults, []), {"at_s": 200, "job": "a"}) == "improved"
    assert expected_verdict(_doc(faults, []), {"at_s": 300, "job": "b"}) == "worse"
    assert expected_verdict(_doc(faults, []), {"at_s": 200, "job": "b"}) == "no significant change"  # b's fault: not then
    assert expected_verdict(_doc(faults, []), {"at_s": 250, "job": "a"}) == "no significant change"


def test_the_shipped_tuning_scenario_expects_improved_on_train_b():
    doc = yaml.safe_load((REPO / "scenarios" / "tuning.yaml").read_text())
    (change,) = doc["simulation"]["changes"]
    assert change["job"] == "train-b" and expected_verdict(doc, change) == "improved"


def test_an_outcome_is_correct_only_with_the_expected_verdict_and_not_the_opposite():
    assert CompareOutcome("a", "improved", {"improved": ["a ecn_ce_share"]}, 10).correct
    assert not CompareOutcome("a", "improved", {}, 10).correct
    assert not CompareOutcome("a", "improved", {"improved": ["a x"], "worse": ["a y"]}, 10).correct
    assert CompareOutcome("b", "no significant change", {}, 10).correct
    assert not CompareOutcome("b", "no significant change", {"worse": ["b x"]}, 10).correct  # a false verdict
    assert CompareOutcome("b", "worse", {"worse": ["b x"]}, 10).correct
    bad = CompareOutcome("a", "improved", error="no change marker for job a")
    assert not bad.correct and "error: no change marker" in bad.line() and "WRONG" in bad.line()
