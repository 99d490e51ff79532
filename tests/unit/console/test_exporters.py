"""The console's exporter health table: /api/exporters over a backfilled archive, and the states it names."""

from __future__ import annotations

import fsspec
import pytest
from starlette.testclient import TestClient

from console.app import ConsoleState, create_app
from console.exporters import THRESHOLDS, exporter_health
from console.history import History
from console.layout import load_layout
from console.live import LiveStore
from tests.support import scenario_archives as sa


@pytest.fixture(scope="module")
def tuning(scenario_archive):
    return scenario_archive(sa.scenario_doc("tuning"))


def test_api_lists_the_scenario_exporters(tuning):
    archive, inv = tuning
    lay = load_layout(str(inv))
    c = TestClient(create_app(ConsoleState(lay, LiveStore(lay), History(fsspec.filesystem("file"), str(archive)),
                                           None, None)))
    r = c.get("/api/exporters", params={"from": "2026-12-01T14:00:00", "to": "2026-12-01T14:10:00"})
    assert r.status_code == 200, r.text
    rows = r.json()["exporters"]
    assert rows and all(x["datagrams"] > 0 and x["protocol"] in ("sflow5", "netflow5", "netflow9", "ipfix")
                        for x in rows)
    assert r.json()["thresholds"] == THRESHOLDS
    assert c.get("/api/exporters", params={"from": "x"}).status_code == 400
    bare = TestClient(create_app(ConsoleState(lay, LiveStore(lay), None, None, None)))
    assert bare.get("/api/exporters").status_code == 400  # no archive: said, not an empty table


def _q(exporter, **kw):
    row = dict(exporter=exporter, protocol="sflow5", last_seen_ms=1_000_000, datagrams=100, records=1000,
               sequence_lost=0, sequence_received=100, records_without_rate=0, restarts=0, clock_skew_ms=None,
               sampler_samples=900, sampler_drops=0)
    return row | kw


def test_states_follow_the_alert_thresholds():
    rows = exporter_health([
        _q("a"), _q("b", last_seen_ms=1_000_000 - THRESHOLDS["silent_ms"] - 1), _q("c", sequence_lost=5),
        _q("d", protocol="netflow9", clock_skew_ms=42_000.0, sampler_samples=None, sampler_drops=None),
        _q("e", records_without_rate=200, sampler_drops=100),
    ], [{"exporter": "a", "drop_notifications": 3}, {"exporter": "z", "drop_notifications": 1}], 1_000_000)
    got = {x["exporter"]: (x["state"], x["problems"]) for x in rows}
    assert got == {"a": ("ok", []), "b": ("silent", ["silent"]), "c": ("export loss", ["export loss"]),
                   "d": ("clock skew", ["clock skew"]), "e": ("sampler drops", ["sampler drops", "no sampling rate"]),
                   "z": ("ok", [])}
    by = {x["exporter"]: x for x in rows}
    assert by["a"]["drop_notifications"] == 3 and by["z"]["last_seen_ms"] is None
    assert by["c"]["loss_ratio"] == pytest.approx(5 / 105) and by["d"]["sampler_loss_ratio"] is None
