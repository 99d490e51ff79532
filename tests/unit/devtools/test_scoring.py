"""devtools.scoring: expectations from faults, matching, consequence rules, traffic-matrix error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.scoring import (
    Observed,
    entity_tokens,
    expected_detections,
    faults_from_truth,
    matrix_error,
    matrix_total_error,
    merge_scores,
    score_detections,
)

T0 = 1_800_000_000_000
W = 10_000

INVENTORY = {
    "nodes": [
        *({"name": f"gpu{i:02d}", "ips": [f"10.0.1.{i}"], "group": "gpu"} for i in range(1, 9)),
        {"name": "mgmt01", "ips": ["10.0.20.1"], "group": "mgmt"},
        {"name": "stor01", "ips": ["10.0.10.1"], "group": "storage"},
        {"name": "mstore01", "ips": ["10.0.30.1"], "group": "model-store"},
    ],
    "jobs": [{"name": "train-a", "nodes": ["gpu01", "gpu02", "gpu03", "gpu04"]},
             {"name": "train-b", "nodes": ["gpu05", "gpu06", "gpu07", "gpu08"]}],
}  # fmt: skip


def fault(kind, start_s, end_s, entities, **params):
    return {"type": "fault", "kind": kind, "start_ms": T0 + start_s * 1000, "end_ms": T0 + end_s * 1000,
            "entities": entities, "params": params}  # fmt: skip


def truth(faults=(), windows=None, rate=4096):
    lines = [{"type": "scenario", "name": "t", "seed": 1, "start_ms": T0, "duration_ms": 300_000, "window_ms": W,
              "sflow_sampling_rate": rate, "inventory": INVENTORY}]  # fmt: skip
    lines += list(faults)
    for i, pairs in enumerate(windows or []):
        lines.append({"type": "window", "start_ms": T0 + i * W, "end_ms": T0 + (i + 1) * W,
                      "bytes": sum(p["bytes"] for p in pairs), "pairs": pairs})  # fmt: skip
    return lines


def ring_windows(n=30, extra=()):
    """gpu01 -> gpu02 -> gpu03 -> gpu04 -> gpu01 collective traffic, plus ``extra`` pairs, in every window."""
    ring = ["gpu01", "gpu02", "gpu03", "gpu04"]
    nxt = ring[1:] + ring[:1]
    pairs = [{"src": a, "dst": b, "bytes": 1_500_000_000, "packets": 1_000_000} for a, b in zip(ring, nxt)]
    return [pairs + list(extra) for _ in range(n)]


STRAGGLER = fault("straggler", 60, 240, {"node": "gpu03", "job": "train-a"}, fraction=0.35)
LINK = fault("link_downgrade", 60, 200, {"node": "gpu02", "switch": "tor1", "if_index": 2}, crc_errors_per_s=150)
INCAST = fault("incast", 30, 90, {"destination": "gpu05", "sources": ["gpu01", "gpu02"], "switch": "tor1",
                                   "if_index": 5})
SEG = fault("segmentation_violation", 30, 150, {"src": "gpu07", "dst": "mgmt01", "src_ip": "10.0.1.7",
                                                "dst_ip": "10.0.20.1"})
EXFIL = fault("exfiltration", 90, 210, {"src": "mstore01", "dst": "unknown-ext", "src_ip": "10.0.30.1",
                                        "dst_ip": "203.0.113.66"})
UNREG = fault("unregistered_host", 45, 285, {"src": "10.0.1.200", "dst": "stor01", "switch": "tor1", "if_index": 30})
OFFH = fault("off_hours_transfer", 120, 270, {"src": "stor01", "dst": "mirror", "src_ip": "10.0.10.1",
                                              "dst_ip": "198.51.100.10"})
LOSS = fault("exporter_loss", 100, 200, {"exporter": "tor2", "dropped": 10}, fraction=0.2)


def at(s: float) -> int:
    return T0 + int(s * 1000)


# --------------------------------------------------------------------------- expectations


def test_expected_detections_cover_each_fault_kind():
    faults = faults_from_truth(truth([STRAGGLER, LINK, INCAST, SEG, EXFIL, UNREG, OFFH, LOSS]))
    exp, uncovered = expected_detections(faults, INVENTORY)
    got = sorted((e.detector, tuple(sorted(e.tokens))) for e in exp)
    assert got == [
        ("error_burst", ("tor1/if2",)),
        ("exfiltration", ("203.0.113.66",)),
        ("incast", ("gpu05",)),
        ("link_downgrade", ("tor1/if2",)),
        ("off_hours_transfer", ("stor01",)),
        ("segmentation", ("gpu", "mgmt")),
        ("straggler", ("gpu03",)),
        ("unregistered_host", ("10.0.1.200",)),
    ]
    assert [f.kind for f in uncovered] == ["exporter_loss"]


def test_error_burst_expected_only_at_or_above_the_detector_threshold():
    quiet = fault("link_downgrade", 60, 200, {"node": "gpu02", "switch": "tor1", "if_index": 2}, crc_errors_per_s=5)
    exp, _ = expected_detections(faults_from_truth(truth([quiet])), INVENTORY, error_burst_per_s=10)
    assert [e.detector for e in exp] == ["link_downgrade"]


def test_expected_detections_of_the_shipped_mixed_scenario():
    from devtools.simulator.engine import Simulation

    lines = list(Simulation("mixed").truth.lines())  # labels only: nothing generated
    exp, uncovered = expected_detections(faults_from_truth(lines), lines[0]["inventory"])
    assert sorted(e.label for e in exp) == [
        "error_burst:tor2/if4", "exfiltration:203.0.113.66", "incast:gpu05", "lb_skew:gpu15",
        "link_downgrade:tor2/if4", "storage_bound:stor01", "straggler:gpu03", "unregistered_host:10.0.1.200",
    ]  # fmt: skip
    assert sorted(f.kind for f in uncovered) == ["clock_skew", "exporter_loss"]


def test_lb_skew_and_storage_slowdown_expectations():
    skew = fault("lb_skew", 90, 240, {"job": "infer-a", "node": "gpu15"}, share=0.7)
    slow = fault("storage_slowdown", 100, 220, {"node": "stor01", "network_fault": False}, factor=0.25)
    slow_link = fault("storage_slowdown", 100, 220, {"node": "stor01", "network_fault": True}, factor=0.25)
    exp, uncovered = expected_detections(faults_from_truth(truth([skew, slow])), INVENTORY)
    assert sorted(e.label for e in exp) == ["lb_skew:gpu15", "storage_bound:stor01"]
    assert uncovered == []
    # a slow-down that comes with a link fault on the storage port expects no verdict; one is a false positive
    exp, uncovered = expected_detections(faults_from_truth(truth([slow_link])), INVENTORY)
    assert exp == [] and uncovered == []
    r = score_detections([Observed("storage_bound", "storage_bound|train-a|stor01", at(150))], truth([slow_link]))
    assert (r.detectors["storage_bound"].fp, r.detectors["storage_bound"].tp) == (1, 0)
    r = score_detections([Observed("storage_bound", "storage_bound|train-a|stor01", at(150)),
                          Observed("storage_bound", "storage_bound|train-b|stor01", at(150)),
                          Observed("lb_skew", "lb_skew|infer-a|gpu15", at(120))], truth([skew, slow]))
    assert [(o.detection.kind, o.status) for o in r.outcomes] == [
        ("lb_skew", "hit"), ("storage_bound", "hit"), ("storage_bound", "duplicate")]


def test_entity_tokens():
    assert entity_tokens("segmentation", "segmentation|gpu|mgmt") == {"gpu", "mgmt"}
    assert entity_tokens("exfiltration", "exfiltration|model-store|203.0.113.66") == {"model-store", "203.0.113.66"}
    assert entity_tokens("link_downgrade", "tor2/if4") == {"tor2/if4"}
    assert entity_tokens("straggler", "gpu03") == {"gpu03"}


# --------------------------------------------------------------------------- matching


def test_hits_duplicates_false_positives_misses_and_time_to_detect():
    t = truth([STRAGGLER, INCAST, LINK], ring_windows())
    dets = [
        Observed("incast", "gpu05", at(31)),  # hit, 0.1 window after start
        Observed("incast", "gpu05", at(70)),  # same fault again: duplicate
        Observed("incast", "gpu06", at(40)),  # wrong destination: FP
        Observed("straggler", "gpu03", at(90)),  # hit, 3 windows
        Observed("link_downgrade", "tor1/if2", at(65)),  # hit; its error_burst never comes: FN
        Observed("incast", "gpu05", at(400)),  # long after the fault: FP
    ]
    r = score_detections(dets, t)
    inc, strag, link, burst = (r.detectors[k] for k in ("incast", "straggler", "link_downgrade", "error_burst"))
    assert (inc.tp, inc.duplicates, inc.fp, inc.fn) == (1, 1, 2, 0)
    assert inc.precision == pytest.approx(2 / 4) and inc.recall == 1.0
    assert inc.ttd_windows == [pytest.approx(0.1)]
    assert (strag.tp, strag.fp, strag.fn) == (1, 0, 0) and strag.median_ttd_windows == pytest.approx(3.0)
    assert link.tp == 1 and link.median_ttd_windows == pytest.approx(0.5)
    assert (burst.tp, burst.fn, burst.recall, burst.precision) == (0, 1, 0.0, None)
    # outcomes come in evidence-time order
    assert [(o.detection.time_ms - T0) // 1000 for o in r.outcomes] == [31, 40, 65, 70, 90, 400]
    assert [o.status for o in r.outcomes] == ["hit", "false_positive", "hit", "duplicate", "hit", "false_positive"]


def test_detection_slightly_before_the_fault_start_matches_within_one_window():
    t = truth([STRAGGLER])
    assert score_detections([Observed("straggler", "gpu03", at(55))], t).detectors["straggler"].tp == 1
    assert score_detections([Observed("straggler", "gpu03", at(45))], t).detectors["straggler"].fp == 1


def test_alert_detections_match_by_tokens():
    t = truth([SEG, EXFIL, UNREG, OFFH])
    dets = [
        Observed("segmentation", "segmentation|gpu|mgmt", at(40)),
        Observed("segmentation", "segmentation|mgmt|gpu", at(41)),  # the replies: same violation
        Observed("exfiltration", "exfiltration|model-store|203.0.113.66", at(160)),
        Observed("unregistered_host", "unregistered_host|10.0.1.200", at(50)),
        Observed("off_hours_transfer", "off_hours_transfer|storage|stor01|external-authorized", at(180)),
    ]
    r = score_detections(dets, t)
    for k in ("segmentation", "exfiltration", "unregistered_host", "off_hours_transfer"):
        assert r.detectors[k].recall == 1.0 and r.detectors[k].precision == 1.0, k
    assert r.detectors["segmentation"].duplicates == 1


def test_healthy_truth_makes_every_detection_a_false_positive():
    dets = [Observed("straggler", "gpu01", at(100)), Observed("incast", "gpu02", at(10))]
    r = score_detections(dets, truth([], ring_windows()))
    assert r.detectors["straggler"].fp == 1 and r.detectors["straggler"].precision == 0.0
    assert r.detectors["straggler"].recall is None
    assert not r.expected


# --------------------------------------------------------------------------- consequences


def test_straggler_explained_by_the_downgraded_port_is_explained():
    t = truth([LINK], ring_windows())
    port = "tor1|2"  # the link output key exporter|if_index (this inventory has no switch agents: the name)
    dets = [
        Observed("straggler", "gpu02", at(100), explained_by=port),  # its own link is capped
        Observed("straggler", "gpu01", at(100), explained_by=port),  # its ring successor's link is capped
        Observed("straggler", "gpu03", at(100)),  # the product links it to nothing: FP
        Observed("straggler", "gpu04", at(100), explained_by="tor1|7"),  # another port: FP
        Observed("straggler", "gpu01", at(400), explained_by=port),  # long after the fault: FP
    ]
    r = score_detections(dets, t)
    s = r.detectors["straggler"]
    assert (s.explained, s.fp) == (2, 3)
    reasons = [o.reason for o in r.outcomes if o.status == "explained"]
    assert reasons == ["explained_by tor1|2: link tor1/if2 of gpu02 was downgraded"] * 2


def test_discard_burst_on_the_incast_destination_port_is_explained():
    r = score_detections([Observed("discard_burst", "tor1/if5", at(40)), Observed("discard_burst", "tor1/if6", at(40))],
                         truth([INCAST]))
    assert (r.detectors["discard_burst"].explained, r.detectors["discard_burst"].fp) == (1, 1)


def test_other_consequence_rules():
    slow = fault("storage_slowdown", 100, 300, {"node": "stor01", "network_fault": False}, factor=0.25)
    skew = fault("clock_skew", 420, 600, {"exporter": "core-nf9"}, skew_s=45)
    t = truth([LINK, EXFIL, slow, STRAGGLER, skew], ring_windows())
    dets = [
        Observed("sustained_utilisation", "tor1/if2", at(150)),
        Observed("pattern_deviation", "train-a", at(120)),
        Observed("pattern_deviation", "train-b", at(120)),  # no fault touches train-b: FP
        Observed("checkpoint_late", "checkpoint_late|train-a", at(200)),
        Observed("checkpoint_late", "checkpoint_late|train-a", at(540)),  # during the clock skew
        Observed("checkpoint_missing", "checkpoint_missing|train-b", at(50)),  # no fault then: FP
        Observed("off_hours_transfer", "off_hours_transfer|model-store|mstore01|unknown", at(150)),
    ]
    r = score_detections(dets, t)
    assert r.detectors["sustained_utilisation"].explained == 1
    assert (r.detectors["pattern_deviation"].explained, r.detectors["pattern_deviation"].fp) == (1, 1)
    assert r.detectors["checkpoint_late"].explained == 2
    assert r.detectors["checkpoint_missing"].fp == 1
    assert r.detectors["off_hours_transfer"].explained == 1


def test_merge_scores_sums_per_detector():
    t = truth([STRAGGLER])
    a = score_detections([Observed("straggler", "gpu03", at(90))], t)
    b = score_detections([Observed("straggler", "gpu01", at(90))], truth([]))
    tot = merge_scores([a, b])
    assert (tot["straggler"].tp, tot["straggler"].fp, tot["straggler"].fn) == (1, 1, 0)
    assert tot["straggler"].precision == 0.5


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["straggler", "incast", "link_downgrade", "error_burst", "segmentation", "pattern_deviation"]
            ),
            st.sampled_from(["gpu01", "gpu02", "gpu03", "gpu05", "tor1/if2", "segmentation|gpu|mgmt", "train-a"]),
            st.integers(-20, 400),
        ),
        max_size=25,
    )
)
def test_every_detection_and_expectation_is_accounted_for(raw):
    t = truth([STRAGGLER, LINK, INCAST, SEG], ring_windows())
    dets = [Observed(k, e, at(s)) for k, e, s in raw]
    r = score_detections(dets, t)
    tot = merge_scores([r])
    assert sum(s.tp + s.duplicates + s.fp + s.explained for s in tot.values()) == len(dets)
    assert sum(s.tp + s.fn for s in tot.values()) == len(r.expected)
    for s in tot.values():
        assert s.precision is None or 0.0 <= s.precision <= 1.0
        assert s.recall is None or 0.0 <= s.recall <= 1.0
        assert all(x >= 0 for x in s.ttd_windows)


# --------------------------------------------------------------------------- traffic matrix


def sampled_estimate(t, rate, seed=0, scale=1.0):
    """What an sFlow collector would estimate: binomial(packets, 1/N) samples x N x packet size."""
    rng = np.random.default_rng(seed)
    est = {}
    for line in t:
        if line["type"] != "window":
            continue
        cells = {}
        for p in line["pairs"]:
            size = p["bytes"] / p["packets"]
            cells[(p["src"], p["dst"])] = rng.binomial(p["packets"], 1 / rate) * rate * size * scale
        est[line["start_ms"]] = cells
    return est


def test_matrix_error_of_exact_estimate_is_zero():
    t = truth([], ring_windows(5))
    windows = [line for line in t if line["type"] == "window"]
    exact = {line["start_ms"]: {(p["src"], p["dst"]): p["bytes"] for p in line["pairs"]} for line in windows}
    m = matrix_error(exact, t)
    assert m.cells == 20 and m.median_rel_error == 0.0 and m.within_bound95 == 1.0 and m.ok and m.bias == 0.0


def test_matrix_error_of_sampled_estimate_is_within_the_sampling_bound():
    t = truth([], ring_windows(40))
    m = matrix_error(sampled_estimate(t, 4096, seed=3), t)
    # 1e6 packets / 4096 = 244 expected samples: sigma 6.4 %, 95 % bound 12.5 %
    assert m.median_bound95 == pytest.approx(1.96 / math.sqrt(1_000_000 / 4096))
    assert m.within_bound95 >= 0.88 and m.ok
    assert 0.3 < m.median_abs_z < 1.1
    assert abs(m.bias) < 0.02


def test_matrix_error_flags_a_biased_or_missing_estimate():
    t = truth([], ring_windows(20))
    assert not matrix_error(sampled_estimate(t, 4096, seed=1, scale=1.3), t).ok
    m = matrix_error({}, t)
    assert m.missing == m.cells == 80 and m.median_rel_error == 1.0 and not m.ok


def test_matrix_error_floor_exclusions_and_non_nodes():
    small = {"src": "gpu05", "dst": "gpu06", "bytes": 15_000_000, "packets": 10_000}  # 2.4 expected samples
    ext = {"src": "mstore01", "dst": "203.0.113.66", "bytes": 1_500_000_000, "packets": 1_000_000}
    t = truth([], ring_windows(10, extra=[small, ext]))
    est = sampled_estimate(t, 4096)
    m = matrix_error(est, t, exclude=[(T0 + 20_000, T0 + 40_000)])
    assert m.cells == 4 * 8 and m.skipped_windows == 2
    assert matrix_error(est, t, nodes_only=False).cells == 5 * 10
    assert matrix_error(est, t, min_expected_samples=1).cells == 5 * 10


def test_matrix_total_error_compares_whole_run_totals():
    t = truth([], ring_windows(20))
    per_window = sampled_estimate(t, 4096, seed=1)  # deterministic; 4 pairs, so any seed puts 0-1 outside
    totals: dict = {}
    for cells in per_window.values():
        for k, v in cells.items():
            totals[k] = totals.get(k, 0.0) + v
    m = matrix_total_error(totals, t)
    # 4 pairs x 20 windows x 1e6 packets / 4096: ~4,900 expected samples per pair, 95 % bound 2.8 %
    assert m.cells == 4 and m.median_bound95 == pytest.approx(1.96 / math.sqrt(20 * 1_000_000 / 4096))
    assert m.ok and abs(m.bias) < 0.02
    # 10 % too high is far outside a 2.8 % bound
    assert matrix_total_error({k: v * 1.1 for k, v in totals.items()}, t).within_bound95 == 0.0
    assert matrix_total_error({}, t).missing == 4
    assert matrix_total_error(totals, t, exclude=[(T0, T0 + 10**9)]).cells == 0


def test_congestion_and_syn_storm_expectations():
    cong = fault("congestion", 120, 210, {"job": "train-b", "nodes": ["gpu07"]}, ce_fraction=0.15)
    storm = fault("syn_storm", 100, 200, {"node": "gpu03", "targets": ["gpu01"], "switch": "tor1", "if_index": 3})
    exp, uncovered = expected_detections(faults_from_truth(truth([cong, storm])), INVENTORY)
    assert sorted(e.label for e in exp) == ["congestion:train-b", "conn_storm:gpu03"] and uncovered == []
    r = score_detections([Observed("congestion", "congestion|train-b|ecn_ce", at(140)),
                          Observed("congestion", "congestion|train-b|cnp", at(140)),
                          Observed("conn_storm", "conn_storm|gpu03", at(120)),
                          Observed("conn_storm", "conn_storm|gpu01", at(120)),
                          Observed("congestion", "congestion|train-a|ecn_ce", at(140))], truth([cong, storm]))
    assert [(o.detection.entity, o.status) for o in r.outcomes] == [
        ("conn_storm|gpu01", "false_positive"), ("conn_storm|gpu03", "hit"),
        ("congestion|train-a|ecn_ce", "false_positive"), ("congestion|train-b|cnp", "hit"),
        ("congestion|train-b|ecn_ce", "duplicate")]
