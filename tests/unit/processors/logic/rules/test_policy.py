"""PolicyEngine as a whole: determinism, snapshot/restore equivalence, input checks."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.policy import CLUSTER, GB, MIN, T0, assert_lifecycle, assert_valid_alerts, flow, make_batch

from processors.logic.rules.policy import PolicyEngine
from schemas.columns import empty_flows

CFG = {
    "segmentation": {"enabled": True, "allow": [
        {"src": "gpu", "dst": "gpu", "categories": ["rocev2", "collective"]},
        {"src": "gpu", "dst": "storage", "categories": ["storage"]},
        {"src": "*", "dst": "dns", "categories": ["dns"]}]},
    "off_hours_transfer": {"enabled": True, "min_bytes": "2GB",
                           "schedule": {"timezone": "Asia/Kolkata", "days": ["mon"], "start": "09:00", "end": "09:30"}},
    "storage_on_compute": {"compute_interfaces": [{"exporter": "*", "ifindexes": [77]}]},
    "alerts": {"segmentation": {"for": "2m", "update_every": 2}, "unregistered_host": {"update_every": 1}},
}
HOSTS = ["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.2.1", "10.0.3.1", "10.0.4.1", "10.0.5.1", "10.0.9.9",
         "203.0.113.9", "198.51.100.7", "fd00:1::10"]
PORTS = [4791, 2049, 53, 22, 443, 8080]


def scenario():
    """A mixed hour: cadence checkpoints, an exfiltration, a periodic dependency, violations."""
    fl = []
    for m in range(0, 90):
        t = T0 + m * MIN
        fl.append(flow("10.0.1.1", "10.0.1.2", 50000, 4791, proto=17, nbytes=10**7, t=t + 1000))
        if m % 15 == 0:
            fl += [flow(n, "10.0.2.1", 812, 2049, nbytes=GB, t=t + k * 10_000 + 5000) for n in ("10.0.1.1", "10.0.1.2")
                   for k in range(3)]
            fl.append(flow("10.0.1.3", "203.0.113.50", 40000, 443, nbytes=20_000, t=t + 2000))
        if 20 <= m < 25:
            fl.append(flow("10.0.4.1", "203.0.113.9", 40001, 443, nbytes=GB // 2, t=t + 30_000, dur=30_000))
        if m in (30, 31, 32, 33, 50):
            fl.append(flow("10.0.1.2", "10.0.3.1", 40002, 8080, category="other", t=t + 3000))
            fl.append(flow("10.0.9.9", "10.0.2.1", 40003, 2049, t=t + 4000))
            fl.append(flow("10.0.1.1", "10.0.1.3", 40004, 2049, t=t + 5000, in_if=77))
    return fl


def batches(fl, size_ms=MIN):
    out = []
    t = T0
    end = max(f["t_end"] for f in fl) + size_ms
    while t < end:
        t += size_ms
        out.append((make_batch([f for f in fl if t - size_ms < f["t_end"] <= t]), t))
    return out


def run(e, bs):
    out = []
    for b, t in bs:
        out += e.process(b, t)
    return out


def test_scenario_alerts_all_rules_and_is_deterministic():
    bs = batches(scenario())
    a = run(PolicyEngine(CFG, CLUSTER), bs)
    b = run(PolicyEngine(CFG, CLUSTER), bs)
    assert a == b
    assert_valid_alerts(a)
    rules = {x["rule"] for x in a}
    assert {"segmentation", "unregistered_host", "exfiltration", "external_dependency",
            "storage_on_compute"} <= rules
    assert "checkpoint_late" not in rules and "checkpoint_missing" not in rules
    assert_lifecycle(a)  # one alert per ongoing condition


def test_batching_does_not_change_which_conditions_fire():
    fl = scenario()
    one = {(x["dedup_key"]) for x in run(PolicyEngine(CFG, CLUSTER), batches(fl, MIN)) if x["state"] == "firing"}
    for size in (2 * MIN, 30 * MIN):
        other = {x["dedup_key"] for x in run(PolicyEngine(CFG, CLUSTER), batches(fl, size)) if x["state"] == "firing"}
        assert other == one, size


@pytest.mark.parametrize("cut", [5, 22, 31, 47, 80])
def test_snapshot_restore_equivalence(cut):
    bs = batches(scenario())
    ref = PolicyEngine(CFG, CLUSTER)
    full = run(ref, bs)
    e = PolicyEngine(CFG, CLUSTER)
    first = run(e, bs[:cut])
    snap = json.loads(json.dumps(e.snapshot()))
    e2 = PolicyEngine(CFG, CLUSTER)
    e2.restore(snap)
    assert first + run(e2, bs[cut:]) == full
    assert e2.snapshot() == ref.snapshot()


flow_st = st.builds(
    lambda s, d, p, nb, dt: flow(HOSTS[s], HOSTS[d], 40000, PORTS[p], nbytes=nb, t=T0 + dt),
    st.integers(0, len(HOSTS) - 1), st.integers(0, len(HOSTS) - 1), st.integers(0, len(PORTS) - 1),
    st.integers(1, 3 * GB), st.integers(0, 60 * MIN))


@settings(max_examples=15, deadline=None)
@given(st.lists(flow_st, min_size=1, max_size=40), st.integers(1, 5))
def test_random_traffic_valid_deterministic_restorable(fl, cut):
    bs = batches(fl, 5 * MIN)
    cut = min(cut, len(bs))
    a = PolicyEngine(CFG, CLUSTER)
    out = run(a, bs) + a.tick(T0 + 300 * MIN)
    assert_valid_alerts(out)
    assert_lifecycle(out)
    e = PolicyEngine(CFG, CLUSTER)
    first = run(e, bs[:cut])
    e2 = PolicyEngine(CFG, CLUSTER)
    e2.restore(json.loads(json.dumps(e.snapshot())))
    assert first + run(e2, bs[cut:]) + e2.tick(T0 + 300 * MIN) == out
    # every alert that fired is resolved after a long quiet period
    opened = [x["dedup_key"] for x in out if x["state"] == "firing"]
    closed = [x["dedup_key"] for x in out if x["state"] == "resolved"]
    assert sorted(opened) == sorted(closed)


def test_rejects_non_enriched_batch():
    with pytest.raises(ValueError, match="enriched"):
        PolicyEngine(CFG, CLUSTER).process(empty_flows(3), T0)


def test_empty_batch_and_watermark_never_goes_back():
    e = PolicyEngine(CFG, CLUSTER)
    assert e.process(make_batch([]), T0) == []
    e.process(make_batch([flow("10.0.9.9", "10.0.2.1", t=T0 + MIN)]), T0 + MIN)
    e.process(make_batch([]), T0)  # an older watermark is treated as the current one
    assert e.now_ms == T0 + MIN


def test_restore_rejects_unknown_version():
    e = PolicyEngine(CFG, CLUSTER)
    with pytest.raises(ValueError):
        e.restore({"version": 99})


def test_batch_columns_are_not_modified():
    b = make_batch(scenario()[:50])
    before = b.copy()
    PolicyEngine(CFG, CLUSTER).process(b, T0 + 60 * MIN)
    for name in b.dtype.names:
        assert np.array_equal(b[name], before[name])
