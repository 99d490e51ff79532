"""The jobs view's per-node send/receive rates for every job (not only jobs the straggler detector scores):
from the live matrix windows, and from the archive's raw flows or rollups, on hand-built data."""

from __future__ import annotations

import time

import fsspec
import pytest
from starlette.testclient import TestClient

from console.app import ConsoleState, create_app
from console.history import History
from console.layout import Layout
from console.live import LiveStore
from tests.support.console import EVIL, EVIL2, INVENTORY, WS, W, cell, score

# "serve": an inference job the straggler detector never scores (no collective traffic between its nodes)
INV = dict(INVENTORY, nodes=[*INVENTORY["nodes"], {"name": "web01", "ips": ["10.0.3.1"], "rack": "r2", "switch": "tor2",
                                                   "group": "web"}],
           jobs=[*INVENTORY["jobs"], {"name": "serve", "nodes": ["web01", "stor01"]}])


def _layout() -> Layout:
    from processors.logic.enrich.inventory import Inventory

    return Layout.from_inventory(Inventory.from_dict(INV))


def _store(L: Layout) -> LiveStore:
    store = LiveStore(L)
    for c in [cell(WS, "stor01", "gpu01", "storage", 2_000_000), cell(WS, "web01", "gpu01", "other", 4_500_000),
              cell(WS, EVIL, "web01", "other", 1_000_000), cell(WS, EVIL2, "web01", "other", 1234),
              cell(WS, "storage", "gpu", "storage", 2_000_000, "group"),  # group level: not a node's traffic
              # one cell in two parts (two workers): summed
              cell(WS + W, "stor01", "web01", "storage", 1_000_000),
              cell(WS + W, "stor01", "web01", "storage", 2_000_000),
              cell(WS + 2 * W, "gpu01", "gpu02", "collective", 5_000_000)]:
        store.add("matrix", c)
    for k in range(3):  # train-a is scored, serve is not
        for n in ("gpu01", "gpu02", EVIL, "gpu04"):
            store.add("straggler", score(WS + k * W, n, 5_000_000))
    return store


def _quiet(store: LiveStore) -> None:
    """As if the last record came 2 s ago: the newest window is complete."""
    store.last_record_ms -= 2000


def test_live_rates_of_a_job_without_straggler_scores():
    L = _layout()
    store = _store(L)
    c = TestClient(create_app(ConsoleState(L, store, None, None, None)))
    # the newest window while it still takes cells is left out (as the matrix's newest complete window)
    store.last_record_ms = int(time.time() * 1000)  # a record just now, however long the set-up took
    assert c.get("/api/job", params={"name": "serve"}).json()["traffic"]["t"] == [WS, WS + W]
    _quiet(store)
    j = c.get("/api/job", params={"name": "serve"}).json()
    assert [n["node"] for n in j["nodes"]] == ["web01", "stor01"] and all(n["t"] == [] for n in j["nodes"])
    tr = j["traffic"]
    assert (tr["source"], tr["scope"], tr["bin_ms"], tr["t"]) == ("live", "all", W, [WS, WS + W, WS + 2 * W])
    assert (j["start_ms"], j["end_ms"]) == (WS, WS + 3 * W)  # the time axis of the windows held
    # all of a node's traffic in each window, whatever the peer (outside the job, not in the inventory) or category
    assert tr["nodes"] == [
        {"node": "web01", "sent_bps": [3_600_000.0, 0.0, 0.0],
         "recv_bps": [(1_000_000 + 1234) * 8 / 10, 2_400_000.0, 0.0]},
        {"node": "stor01", "sent_bps": [1_600_000.0, 2_400_000.0, 0.0], "recv_bps": [0.0, 0.0, 0.0]}]
    # a window that takes more cells is summed again (the sums are kept per window until then)
    store.add("matrix", cell(WS + W, "web01", "stor01", "mgmt", 500))
    _quiet(store)
    tr = c.get("/api/job", params={"name": "serve"}).json()["traffic"]
    assert tr["nodes"][0]["sent_bps"] == [3_600_000.0, 400.0, 0.0] and tr["nodes"][1]["recv_bps"] == [0.0, 400.0, 0.0]
    # a scored job has both: the scores' rates (to its peers) and each node's rates over all its traffic
    t = c.get("/api/job", params={"name": "train-a"}).json()
    assert t["nodes"][0]["sent_bps"] == [4_000_000.0] * 3
    assert [n["node"] for n in t["traffic"]["nodes"]] == ["gpu01", "gpu02", EVIL, "gpu04"]
    assert t["traffic"]["nodes"][0]["recv_bps"] == [(2_000_000 + 4_500_000) * 8 / 10, 0.0, 0.0]
    assert t["traffic"]["nodes"][2]["sent_bps"] == [800_000.0, 0.0, 0.0]
    # a range without an archive: the live windows in it
    r = c.get("/api/job", params={"name": "serve", "from": str(WS + W), "to": str(WS + 2 * W)}).json()["traffic"]
    assert (r["source"], r["t"], r["nodes"][1]["sent_bps"]) == ("live", [WS + W], [2_400_000.0])


def test_no_windows_held_and_a_job_without_nodes():
    L = _layout()
    c = TestClient(create_app(ConsoleState(L, LiveStore(L), None, None, None)))
    tr = c.get("/api/job", params={"name": "serve"}).json()["traffic"]
    assert tr["t"] == [] and tr["nodes"] == [{"node": "web01", "sent_bps": [], "recv_bps": []},
                                             {"node": "stor01", "sent_bps": [], "recv_bps": []}]
    assert c.get("/api/job", params={"name": "nobody"}).json()["traffic"]["nodes"] == []


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from sinks.archive.buffer import HourlyBuffer
    from sinks.archive.parquet import ParquetWriter
    from sinks.archive.arrow_schema import table_from_columns
    from tests.support.archive import enriched

    root = str(tmp_path_factory.mktemp("archive"))
    rows = [{"time_end_ms": WS + 1000, "src_node": "web01", "dst_node": "gpu01", "category": "collective",
             "bytes_est": 6_000_000},
            {"time_end_ms": WS + 7000, "src_node": "stor01", "dst_node": "web01", "category": "storage",
             "bytes_est": 3_000_000},
            # another exporter saw the same packet: counted once
            {"time_end_ms": WS + 7000, "src_node": "stor01", "dst_node": "web01", "category": "storage",
             "bytes_est": 3_000_000, "duplicate": True},
            # NetFlow v9 (another observation layer than the detectors' sFlow): not counted
            {"time_end_ms": WS + 8000, "src_node": "web01", "dst_node": "stor01", "category": "mgmt",
             "bytes_est": 777, "export_protocol": 3},
            # from an address that is no node
            {"time_end_ms": WS + 13_000, "src_node": "", "dst_node": "web01", "category": "other", "bytes_est": 1200},
            {"time_end_ms": WS + 65_000, "src_node": "web01", "dst_node": "gpu01", "category": "collective",
             "bytes_est": 600_000}]
    b = HourlyBuffer("flows_enriched", 0)
    b.add(table_from_columns(enriched(rows), "flow_enriched"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))  # with its 1-minute and 1-hour rollups
    return root


def test_archive_rates_from_the_raw_flows_and_the_rollups(archive):
    L = _layout()
    hist = History(fsspec.filesystem("file"), archive, protocols=("sflow5",))
    c = TestClient(create_app(ConsoleState(L, LiveStore(L), hist, None, None)))

    def traffic(lo, hi):
        r = c.get("/api/job", params={"name": "serve", "from": str(lo), "to": str(hi)})
        assert r.status_code == 200, r.text
        return r.json()["traffic"]

    # an hour: the raw flows in 6 s bins, every bin of the range
    hour = traffic(WS, WS + 3_600_000)
    assert (hour["source"], hour["answered"], hour["bin_ms"]) == ("archive", "raw flows", 6000)
    assert hour["t"] == list(range(WS, WS + 3_600_000, 6000))
    g, s = hour["nodes"]
    assert g["node"] == "web01" and s["node"] == "stor01"
    assert g["sent_bps"][:3] == [8_000_000.0, 0.0, 0.0] and g["sent_bps"][10] == 800_000.0
    assert g["recv_bps"][:3] == [0.0, 4_000_000.0, 1600.0]
    assert s["sent_bps"][:3] == [0.0, 4_000_000.0, 0.0] and sum(s["recv_bps"]) == 0.0
    assert sum(g["sent_bps"]) == 8_800_000.0 and sum(g["recv_bps"]) == 4_001_600.0
    # a week: hourly bins from the 1-hour rollups
    week = traffic(WS - 3 * 86_400_000, WS + 4 * 86_400_000)
    assert (week["answered"], week["bin_ms"], len(week["t"])) == ("1-hour rollups", 3_600_000, 168)
    k = week["t"].index(WS)
    g, s = week["nodes"]
    assert g["sent_bps"][k] == 6_600_000 * 8 / 3600 and g["recv_bps"][k] == 3_001_200 * 8 / 3600
    assert s["sent_bps"][k] == 3_000_000 * 8 / 3600
    assert sum(g["sent_bps"]) == g["sent_bps"][k] and sum(s["recv_bps"]) == 0.0
    # a day starting mid-minute: 2-minute bins from the 1-minute rollups; the rollups hold the minutes starting
    # in the range, so the first bin covers one minute and its rate is over that minute
    day = traffic(WS + 30_000, WS + 30_000 + 86_400_000)
    assert (day["answered"], day["bin_ms"], day["t"][0]) == ("1-minute rollups", 120_000, WS)
    assert day["nodes"][0]["sent_bps"][:2] == [600_000 * 8 / 60, 0.0] and sum(day["nodes"][1]["sent_bps"]) == 0.0


def test_archive_names_are_parameters(archive):
    L = _layout()
    L.jobs["odd"] = ["x' OR 1=1 --", "web01"]
    hist = History(fsspec.filesystem("file"), archive, protocols=("sflow5",))
    c = TestClient(create_app(ConsoleState(L, LiveStore(L), hist, None, None)))
    tr = c.get("/api/job", params={"name": "odd", "from": str(WS), "to": str(WS + 3_600_000)}).json()["traffic"]
    assert [n["node"] for n in tr["nodes"]] == ["x' OR 1=1 --", "web01"]
    assert sum(tr["nodes"][0]["sent_bps"]) == 0.0 and tr["nodes"][1]["sent_bps"][0] == 8_000_000.0
