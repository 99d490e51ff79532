"""Training timeline: phase segments per window, the iteration period from communication slots, the structure."""

import pytest

from processors.logic.engine import Engine, EngineConfig
from processors.logic.detectors.pattern import collective_structure
from processors.logic.detectors.timeline import TimelineConfig
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows

M = 1_000_000
RING = ["g0", "g1", "g2", "g3"]


def engine(**cfg):
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), timeline=TimelineConfig(**cfg),
                               enabled=("pattern", "timeline")))


def iteration(t0):
    """One 2 s iteration from ``t0``: dataset reads st -> every node for 1 s, then a ring all-reduce for 0.5 s."""
    recs = []
    for i, n in enumerate(RING):
        for k in range(4):  # reads every 250 ms during [t0, t0 + 1 s)
            recs.append(dict(src="st", dst=n, t=t0 + k * 250 + 10, bytes=20 * M, category="storage",
                             src_group="storage", dst_job="j"))
        for k in range(2):  # communication in [t0 + 1 s, t0 + 1.5 s)
            recs.append(dict(src=n, dst=RING[(i + 1) % 4], t=t0 + 1000 + k * 250 + 10, bytes=50 * M, job="j"))
    return recs


def run(seconds, extra=(), **cfg):
    e = engine(**cfg)
    recs = [r for t0 in range(0, seconds * 1000, 2000) for r in iteration(t0)] + list(extra)
    out = e.process_flows(flows(recs)) + e.flush()
    return [o.value for o in out if o.kind == "pattern" and o.value["kind"] == "pattern_timeline"]


def test_phases_period_and_structure_of_a_ring_job():
    out = run(30)
    assert [(r["window_start_ms"], r["job"]) for r in out] == [(0, "j"), (10_000, "j"), (20_000, "j")]
    last = out[-1]
    assert {k: v for k, v in last.items() if k != "phases"} == {
        "kind": "pattern_timeline", "state": "", "job": "j", "deviation": "", "window_start_ms": 20_000,
        "window_end_ms": 30_000, "detail": "", "baseline_period_ms": -1, "current_period_ms": -1,
        "added_pairs": [], "removed_pairs": [],
        "peers": {"g0": ["g1", "g3"], "g1": ["g0", "g2"], "g2": ["g1", "g3"], "g3": ["g0", "g2"]},
        "structure": "ring", "iteration_period_ms": 2000, "slot_ms": 250,
        "communication_bytes": 5 * 4 * 2 * 50 * M, "dataset_read_bytes": 5 * 4 * 4 * 20 * M,
        "checkpoint_write_bytes": 0,
    }  # fmt: skip
    assert [(s["phase"], s["start_ms"] - 20_000, s["end_ms"] - 20_000, s["bytes_est"]) for s in last["phases"][:4]] == [
        ("dataset_read", 0, 1000, 320 * M), ("communication", 1000, 1500, 400 * M), ("idle", 1500, 2000, 0),
        ("dataset_read", 2000, 3000, 320 * M)]
    assert len(last["phases"]) == 15  # 5 iterations x (read, communication, idle)


def test_a_checkpoint_burst_is_a_phase_of_its_own():
    burst = [dict(src=n, dst="st", t=12_000 + k * 250 + 10, bytes=400 * M, category="storage", dst_group="storage",
                  src_job="j") for n in RING for k in range(12)]
    out = run(30, burst)
    w = [s for s in out[1]["phases"] if s["phase"] == "checkpoint_write"]
    assert [(s["start_ms"], s["end_ms"], s["bytes_est"]) for s in w] == [(12_000, 15_000, 48 * 400 * M)]
    assert out[1]["checkpoint_write_bytes"] == 48 * 400 * M
    # the burst is not communication: the iteration period and structure stay as they were
    assert (out[1]["iteration_period_ms"], out[1]["structure"]) == (2000, "ring")


def test_a_missed_slot_inside_a_phase_is_closed_but_a_real_gap_is_not():
    e = engine()
    recs = [dict(src="st", dst="g0", t=t, bytes=20 * M, category="storage", src_group="storage", dst_job="j")
            for t in (10, 260, 760, 2010, 2260)]  # 500-750 missing (one slot), 1000-2000 quiet (four)
    out = [o.value for o in e.process_flows(flows(recs)) + e.flush() if o.kind == "pattern"]
    reads = [(s["start_ms"], s["end_ms"]) for s in out[0]["phases"] if s["phase"] == "dataset_read"]
    assert reads == [(0, 1000), (2000, 2500)]
    assert out[0]["iteration_period_ms"] == -1 and out[0]["structure"] == "unknown"


@pytest.mark.parametrize("peers, label", [
    ({"a": ["b", "d"], "b": ["a", "c"], "c": ["b", "d"], "d": ["a", "c"]}, "ring"),
    ({"a": ["b"], "b": ["a"]}, "ring"),
    ({"r": ["x", "y"], "x": ["r", "l"], "y": ["r"], "l": ["x"]}, "tree"),
    ({n: [m for m in "abcd" if m != n] for n in "abcd"}, "all_to_all"),
    ({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c"]}, "unknown"),  # two separate pairs
    ({}, "unknown"),
])
def test_collective_structure(peers, label):
    assert collective_structure(peers) == label


def test_snapshot_restore_gives_the_same_timeline():
    recs = [r for t0 in range(0, 30_000, 2000) for r in iteration(t0)]
    whole = engine()
    want = [o for o in whole.process_flows(flows(recs)) + whole.flush() if o.kind == "pattern"]
    a = engine()
    got = a.process_flows(flows([r for r in recs if r["t"] < 15_000]))
    b = engine()
    b.restore_bytes(a.snapshot_bytes())
    got += b.process_flows(flows([r for r in recs if r["t"] >= 15_000])) + b.flush()
    assert [o for o in got if o.kind == "pattern"] == want
