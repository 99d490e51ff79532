"""Storage I/O: checkpoint cadence (late / missing) and storage traffic on the compute network."""

from tests.support.policy import CLUSTER, GB, MIN, T0, assert_valid_alerts, by_state, flow, make_batch

from processors.logic.rules.policy import PolicyEngine

BASE = {"exfiltration": {"enabled": False}, "external_dependency": {"enabled": False},
        "storage_on_compute": {"enabled": False}}
T = (T0 // MIN) * MIN  # minute aligned


def timeline(e, bursts_min, minutes, active=True, jobs_nodes=(("10.0.1.1", "10.0.1.2"),)):
    """Feed one batch per minute: collective traffic while ``active``, checkpoint bursts at ``bursts_min``."""
    out = []
    for m in range(1, minutes + 1):
        t = T + m * MIN
        fl = []
        for nodes in jobs_nodes:
            if active if not callable(active) else active(m):
                fl.append(flow(nodes[0], nodes[-1], 50000, 4791, proto=17, nbytes=10**6, t=t - 30_000))
            if m - 1 in bursts_min:  # a 30 s burst of 3 GB per node in the minute before t
                for node in nodes[:2]:
                    for k in range(3):
                        fl.append(flow(node, "10.0.2.1", 812, 2049, nbytes=GB, t=t - MIN + (k + 1) * 10_000 - 1))
        out += e.process(make_batch(fl), t) if fl else e.tick(t)
    return out


def test_checkpoints_at_cadence_do_not_alert():
    e = PolicyEngine(BASE, CLUSTER)
    out = timeline(e, [0, 20, 40, 60, 80, 100, 120], 135)
    assert out == []
    assert e.rules[5].expected_ms("job-a") == 20 * MIN


def test_learned_cadence_late_then_missing_then_resolved():
    e = PolicyEngine(BASE, CLUSTER)
    out = timeline(e, [0, 20, 40, 95], 110)
    assert_valid_alerts(out)
    seq = [x for x in by_state(out) if x[1] != "updated"]
    updates = [a["window_end_ms"] for a in out if a["state"] == "updated" and a["rule"] == "checkpoint_late"]
    assert updates and all(b - a >= 5 * MIN for a, b in zip(updates, updates[1:]))  # rate-limited updates
    assert seq == [("checkpoint_late", "firing"), ("checkpoint_late", "resolved"), ("checkpoint_missing", "firing"),
                   ("checkpoint_missing", "resolved")]
    out = [a for a in out if a["state"] != "updated"]
    late = out[0]
    assert late["dedup_key"] == "checkpoint_late|job-a" and late["severity"] == "warning"
    assert late["entities"]["expected_interval_s"] == "1200"
    # late fires once 1.5 x 20 min have passed since the burst at minute 40
    assert late["window_end_ms"] > T + 70 * MIN and late["window_end_ms"] <= T + 72 * MIN
    missing = out[2]
    assert missing["severity"] == "critical"
    assert T + 90 * MIN < missing["window_end_ms"] <= T + 92 * MIN
    assert out[3]["window_end_ms"] >= T + 96 * MIN  # resolved once the burst arrived


def test_late_arrival_is_reported_even_without_ticks_in_between():
    e = PolicyEngine(BASE, CLUSTER)
    out = timeline(e, [0, 20, 40], 45)
    # one big batch later: the next checkpoint arrived 33 minutes after the previous one
    t = T + 74 * MIN
    fl = [flow("10.0.1.1", "10.0.2.1", 812, 2049, nbytes=GB, t=T + 73 * MIN + k * 10_000) for k in range(3)]
    e2 = PolicyEngine(BASE, CLUSTER)
    e2.restore(e.snapshot())
    out = e2.process(make_batch(fl), t)
    # the late arrival is an event: it fires and, already over, resolves in the same step
    assert by_state(out) == [("checkpoint_late", "firing"), ("checkpoint_late", "resolved")]
    assert out[0]["last_seen_ms"] == T + 73 * MIN and "arrived" in out[0]["summary"]
    assert out[0]["entities"]["overdue_s"] == str(33 * 60)


def test_not_learned_before_min_bursts():
    e = PolicyEngine(BASE, CLUSTER)
    assert timeline(e, [0, 20], 120) == []  # two bursts: no cadence yet
    assert e.rules[5].expected_ms("job-a") is None


def test_idle_job_is_not_reported():
    e = PolicyEngine(BASE, CLUSTER)
    out = timeline(e, [0, 20, 40], 150, active=lambda m: m <= 45)
    assert out == []


def test_configured_interval_anchors_on_job_start():
    cfg = {**BASE, "checkpoint": {"jobs": {"job-b": {"interval": "10m"}}}}
    e = PolicyEngine(cfg, CLUSTER)
    out = timeline(e, [], 30, jobs_nodes=(("10.0.1.3",),))
    assert [(a["rule"], a["state"]) for a in out if a["state"] == "firing"] == [
        ("checkpoint_late", "firing"), ("checkpoint_missing", "firing")]
    assert out[0]["entities"]["job"] == "job-b"


def test_small_storage_reads_are_not_bursts():
    e = PolicyEngine(BASE, CLUSTER)
    fl = [flow("10.0.1.1", "10.0.2.1", 812, 2049, nbytes=10**8, t=T + m * MIN) for m in range(60)]
    for m in range(60):
        e.process(make_batch([f for f in fl if f["t_end"] == T + m * MIN]), T + m * MIN + 1)
    assert e.rules[5].jobs["job-a"]["starts"] == []


SOC = {"exfiltration": {"enabled": False}, "external_dependency": {"enabled": False}, "checkpoint": {"enabled": False},
       "storage_on_compute": {"compute_interfaces": [{"exporter": "10.255.0.9", "ifindexes": [49, 50]}]}}


def test_storage_between_gpu_nodes_alerts():
    e = PolicyEngine(SOC, CLUSTER)
    out = e.process(make_batch([flow("10.0.1.1", "10.0.1.3", 900, 2049, nbytes=5000, t=T)]), T)
    assert_valid_alerts(out)
    assert by_state(out) == [("storage_on_compute", "firing")]
    assert out[0]["dedup_key"] == "storage_on_compute|nodes|gpu|gpu"
    assert out[0]["bytes_est"] == 5000


def test_storage_on_compute_interface_alerts():
    e = PolicyEngine(SOC, CLUSTER)
    fl = [flow("10.0.1.1", "10.0.2.1", 900, 2049, t=T, exporter="10.255.0.9", in_if=7, out_if=50),
          flow("10.0.1.1", "10.0.2.1", 900, 2049, t=T, exporter="10.255.0.1", in_if=7, out_if=50),  # other switch
          flow("10.0.1.1", "10.0.1.2", 900, 4791, proto=17, t=T, exporter="10.255.0.9", in_if=49)]  # not storage
    out = e.process(make_batch(fl), T)
    assert [a["dedup_key"] for a in out] == ["storage_on_compute|iface|10.255.0.9|50"]
    assert out[0]["entities"]["ifindex"] == "50" and out[0]["flows"] == 1


def test_storage_to_storage_group_is_fine():
    e = PolicyEngine(SOC, CLUSTER)
    fl = [flow("10.0.1.1", "10.0.2.1", 900, 2049, t=T), flow("10.0.2.1", "10.0.1.1", 2049, 900, t=T),
          flow("10.0.1.1", "10.0.1.2", 900, 4791, proto=17, t=T)]
    assert e.process(make_batch(fl), T) == []
