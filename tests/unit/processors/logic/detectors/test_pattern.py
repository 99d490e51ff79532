"""Pattern: period by autocorrelation, ring structure, deviations from the job's baseline."""

import numpy as np

from processors.logic.engine import Engine, EngineConfig
from processors.logic.detectors.pattern import PatternConfig, estimate_period
from processors.logic.windows.tumbling import WindowConfig

RING = ["g0", "g1", "g2", "g3"]


def test_estimate_period_shorter_windows_than_period():
    series = np.tile([9, 0, 0, 0, 0, 0], 5)
    assert estimate_period(series) == 6
    assert estimate_period(np.tile([5, 5, 0, 0], 6)) == 4
    assert estimate_period(np.ones(20)) is None  # flat: no cycle
    assert estimate_period([1, 0, 1]) is None  # too short


def run(windows_with_pairs, **cfg):
    from tests.support.flows import flows

    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0),
                            pattern=PatternConfig(**cfg), enabled=("pattern",)))
    recs = [dict(src=s, dst=d, t=w * 10_000 + 5, bytes=1_000, job="p") for w, pairs in windows_with_pairs
            for s, d in pairs]
    recs.append(dict(src="z", dst="y", t=400 * 10_000, bytes=1))  # closes everything before
    return [o.value for o in e.process_flows(flows(recs)) if o.kind == "pattern"]


def ring(order):
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def test_baseline_then_pair_change_then_restore():
    comm = [(w, ring(RING)) for w in range(0, 60, 6)]
    comm += [(w, ring(["g0", "g2", "g1", "g3"])) for w in range(60, 78, 6)]
    comm += [(w, ring(RING)) for w in range(78, 120, 6)]
    out = run(comm, baseline_windows=12, recent_windows=1)
    # windows without any traffic never close, so history reaches 12 windows at the window of 120 s
    assert out[0] == {
        "kind": "pattern_baseline", "state": "open", "job": "p", "deviation": "baseline",
        "window_start_ms": 120_000, "window_end_ms": 130_000, "detail": "baseline established",
        "baseline_period_ms": 60_000, "current_period_ms": 60_000, "added_pairs": [], "removed_pairs": [],
        "peers": {"g0": ["g1", "g3"], "g1": ["g0", "g2"], "g2": ["g1", "g3"], "g3": ["g0", "g2"]},
        "structure": "ring", "iteration_period_ms": -1, "slot_ms": 0, "phases": [],
        "communication_bytes": 0, "dataset_read_bytes": 0, "checkpoint_write_bytes": 0,
    }
    devs = [(p["deviation"], p["state"], p["window_start_ms"]) for p in out[1:]]
    assert devs == [("pairs_changed", "open", 600_000), ("pairs_changed", "close", 780_000)]
    assert out[1]["added_pairs"] == [["g0", "g2"], ["g1", "g3"], ["g2", "g1"]]  # g3 -> g0 stays
    assert out[1]["removed_pairs"] == [["g0", "g1"], ["g1", "g2"], ["g2", "g3"]]
    assert out[1]["detail"] == "3 pairs added, 3 removed"


def test_period_shift_is_reported_once():
    comm = [(w, ring(RING)) for w in range(0, 60, 6)] + [(w, ring(RING)) for w in range(60, 200, 3)]
    out = run(comm, baseline_windows=12, recent_windows=1)
    shifts = [p for p in out if p["deviation"] == "period_shift"]
    assert [(p["state"], p["baseline_period_ms"], p["current_period_ms"]) for p in shifts] == [
        ("open", 60_000, 30_000)]
    assert not [p for p in out if p["deviation"] == "pairs_changed"]


def test_level_shift_is_not_a_period():
    """A step (traffic added mid-series) decays the autocorrelation from lag 1: no period (bench false positive)."""
    from processors.logic.detectors.pattern import estimate_period

    step = np.r_[np.full(15, 1.0e9), np.full(15, 3.0e9)] + np.random.default_rng(3).normal(0, 1e7, 30)
    assert estimate_period(step) is None
    cycle = np.tile([5e9, 1e8, 1e8], 10)
    assert estimate_period(cycle) == 3
