"""event_diagnoses_total: each event counted once per verdict it reaches, labels from the closed verdict set."""

from __future__ import annotations

from sinks.metrics.state import MetricsState
from tests.support.metrics_state import T0, scrape, values


def diag(verdict: str) -> dict:
    return {"verdict": verdict, "title": verdict, "summary": "", "next_step": "", "cannot_tell": "", "missing": [],
            "evidence": []}


def incast(state: str, ws: int, verdict: str, event_id="gpu05@1") -> dict:
    return {"event_id": event_id, "state": state, "window_start_ms": ws, "window_end_ms": ws + 200,
            "destination": "gpu05", "destination_group": "gpu", "fraction": 1.2, "diagnosis": diag(verdict)}


def test_an_incast_counts_each_verdict_it_reaches_once_and_redelivery_not_again():
    st = MetricsState()
    recs = [incast("open", T0, "undetermined"), incast("update", T0 + 200, "undetermined"),
            incast("update", T0 + 1000, "switch_buffer_microburst"), incast("close", T0 + 2000, "switch_buffer_microburst")]
    st.add_incast(recs, now=0.0)
    st.add_incast(recs, now=1.0)  # re-delivered
    scrape(st)
    assert values(st, "event_diagnoses_total") == {("incast", "undetermined"): 1.0,
                                                    ("incast", "switch_buffer_microburst"): 1.0}


def test_straggler_episodes_link_events_and_congestion_alerts():
    st = MetricsState()
    s = {"job": "train-a", "node": "gpu03", "score": -5.0}
    st.add_straggler([s | {"window_end_ms": T0 + 10_000 * k, "straggler": k != 2,
                           "diagnosis": diag("host_not_network") if k != 2 else None} for k in range(4)], now=0.0)
    st.add_link_health([{"kind": "error_burst", "exporter": "10.0.255.1", "if_index": 3, "time_ms": T0, "switch": "tor1",
                         "diagnosis": diag("physical_link_fault")}], now=0.0)
    st.add_alerts([{"rule": "congestion", "severity": "warning", "state": "firing", "dedup_key": "congestion|j|ecn_ce",
                    "first_seen_ms": T0, "window_end_ms": T0 + 10_000, "diagnosis": diag("congestion_handled_by_dcqcn")}],
                  now=0.0)
    scrape(st)
    assert values(st, "event_diagnoses_total") == {
        ("straggler", "host_not_network"): 2.0,  # two episodes (the flag dropped in between)
        ("link", "physical_link_fault"): 1.0, ("congestion", "congestion_handled_by_dcqcn"): 1.0}


def test_an_unknown_verdict_is_a_bad_record_not_a_label():
    st = MetricsState()
    assert st.add_incast([incast("open", T0, "a guess")], now=0.0) == 0
    scrape(st)
    assert values(st, "event_diagnoses_total") == {}
    assert values(st, "fabricflow_metrics_undecodable_messages_total")[("incast", "bad_record")] == 1.0
    assert values(st, "incast_events_total") == {}  # skipped whole
