"""The detection feed's diagnoses: a starting detection names a determined verdict, a later record announces a new one
once, and the latest diagnosis of every detection is kept by its ref."""

from __future__ import annotations

from devtools.detections import DetectionFeed
from fabricflow.settings import load_settings
from processors.logic.diagnosis.catalog import MICROBURST, UNDETERMINED, diagnosis, undetermined


class _NoConsumer:
    def subscribe(self, topics):
        pass


def incast(state, ws, diag):
    return {"event_id": "gpu05@1000", "state": state, "window_start_ms": ws, "window_end_ms": ws + 200,
            "destination": "gpu05", "sources": ["a", "b", "c", "d"], "aggregate_bps": 30e9, "capacity_bps": 25e9,
            "fraction": 1.2, "fraction_low": 1.1, "fraction_high": 1.3, "dst_port": "10.0.255.1|5",
            "dst_out_discards_per_s": -1.0, "diagnosis": diag}


def test_an_incast_announces_its_verdict_once_it_is_determined():
    feed = DetectionFeed(load_settings(None), consumer=_NoConsumer())
    wait = undetermined("no counter sample yet", ["a counter sample"], [], "wait", "c")
    burst = diagnosis(MICROBURST, "tor1/if5 dropped 244119 packets/s", "Check tor1's buffer", "c", [])
    first = feed.interpret("incast", incast("open", 1000, wait))
    assert first.kind == "incast" and first.diagnosis == UNDETERMINED and "diagnosis" not in first.summary
    assert feed.interpret("incast", incast("update", 1200, wait)) is None
    said = feed.interpret("incast", incast("update", 2000, burst))
    assert said.kind == "diagnosis" and said.entity == "gpu05" and said.diagnosis == MICROBURST
    assert said.summary == "switch buffer micro-burst: tor1/if5 dropped 244119 packets/s. Next: Check tor1's buffer."
    assert feed.interpret("incast", incast("close", 3000, burst)) is None  # the same verdict: said once
    assert feed.diagnoses[first.ref]["verdict"] == MICROBURST


def test_an_alert_keeps_its_latest_diagnosis_until_resolved():
    feed = DetectionFeed(load_settings(None), consumer=_NoConsumer())
    base = {"dedup_key": "congestion|train-b|ecn_ce", "rule": "congestion", "severity": "warning", "summary": "s",
            "window_start_ms": 0, "window_end_ms": 10_000, "first_seen_ms": 0}
    fired = feed.interpret("alert", base | {"state": "firing", "diagnosis": None})
    assert fired.kind == "congestion" and fired.diagnosis == ""
    d = diagnosis("congestion_control_not_reacting", "no CNP", "Check DCQCN", "c", [])
    said = feed.interpret("alert", base | {"state": "resolved", "diagnosis": d})
    assert said.kind == "diagnosis" and feed.diagnoses[fired.ref]["verdict"] == "congestion_control_not_reacting"
