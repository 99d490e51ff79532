"""lb_skew: a replica that gets far more than an even share of its frontends' traffic, persistently."""

import pytest

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows

M = 1_000_000
REPLICAS = ["r1", "r2", "r3"]


def engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("lb_skew",)))


def window(w, shares, frontend="lb", packets=100):
    """Requests lb -> replica (``shares`` x 1000 MB) and responses back (2x), in window ``w``."""
    out = []
    for r, share in zip(REPLICAS, shares):
        b = int(share * 1000 * M)
        if b:
            out.append(dict(src=frontend, dst=r, t=w * 10_000 + 100, bytes=b, packets=packets, category="other",
                            src_group="frontend", dst_job="inf"))
            out.append(dict(src=r, dst=frontend, t=w * 10_000 + 200, bytes=2 * b, packets=packets, category="other",
                            dst_group="frontend", src_job="inf"))
    return out


EVEN = (1 / 3, 1 / 3, 1 / 3)
SKEW = (0.15, 0.7, 0.15)


def run(windows, e=None):
    e = e or engine()
    recs = [r for w, shares in enumerate(windows) for r in window(w, shares)]
    return [o for o in e.process_flows(flows(recs)) + e.flush()]


def test_balanced_inference_job_raises_nothing():
    assert run([EVEN] * 10) == []


def test_persistent_skew_fires_once_with_replica_share_and_sources():
    out = run([EVEN, EVEN] + [SKEW] * 4 + [EVEN] * 5)
    assert [(o.kind, o.key, o.value["state"], o.value["window_end_ms"]) for o in out] == [
        ("alert", "lb_skew|inf|r2", "firing", 50_000),  # third skewed window: evidence 3
        ("alert", "lb_skew|inf|r2", "resolved", 100_000),  # quiet for more than 3 windows
    ]
    assert out[0].value == {
        "dedup_key": "lb_skew|inf|r2", "rule": "lb_skew", "severity": "warning", "state": "firing",
        "summary": "job inf: replica r2 gets 70% of the frontend requests (even split 33% over 3 replicas) for 3 "
                   "windows; top sources lb:0.70",
        "entities": {"job": "inf", "replica": "r2", "share": "0.700", "even_share": "0.333", "replicas": "3",
                     "evidence_windows": "3", "sources": "lb:0.70"},
        "window_start_ms": 40_000, "window_end_ms": 50_000, "first_seen_ms": 40_000, "last_seen_ms": 50_000,
        "bytes_est": 700 * M, "flows": 1, "sample_flows": [], "diagnosis": None,
    }  # fmt: skip


def test_one_skewed_window_or_two_are_not_enough():
    assert run([EVEN, SKEW, EVEN, SKEW, SKEW, EVEN, EVEN]) == []


def test_starved_replica_still_counts_in_the_split():
    # r3 gets nothing for a while: r1 and r2 at 50 % each are 1.5x an even third -> both flagged
    out = run([EVEN] * 2 + [(0.5, 0.5, 0.0)] * 3)
    assert sorted(o.key for o in out if o.value["state"] == "firing") == ["lb_skew|inf|r1", "lb_skew|inf|r2"]


def test_too_few_samples_neither_add_nor_reset_evidence():
    e = engine()
    recs = [r for w, s in enumerate([EVEN, EVEN, SKEW, SKEW]) for r in window(w, s)]
    recs += window(4, SKEW, packets=1)  # 6 samples < min_samples: ignored
    recs += window(5, SKEW)
    out = e.process_flows(flows(recs)) + e.flush()
    assert [(o.value["state"], o.value["window_end_ms"], o.value["entities"]["evidence_windows"]) for o in out] == [
        ("firing", 60_000, "3")]


def test_responses_are_not_counted():
    # only the requests (destination in the job) count: responses land on the frontend's detector shard
    recs = [r for w in range(6) for r in window(w, EVEN)]
    recs += [dict(src="r2", dst="lb", t=w * 10_000 + 300, bytes=5000 * M, packets=500, category="other",
                  dst_group="frontend", src_job="inf") for w in range(6)]
    e = engine()
    assert e.process_flows(flows(recs)) + e.flush() == []


def test_training_traffic_inside_the_job_and_other_groups_are_not_counted():
    recs = [r for w in range(6) for r in window(w, EVEN)]
    # collective traffic inside the job and storage reads from outside (not a frontend) pile onto r2
    recs += [dict(src="r1", dst="r2", t=w * 10_000 + 300, bytes=5000 * M, packets=500, job="inf") for w in range(6)]
    recs += [dict(src="st", dst="r2", t=w * 10_000 + 300, bytes=5000 * M, packets=500, category="storage",
                  src_group="storage", dst_job="inf") for w in range(6)]
    e = engine()
    assert e.process_flows(flows(recs)) + e.flush() == []


@pytest.mark.parametrize("cut", [3, 5])
def test_snapshot_restore_gives_the_same_alerts(cut):
    seq = [EVEN, EVEN] + [SKEW] * 4 + [EVEN] * 5
    whole = run(seq)
    a = engine()
    first = a.process_flows(flows([r for w, s in enumerate(seq[:cut]) for r in window(w, s)]))
    b = engine()
    b.restore_bytes(a.snapshot_bytes())
    rest = b.process_flows(flows([r for w, s in enumerate(seq) if w >= cut for r in window(w, s)])) + b.flush()
    assert first + rest == whole
