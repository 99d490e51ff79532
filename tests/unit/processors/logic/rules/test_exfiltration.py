"""Exfiltration: large sustained transfers from the model store to unauthorized destinations."""

from tests.support.policy import CLUSTER, GB, MIN, T0, assert_valid_alerts, by_state, flow, make_batch

from processors.logic.rules.policy import PolicyEngine

CFG = {"external_dependency": {"enabled": False}, "checkpoint": {"enabled": False},
       "exfiltration": {"authorized_cidrs": ["198.51.100.128/25"]}}


def transfer(dst, total, seconds, start=T0, src="10.0.4.1", step=10):
    """A transfer of ``total`` bytes over ``seconds`` as one flow record per ``step`` seconds."""
    n = max(1, seconds // step)
    return [flow(src, dst, 40000, 443, nbytes=total // n, t=start + (i + 1) * step * 1000, dur=step * 1000)
            for i in range(n)]


def run(e, flows_, batch_ms=60_000):
    out = []
    flows_ = sorted(flows_, key=lambda f: f["t_end"])
    t = flows_[0]["t_end"] // batch_ms * batch_ms
    while flows_:
        t += batch_ms
        part = [f for f in flows_ if f["t_end"] <= t]
        flows_ = [f for f in flows_ if f["t_end"] > t]
        out += e.process(make_batch(part), t)
    return out


def test_large_sustained_transfer_alerts():
    e = PolicyEngine(CFG, CLUSTER)
    out = run(e, transfer("203.0.113.9", 3 * GB, 180))
    assert_valid_alerts(out)
    ex = [a for a in out if a["rule"] == "exfiltration"]
    assert [a["state"] for a in ex] == ["firing"]
    a = ex[0]
    assert a["severity"] == "critical" and a["dedup_key"] == "exfiltration|model-store|203.0.113.9"
    assert a["entities"]["src_nodes"] == "ms-01" and a["entities"]["dst_addr"] == "203.0.113.9"
    assert a["sample_flows"][0].startswith("tcp 10.0.4.1:40000 -> 203.0.113.9:443")
    # evidence is everything seen in the window so far, not double counted
    e2 = PolicyEngine(CFG, CLUSTER)
    out2 = run(e2, transfer("203.0.113.9", 3 * GB, 180)) + e2.tick(T0 + 8 * MIN)
    fired = [a for a in out2 if a["rule"] == "exfiltration"]
    assert fired[-1]["bytes_est"] <= 3 * GB


def test_evidence_accumulates_without_double_counting():
    cfg = {**CFG, "alerts": {"exfiltration": {"update_every": 1}}}
    e = PolicyEngine(cfg, CLUSTER)
    out = run(e, transfer("203.0.113.9", 6 * GB, 300))
    ex = [a for a in out if a["rule"] == "exfiltration"]
    assert ex[0]["state"] == "firing" and ex[-1]["state"] == "updated"
    assert ex[-1]["bytes_est"] == 6 * GB and ex[-1]["flows"] == 30


def test_spread_over_several_model_store_nodes_counts_together():
    e = PolicyEngine(CFG, CLUSTER)
    flows_ = transfer("203.0.113.9", 600_000_000, 120, src="10.0.4.1") + \
        transfer("203.0.113.9", 600_000_000, 120, src="10.0.4.2")
    out = [a for a in run(e, flows_) if a["rule"] == "exfiltration"]
    assert len(out) == 1 and out[0]["entities"]["src_nodes"] == "ms-01,ms-02"


def test_authorized_backup_endpoint_is_not_exfiltration():
    # group external-authorized (from the inventory) and a configured CIDR
    for dst in ("198.51.100.7", "198.51.100.200"):
        e = PolicyEngine(CFG, CLUSTER)
        assert by_state(run(e, transfer(dst, 5 * GB, 300)), "exfiltration") == []


def test_short_burst_below_duration_is_not_exfiltration():
    e = PolicyEngine(CFG, CLUSTER)
    flows_ = [flow("10.0.4.1", "203.0.113.9", 1, 443, nbytes=2 * GB, t=T0 + 20_000, dur=20_000)]
    assert by_state(run(e, flows_), "exfiltration") == []


def test_small_volume_is_not_exfiltration():
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(run(e, transfer("203.0.113.9", 900_000_000, 300)), "exfiltration") == []


def test_volume_must_fall_within_the_window():
    # 2 GB but spread over 40 minutes: never more than 1 GB in any 10 min
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(run(e, transfer("203.0.113.9", 2 * GB, 2400)), "exfiltration") == []


def test_internal_destinations_and_other_groups_are_not_exfiltration():
    e = PolicyEngine(CFG, CLUSTER)
    flows_ = transfer("10.0.1.1", 5 * GB, 300) + transfer("203.0.113.9", 5 * GB, 300, src="10.0.1.2")
    assert by_state(run(e, flows_), "exfiltration") == []


def test_resolves_after_transfer_stops():
    e = PolicyEngine(CFG, CLUSTER)
    out = run(e, transfer("203.0.113.9", 3 * GB, 180))
    out += e.tick(T0 + 20 * MIN)
    assert by_state(out, "exfiltration") == [("exfiltration", "firing"), ("exfiltration", "resolved")]


def test_late_or_large_batches_are_judged_in_event_time():
    # a late batch carries a transfer that ended 30 minutes before the watermark:
    # it is still exfiltration (judged by its own timestamps), already over, so it fires and resolves
    e = PolicyEngine(CFG, CLUSTER)
    fl = transfer("203.0.113.9", 3 * GB, 180)
    out = e.process(make_batch(fl), T0 + 40 * MIN)
    assert by_state(out, "exfiltration") == [("exfiltration", "firing"), ("exfiltration", "resolved")]
    # one batch holding two hours: 2 GB spread over 40 minutes is never > 1 GB per 10 minutes
    e = PolicyEngine(CFG, CLUSTER)
    assert by_state(e.process(make_batch(transfer("203.0.113.9", 2 * GB, 2400)), T0 + 120 * MIN)) == []
