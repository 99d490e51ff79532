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


def training(minutes, iteration_s, checkpoint_s, stall_s=15.0, change_at_s=None, new_iteration_s=None):
    """Records of a 4-node ring job over ``minutes``: per iteration dataset reads in the compute phase, then
    0.5 s of all-reduce; a checkpoint every ``checkpoint_s`` writes to storage for ``stall_s`` with the
    iterations stalled. ``change_at_s``: from then on the iterations take ``new_iteration_s``."""
    from tests.support.flows import flows

    recs, t, end = [], 0.0, minutes * 60.0
    while t < end:
        if checkpoint_s and t % checkpoint_s < stall_s:
            for n in RING:
                recs.append(dict(src=n, dst="st", t=int(t * 1000) + 7, bytes=400 * 10**6, category="storage",
                                 dst_group="storage", src_job="p"))
            t += 0.5
            continue
        it = iteration_s if change_at_s is None or t < change_at_s else new_iteration_s
        t0 = int(t * 1000)
        c0 = t0 + int((it - 0.5) * 1000)
        for i, n in enumerate(RING):
            recs.append(dict(src="st", dst=n, t=t0 + 10, bytes=20 * 10**6, category="storage", src_group="storage",
                             dst_job="p"))
            for k in range(2):
                recs.append(dict(src=n, dst=RING[(i + 1) % 4], t=c0 + k * 250 + 10, bytes=50 * 10**6, job="p"))
        t += it
    return flows(recs)


def run_training(*args, **kw):
    from processors.logic.detectors.timeline import TimelineConfig

    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), timeline=TimelineConfig(),
                            enabled=("pattern", "timeline")))
    out = [o.value for o in e.process_flows(training(*args, **kw)) + e.flush() if o.kind == "pattern"]
    devs = [(p["deviation"], p["state"], p["window_start_ms"], p["baseline_period_ms"], p["current_period_ms"])
            for p in out if p["kind"] == "pattern_deviation"]
    return devs, e.pattern.iterations["p"]["base"], out


def test_sub_window_iterations_get_a_period_and_steady_jobs_no_deviation_over_30_minutes():
    """Iterations of 2.2 s and 2.7 s (several per 10 s window) with dataset reads and checkpoints every
    60-300 s, 30 minutes each: the iteration period comes from the timeline's 250 ms communication slots
    (reads and checkpoint writes are phases of their own), and nothing is raised (issue 31)."""
    got = {(it, ck): run_training(30, it, ck)[:2] for it in (2.2, 2.7) for ck in (60, 120, 150, 300)}
    # the period to the 250 ms slot; 29 of the 30 baseline windows agree (the first has one window of slots)
    b22 = {"period_ms": 2250, "confidence": 0.9667, "windows": 30}
    b27 = {"period_ms": 2750, "confidence": 0.9667, "windows": 30}
    assert got == {(2.2, ck): ([], b22) for ck in (60, 120, 150, 300)} | {(2.7, ck): ([], b27) for ck in (60, 120, 150, 300)}


def test_a_persistent_iteration_change_is_raised_with_both_periods_and_confidence():
    """2.0 s iterations become 3.0 s at 900 s (checkpoints every 120 s): one iteration_shift, 70 s later (the
    timeline's 3 windows of slots fill with the new period, then persist_windows 6 agree), never closed."""
    devs, base, out = run_training(30, 2.0, 120, change_at_s=900, new_iteration_s=3.0)
    assert devs == [("iteration_shift", "open", 970_000, 2000, 3000)]
    assert base == {"period_ms": 2000, "confidence": 0.9667, "windows": 30}
    (dev,) = [p for p in out if p["kind"] == "pattern_deviation"]
    assert dev["detail"] == ("iteration period 2000 ms (confidence 0.97: share of its 30 baseline windows within 20% "
                             "of it) -> 3000 ms (autocorrelation 0.90), measured in 6 windows in a row")
    assert dev["structure"] == "ring"


def test_iteration_track_survives_snapshot_restore():
    from processors.logic.detectors.pattern import PatternDetector

    a, b = PatternDetector(PatternConfig(baseline_windows=4, persist_windows=2)), None
    periods = [2000, 2000, -1, 2000, 2000, 3000, 3000, 3000]
    out_a, out_b = [], []
    for i, p in enumerate(periods):
        if i == 5:
            b = PatternDetector(PatternConfig(baseline_windows=4, persist_windows=2))
            b.restore(a.snapshot())
        out_a += a.observe_iteration("j", i * 10_000, (i + 1) * 10_000, p, 0.9)
        if b is not None:
            out_b += b.observe_iteration("j", i * 10_000, (i + 1) * 10_000, p, 0.9)
    assert [(r["deviation"], r["state"], r["window_start_ms"], r["baseline_period_ms"], r["current_period_ms"])
            for r in out_a] == [("iteration_shift", "open", 60_000, 2000, 3000)]
    assert out_b == out_a and b.snapshot() == a.snapshot()
