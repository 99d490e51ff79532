"""The port state the diagnosis reads from link health: errors, interval, samples since a time, admin status, flaps."""

from __future__ import annotations

from processors.logic.detectors.linkhealth import LinkHealthConfig, LinkHealthDetector
from tests.support.flows import counters

EXPORTER = "192.0.2.10"


def detector(**cfg):
    return LinkHealthDetector(LinkHealthConfig(**cfg), switch_name=lambda e: "tor-1",
                              port_info=lambda e, i: ("n0", 25e9) if (e, i) == (EXPORTER, 1) else ("", float("nan")))


def test_node_state_reports_errors_interval_and_the_samples_since_a_time():
    det = detector()
    det.process(counters([dict(t=0), dict(t=10_000, seq=2, in_errors=500, out_discards=2_000),
                          dict(t=20_000, seq=3, in_errors=500, out_discards=2_000)]))
    st = det.node_state("n0", 20_000, since_ms=15_000)
    assert (st["errors_per_s"], st["interval_ms"], st["sampled_ms"], st["samples_since"]) == (0.0, 10_000, 20_000, 1)
    assert det.node_state("n0", 20_000, since_ms=5_000)["samples_since"] == 2
    assert det.node_state("n0", 20_000, since_ms=5_000)["out_discards_per_s"] == 200.0  # the highest since
    assert det.port_state(EXPORTER, 1, 20_000)["port"] == f"{EXPORTER}|1"
    assert det.port_state(EXPORTER, 9, 20_000) is None


def test_flaps_count_oper_down_transitions_within_the_window_and_admin_status_is_kept():
    det = detector(flap_window_s=60)
    det.process(counters([dict(t=t, seq=i + 1, oper=i % 2 == 0) for i, t in enumerate(range(0, 90_000, 10_000))]))
    # down at 10, 30, 50, 70 s (up in between)
    assert det.node_state("n0", 80_000)["flaps"] == 3  # 30, 50, 70 s are within 60 s of 80 s
    assert det.node_state("n0", 200_000)["flaps"] == 0
    det.process(counters([dict(t=90_000, seq=10, oper=False, admin=False)]))
    st = det.node_state("n0", 90_000)
    assert st["event"] == "oper_down" and not st["admin_up"] and not st["oper_up"]


def test_older_snapshots_restore_with_admin_up_and_no_flaps():
    det = detector()
    det.process(counters([dict(t=0), dict(t=10_000, seq=2, oper=False)]))
    snap = det.snapshot()
    for k in ("err", "iv", "admin"):
        del snap["state"][k]
    del snap["downs"]
    again = detector()
    again.restore(snap)
    st = again.node_state("n0", 10_000)
    assert st["admin_up"] and st["flaps"] == 0 and st["errors_per_s"] == 0.0
