"""Link events carry the drop reasons of their port's sFlow dropped-packet notifications; packet_drops episodes."""

from __future__ import annotations

from processors.logic.detectors.linkhealth import LinkHealthConfig, LinkHealthDetector
from processors.logic.diagnosis.catalog import DiagnosisConfig
from processors.logic.diagnosis.feed import Diagnoser
from tests.support.flows import EXPORTER, counters, discards, port_info


def detector(**cfg) -> LinkHealthDetector:
    det = LinkHealthDetector(LinkHealthConfig(emit_samples=False, **cfg), switch_name=lambda e: "tor-1",
                             port_info=port_info, node_job=lambda n, t: "job-a" if n else "")
    det.diagnose = Diagnoser(DiagnosisConfig(), det.node_state, det.port_state).link
    return det


def events(det, samples):
    return [d for d in det.process(counters(samples))]


def test_a_discard_burst_names_the_reasons_of_its_interval_and_buffer_drops_stay_congestion():
    det = detector()
    det.process(counters([dict(t=0)]))
    det.add_discards(discards([dict(t=5_000, reason=259)] * 30 + [dict(t=6_000, reason=260, drops=4)]
                              + [dict(t=7_000, reason=258), dict(t=7_000, reason=259, out_if=2)]))
    (ev,) = events(det, [dict(t=10_000, seq=2, out_discards=2_000)])
    assert ev["kind"] == "discard_burst" and ev["node"] == "n0" and ev["job"] == "job-a"
    assert ev["detail"] == "200.0 discards/s; dropped-packet notifications: no_buffer_space 30, acl 1, red 1"
    dg = ev["diagnosis"]
    assert dg["verdict"] == "undetermined" and "buffer overflowed (31 of 32)" in dg["missing"][0]
    reasons = {e["signal"]: (e["source"], e["value"]) for e in dg["evidence"] if e["signal"].startswith("drop_reason:")}
    assert reasons == {"drop_reason:no_buffer_space": ("notifications", 30.0), "drop_reason:red": ("notifications", 1.0),
                       "drop_reason:acl": ("notifications", 1.0)}
    assert "_drops" not in ev


def test_acl_drops_alone_start_a_packet_drops_episode_diagnosed_as_forwarding_drops():
    det = detector(drop_notify_per_s=1.0)
    det.process(counters([dict(t=0)]))
    det.add_discards(discards([dict(t=1_000 + i * 100, reason=258, drops=i) for i in range(20)]))
    (ev,) = events(det, [dict(t=10_000, seq=2)])  # the counters see no burst: 20 notifications in 10 s = 2/s
    assert (ev["kind"], ev["detail"]) == ("packet_drops", "2.0 dropped-packet notifications/s; dropped-packet "
                                                          "notifications: acl 20")
    dg = ev["diagnosis"]
    assert dg["verdict"] == "forwarding_drop" and "20 of 20 dropped-packet notifications are acl drops" in dg["summary"]
    assert "ACLs on tor-1" in dg["next_step"] and dg["missing"] == []
    # still dropping in the next interval: the episode stays open, no second event
    det.add_discards(discards([dict(t=12_000 + i * 100, reason=258) for i in range(20)]))
    assert events(det, [dict(t=20_000, seq=3)]) == []
    # an interval below the rate closes it; the next one above opens a new one
    assert events(det, [dict(t=30_000, seq=4)]) == []
    det.add_discards(discards([dict(t=31_000 + i * 100, reason=257) for i in range(20)]))
    (again,) = events(det, [dict(t=40_000, seq=5)])
    assert again["kind"] == "packet_drops" and "routing loop" in again["diagnosis"]["next_step"]


def test_notifications_below_the_rate_or_of_other_ports_make_no_event_and_the_state_survives_a_snapshot():
    det = detector(drop_notify_per_s=5.0)
    det.process(counters([dict(t=0), dict(t=0, if_index=2)]))
    det.add_discards(discards([dict(t=1_000, reason=258)] * 20 + [dict(t=1_000, reason=258, out_if=9)] * 100))
    assert events(det, [dict(t=10_000, seq=2), dict(t=10_000, seq=2, if_index=2)]) == []
    det.add_discards(discards([dict(t=11_000, reason=258)] * 60))
    snap = det.snapshot()
    again = detector(drop_notify_per_s=5.0)
    again.restore(snap)
    (ev,) = events(again, [dict(t=20_000, seq=3)])
    assert ev["kind"] == "packet_drops" and ev["diagnosis"]["verdict"] == "forwarding_drop"
    assert (EXPORTER, 9) in again.drops.ports


def test_a_link_fault_keeps_its_verdict_and_gets_the_drop_reasons_as_evidence():
    det = detector()
    det.process(counters([dict(t=0)]))
    det.add_discards(discards([dict(t=4_000, reason=259)] * 3))
    (ev,) = events(det, [dict(t=10_000, seq=2, oper=False)])
    assert ev["kind"] == "oper_down" and ev["detail"].endswith("; dropped-packet notifications: no_buffer_space 3")
    assert ev["diagnosis"]["verdict"] == "physical_link_fault"
    assert any(e["signal"] == "drop_reason:no_buffer_space" for e in ev["diagnosis"]["evidence"])
