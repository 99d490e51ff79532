"""The demo's detection lines: a straggler explained by a link event names the port as switch/ifN."""

from __future__ import annotations

from devtools.detections import DetectionFeed
from fabricflow.settings import load_settings


class _NoConsumer:
    def subscribe(self, topics):
        self.topics = topics


def _link(kind="link_downgrade"):
    return {"time_ms": 1_000, "kind": kind, "exporter": "10.0.255.2", "switch": "tor2", "if_index": 4,
            "detail": "if_speed 25000000000 -> 1000000000 bps", "node": "gpu12", "job": "train-a"}


def _straggler(cause):
    return {"job": "train-a", "node": "gpu11", "straggler": True, "window_start_ms": 2_000, "ratio_sent": 0.33,
            "score": -5.3, "evidence_windows": 3, "explained_by": cause}


def test_straggler_cause_is_named_by_switch_and_interface():
    feed = DetectionFeed(load_settings(None), consumer=_NoConsumer())
    assert feed.interpret("link", _link()).entity == "tor2/if4"
    d = feed.interpret("straggler", _straggler("10.0.255.2|4"))
    assert d.summary.endswith("; explained by the link event on tor2/if4")
    assert d.cause == "10.0.255.2|4"  # the key stays what the scorer compares


def test_a_cause_without_a_seen_link_record_keeps_its_key():
    feed = DetectionFeed(load_settings(None), consumer=_NoConsumer())
    d = feed.interpret("straggler", _straggler("10.0.255.9|7"))
    assert d.summary.endswith("; explained by the link event on 10.0.255.9|7")
