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


def job_bytes(minutes, iteration_s, checkpoint_s, stall_s=15.0, seed=1, change_at_s=None, new_iteration_s=None):
    """Collective bytes per 10 s window of a job: 1 MB per iteration, none while a checkpoint every
    ``checkpoint_s`` stalls it for ``stall_s``; 3 % sampling noise."""
    n = int(minutes * 6)
    out = np.zeros(n)
    t = 0.0
    while t < n * 10:
        if checkpoint_s and t % checkpoint_s < stall_s:
            t += 0.5
            continue
        out[int(t // 10)] += 1e6
        t += iteration_s if change_at_s is None or t < change_at_s else new_iteration_s
    return out * np.random.default_rng(seed).normal(1.0, 0.03, n)


def run_series(series, **cfg):
    from tests.support.flows import flows

    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0),
                            pattern=PatternConfig(**cfg), enabled=("pattern",)))
    recs = [dict(src=s, dst=d, t=w * 10_000 + 5, bytes=int(b), job="p") for w, b in enumerate(series) if b > 0
            for s, d in ring(RING)]
    recs.append(dict(src="z", dst="y", t=(len(series) + 1) * 10_000, bytes=1))
    return [(p["kind"], p["deviation"], p["window_start_ms"], p["baseline_period_ms"], p["current_period_ms"])
            for p in (o.value for o in e.process_flows(flows(recs)) if o.kind == "pattern")]


def test_steady_jobs_with_checkpoint_cycles_over_30_minutes_raise_no_deviation():
    """Iterations of 2.2 s and 2.7 s (several per 10 s window) with checkpoints every 60-300 s, 30 minutes each:
    a baseline and nothing else. Before, the aliasing beat of 4-5 iterations per window came out as a period
    that wandered (20 s -> 110 s, 70 s -> 100 s) and was reported as a shift (issue 31)."""
    got = {(it, ck): run_series(job_bytes(30, it, ck)) for it in (2.2, 2.7) for ck in (0, 60, 120, 150, 300)}
    assert got == {
        (2.2, 0): [("pattern_baseline", "baseline", 290_000, -1, -1)],  # beats only: no window-scale cycle
        (2.2, 60): [("pattern_baseline", "baseline", 310_000, 60_000, 60_000)],  # the checkpoint stalls, steady
        (2.2, 120): [("pattern_baseline", "baseline", 300_000, -1, -1)],
        (2.2, 150): [("pattern_baseline", "baseline", 310_000, -1, -1)],
        (2.2, 300): [("pattern_baseline", "baseline", 310_000, -1, -1)],
        (2.7, 0): [("pattern_baseline", "baseline", 290_000, -1, -1)],
        (2.7, 60): [("pattern_baseline", "baseline", 310_000, 60_000, 60_000)],
        (2.7, 120): [("pattern_baseline", "baseline", 300_000, 120_000, 120_000)],
        (2.7, 150): [("pattern_baseline", "baseline", 310_000, 150_000, 150_000)],
        (2.7, 300): [("pattern_baseline", "baseline", 310_000, -1, -1)],
    }


def test_a_persistent_period_change_is_raised_with_both_periods_and_their_confidence():
    # a job communicating once a minute (one window of 50 MB, 0.1 MB otherwise) moves to every 30 s at 900 s
    series = np.full(180, 1e5)
    series[[w for w in range(0, 90, 6)] + list(range(90, 180, 3))] = 5e7
    series *= np.random.default_rng(2).normal(1.0, 0.03, 180)
    from tests.support.flows import flows

    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("pattern",)))
    recs = [dict(src=s, dst=d, t=w * 10_000 + 5, bytes=int(b), job="p") for w, b in enumerate(series)
            for s, d in ring(RING)]
    out = [o.value for o in e.process_flows(flows(recs)) if o.kind == "pattern"]
    assert [(p["kind"], p["deviation"], p["state"], p["window_start_ms"], p["baseline_period_ms"],
             p["current_period_ms"]) for p in out] == [
        ("pattern_baseline", "baseline", "open", 290_000, 60_000, 60_000),
        ("pattern_deviation", "period_shift", "open", 1_190_000, 60_000, 30_000),  # persist_windows (6) later
    ]
    assert out[1]["detail"] == ("period 60000 ms (autocorrelation 0.80) -> 30000 ms (autocorrelation 0.89), "
                                "measured in 6 windows in a row")


def test_a_period_seen_in_fewer_windows_in_a_row_than_persist_windows_is_no_shift():
    series = np.full(120, 1e5)
    series[list(range(0, 120, 6))] = 5e7
    series[[63, 69, 75]] = 5e7  # three extra exchanges: for 3 windows the last 30 look like a 30 s cycle (opens at
    # persist_windows=1: 840 s -> 870 s)
    series *= np.random.default_rng(4).normal(1.0, 0.03, 120)
    assert [g for g in run_series(series) if g[0] == "pattern_deviation"] == []
    assert [g for g in run_series(series, persist_windows=1) if g[0] == "pattern_deviation"] == [
        ("pattern_deviation", "period_shift", 840_000, 60_000, 30_000),
        ("pattern_deviation", "period_shift", 870_000, 60_000, 60_000)]
