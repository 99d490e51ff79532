"""Periodic egress to external addresses: an info finding, not an alarm."""

import random

from tests.support.policy import CLUSTER, MIN, T0, assert_valid_alerts, by_state, flow, make_batch

from processors.logic.rules.policy import PolicyEngine

CFG = {"exfiltration": {"enabled": False}, "checkpoint": {"enabled": False},
       "external_dependency": {"documented_cidrs": ["192.0.2.0/24"]}}
HUB = "203.0.113.50"


def run(e, times, dst=HUB, src="10.0.1.1", until=None):
    """One small egress burst (a few records) at each time; batches every minute."""
    out = []
    times = sorted(times)
    end = until or times[-1] + MIN
    t = (times[0] // MIN) * MIN
    while t <= end:
        t += MIN
        fl = [flow(src, dst, 50000 + k, 443, nbytes=20_000, t=x + k * 5000) for x in times if t - MIN < x <= t
              for k in range(3)]
        out += e.process(make_batch(fl), t) if fl else e.tick(t)
    return out


def test_regular_interval_is_reported_as_info_finding():
    e = PolicyEngine(CFG, CLUSTER)
    out = run(e, [T0 + i * 15 * MIN for i in range(6)])
    assert_valid_alerts(out)
    f = [a for a in out if a["rule"] == "external_dependency"]
    assert [a["state"] for a in f] == ["firing"]
    a = f[0]
    assert a["severity"] == "info" and a["summary"].startswith("finding:")
    assert a["dedup_key"] == f"external_dependency|gpu|{HUB}"
    assert a["entities"]["period_s"] == "900" and a["entities"]["episodes"] == "4"
    assert a["sample_flows"] and a["bytes_est"] == 4 * 3 * 20_000


def test_finding_resolves_when_the_dependency_stops():
    e = PolicyEngine(CFG, CLUSTER)
    out = run(e, [T0 + i * 15 * MIN for i in range(6)], until=T0 + 5 * 15 * MIN + 90 * MIN)
    states = [s for _, s in by_state(out, "external_dependency")]
    assert states[0] == "firing" and states[-1] == "resolved" and states.count("resolved") == 1
    assert states.count("updated") <= 1  # updates are rate-limited (update_every windows)
    resolved = out[-1]
    assert resolved["last_seen_ms"] < T0 + 80 * MIN
    assert resolved["window_end_ms"] - resolved["last_seen_ms"] >= 60 * MIN  # resolve_after default


def test_irregular_egress_is_not_reported():
    rng = random.Random(7)
    t, times = T0, []
    for _ in range(8):
        t += rng.choice([6, 25, 11, 40, 9, 17]) * MIN
        times.append(t)
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(run(e, times), "external_dependency") == []


def test_documented_or_internal_destinations_are_not_reported():
    times = [T0 + i * 15 * MIN for i in range(6)]
    for dst in ("192.0.2.10", "198.51.100.7", "10.0.2.1"):  # documented CIDR, authorized group, internal
        e = PolicyEngine(CFG, CLUSTER)
        assert by_state(run(e, times, dst=dst), "external_dependency") == []


def test_continuous_traffic_is_one_episode_not_periodic():
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(run(e, [T0 + i * MIN for i in range(60)]), "external_dependency") == []


def test_fast_periods_below_min_period_are_ignored():
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(run(e, [T0 + i * 4 * MIN for i in range(10)]), "external_dependency") == []
