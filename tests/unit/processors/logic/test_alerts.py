"""Alert lifecycle: for/pending, firing, updated, resolved, dedup, snapshot/restore."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.policy import assert_valid_alerts

from processors.logic.alerts import AlertManager, Condition, RuleAlertSettings

W = 60_000


def cond(t, rule="segmentation", key=("gpu", "mgmt"), nbytes=100, sev=None, first=None, hold=0,
         sample="tcp a:1 -> b:2"):
    return Condition(rule=rule, key=key, summary="s", entities={"k": "v"}, first_seen_ms=t if first is None else first,
                     last_seen_ms=t, bytes_est=nbytes, flows=1, samples=[sample], severity=sev, hold_ms=hold)


def mgr(**kw):
    return AlertManager({"segmentation": RuleAlertSettings(**{"resolve_after_ms": 5 * W, "update_every": 3, **kw})}, W)


def test_firing_updated_resolved_with_cumulative_evidence():
    m = mgr()
    m.observe(cond(10 * W))
    out = m.evaluate(10 * W)
    assert [a["state"] for a in out] == ["firing"]
    assert out[0]["dedup_key"] == "segmentation|gpu|mgmt"
    assert out[0]["window_start_ms"] == 9 * W and out[0]["window_end_ms"] == 10 * W
    assert_valid_alerts(out)
    # seen again in the next two windows: no update yet (update_every=3)
    for i in (11, 12):
        m.observe(cond(i * W, sample=f"s{i}"))
        assert m.evaluate(i * W) == []
    m.observe(cond(13 * W))
    out = m.evaluate(13 * W)
    assert [a["state"] for a in out] == ["updated"]
    assert out[0]["bytes_est"] == 400 and out[0]["flows"] == 4
    assert out[0]["first_seen_ms"] == 10 * W and out[0]["last_seen_ms"] == 13 * W
    assert out[0]["sample_flows"] == ["tcp a:1 -> b:2", "s11", "s12"]
    # quiet: not resolved until resolve_after has passed
    assert m.evaluate(18 * W) == []
    out = m.evaluate(18 * W + 1)
    assert [a["state"] for a in out] == ["resolved"]
    assert out[0]["last_seen_ms"] == 13 * W
    assert m.active() == []
    # a new occurrence opens a new alert
    m.observe(cond(30 * W))
    assert [a["state"] for a in m.evaluate(30 * W)] == ["firing"]


def test_dedup_one_alert_per_condition():
    m = mgr()
    for _ in range(5):
        m.observe(cond(10 * W))
    out = m.evaluate(10 * W)
    assert len(out) == 1 and out[0]["flows"] == 5
    m.observe(cond(10 * W, key=("gpu", "storage")))
    out = m.evaluate(10 * W)
    assert [a["dedup_key"] for a in out] == ["segmentation|gpu|storage"]


def test_no_update_without_new_observations():
    m = mgr()
    m.observe(cond(10 * W))
    m.evaluate(10 * W)
    assert m.evaluate(14 * W) == []  # nothing new, not yet resolved


def test_severity_change_updates_immediately():
    m = mgr()
    m.observe(cond(10 * W))
    m.evaluate(10 * W)
    m.observe(cond(11 * W, sev="critical"))
    out = m.evaluate(11 * W)
    assert [(a["state"], a["severity"]) for a in out] == [("updated", "critical")]


def test_for_short_condition_never_fires():
    m = mgr(for_ms=3 * W)
    for i in range(3):  # held 2 windows < for
        m.observe(cond(10 * W + i * W))
        assert m.evaluate(10 * W + i * W) == []
    assert len(m.active()) == 1 and m.active()[0]["status"] == "pending"
    assert m.evaluate(30 * W) == []  # dropped silently when quiet
    assert m.active() == []


def test_for_fires_once_held():
    m = mgr(for_ms=3 * W)
    outs = []
    for i in range(5):
        m.observe(cond(10 * W + i * W))
        outs += m.evaluate(10 * W + i * W)
    assert [a["state"] for a in outs] == ["firing"]
    assert outs[0]["last_seen_ms"] == 13 * W


def test_late_evidence_fires_and_resolves_in_one_step():
    m = mgr(for_ms=W)
    m.observe(cond(12 * W, first=10 * W))
    out = m.evaluate(40 * W)
    assert [a["state"] for a in out] == ["firing", "resolved"]


def test_hold_overrides_resolve_after():
    m = mgr()
    m.observe(cond(10 * W, hold=20 * W))
    m.evaluate(10 * W)
    assert m.evaluate(20 * W) == []
    assert [a["state"] for a in m.evaluate(31 * W)] == ["resolved"]


def test_bad_severity_rejected():
    with pytest.raises(ValueError):
        mgr().observe(cond(1, sev="panic"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=30),
       st.integers(1, 29))
def test_snapshot_restore_equivalence(steps, cut):
    """Restoring a JSON round-tripped snapshot gives the same future output as never stopping."""
    keys = [("a",), ("b",), ("c",)]

    def run(m, part, t0):
        out = []
        t = t0
        for key_i, sev_i, dt in part:
            t += dt * W
            if key_i < 3:
                m.observe(cond(t, key=keys[key_i], sev=("info", "warning", "critical")[sev_i]))
            out += m.evaluate(t)
        return out, t

    cut = min(cut, len(steps))
    a = mgr(for_ms=W)
    first, t = run(a, steps[:cut], 0)
    snap = json.loads(json.dumps(a.snapshot()))
    b = mgr(for_ms=W)
    b.restore(snap)
    rest_a, _ = run(a, steps[cut:], t)
    rest_b, _ = run(b, steps[cut:], t)
    assert rest_a == rest_b
    assert_valid_alerts(first + rest_a)
