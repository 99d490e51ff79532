"""devtools.scoring_diagnosis: each matched detection's final diagnosis against its fault's truth label."""

from __future__ import annotations

from devtools.scoring import Observed, score_detections
from devtools.scoring_diagnosis import diagnosis_table, merge_diagnoses, score_diagnoses

T0 = 1_800_000_000_000
INVENTORY = {
    "nodes": [{"name": f"gpu{i:02d}", "ips": [f"10.0.1.{i}"], "group": "gpu"} for i in range(1, 9)],
    "jobs": [{"name": "train-a", "nodes": ["gpu01", "gpu02", "gpu03", "gpu04"]},
             {"name": "train-b", "nodes": ["gpu05", "gpu06", "gpu07", "gpu08"]}],
    "switches": [{"name": "tor1", "agent": "10.0.255.1"}],
}  # fmt: skip


def truth(*faults):
    return [{"type": "scenario", "window_ms": 10_000, "inventory": INVENTORY}, *faults]


def fault(kind, start_s, end_s, entities, diagnosis, **params):
    return {"type": "fault", "kind": kind, "start_ms": T0 + start_s * 1000, "end_ms": T0 + end_s * 1000,
            "entities": entities, "params": params, "diagnosis": diagnosis}


INCAST = fault("incast", 60, 120, {"destination": "gpu05", "sources": ["gpu06", "gpu07", "gpu08", "gpu01"],
                                   "switch": "tor1", "if_index": 5}, "congestion_handled_by_dcqcn",
               transport="roce", ce_fraction=0.2)
FLAP = fault("link_flap", 60, 200, {"node": "gpu02", "switch": "tor1", "if_index": 2}, "physical_link_fault")
STRAGGLER = fault("straggler", 60, 200, {"node": "gpu03", "job": "train-a"}, "host_not_network")


def obs(kind, entity, t_s, verdict, cause=""):
    return Observed(kind, entity, T0 + t_s * 1000, "", cause, verdict)


def test_correct_wrong_undetermined_and_none_per_expected_class():
    dets = [obs("incast", "gpu05", 61, "congestion_handled_by_dcqcn"),
            obs("oper_down", "tor1/if2", 61, "physical_link_fault"),
            obs("oper_down", "tor1/if2", 101, "undetermined"),                 # duplicate: scored too
            obs("straggler", "gpu03", 90, "switch_buffer_microburst"),
            obs("straggler", "gpu02", 90, "physical_link_fault", "10.0.255.1|2"),  # explained by the flap
            obs("congestion", "congestion|train-b|ecn_ce", 70, ""),               # explained by the marked incast
            obs("straggler", "gpu05", 90, "undetermined")]                        # explained; no class of its own
    rep = score_detections(dets, truth(INCAST, FLAP, STRAGGLER))
    assert sorted((o.detection.kind, o.detection.entity, o.status) for o in rep.outcomes) == [
        ("congestion", "congestion|train-b|ecn_ce", "explained"), ("incast", "gpu05", "hit"),
        ("oper_down", "tor1/if2", "duplicate"), ("oper_down", "tor1/if2", "hit"),
        ("straggler", "gpu02", "explained"), ("straggler", "gpu03", "hit"), ("straggler", "gpu05", "explained")]
    got = {k: (v.correct, v.wrong, v.undetermined, v.none) for k, v in score_diagnoses(rep).items()}
    assert got == {"congestion_handled_by_dcqcn": (1, 0, 0, 1), "physical_link_fault": (2, 0, 1, 0),
                   "host_not_network": (0, 1, 0, 0)}
    assert score_diagnoses(rep)["host_not_network"].wrong_as == ["straggler gpu03: switch_buffer_microburst"]


def test_false_positives_and_faults_without_a_class_are_not_scored():
    quiet = fault("incast", 60, 120, {"destination": "gpu05", "sources": [], "switch": "tor1", "if_index": 5}, None)
    rep = score_detections([obs("incast", "gpu05", 61, "undetermined"), obs("incast", "gpu07", 300, "host_not_network")],
                           truth(quiet))
    assert score_diagnoses(rep) == {}


def test_merge_and_table():
    rep = score_detections([obs("oper_down", "tor1/if2", 61, "physical_link_fault")], truth(FLAP))
    tot = merge_diagnoses([score_diagnoses(rep), score_diagnoses(rep)])
    assert tot["physical_link_fault"].correct == 2 and tot["physical_link_fault"].scored == 2
    lines = diagnosis_table(tot)
    assert "physical_link_fault" in lines[1] and lines[1].split()[1:] == ["2", "2", "0", "0", "0"]
