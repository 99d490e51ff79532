"""The console's JSON APIs on a live store and an archive with the same fixture data (no broker, no browser)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from console.app import ConsoleState, create_app
from console.history import History
from console.live import LiveStore
from console.server import ConsoleConfigError, check_listen
from tests.support.console import EVIL, EVIL2, LATER, W, WS, archive_root_for, fill_store, layout


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory):
    return archive_root_for(tmp_path_factory)


def make_state(archive_root=None, token=None, fill=True) -> ConsoleState:
    L = layout()
    store = LiveStore(L)
    if fill:
        fill_store(store)
    history = None
    if archive_root is not None:
        import fsspec

        history = History(fsspec.filesystem("file"), archive_root)
    return ConsoleState(L, store, history, None, token)


@pytest.fixture()
def client(archive_root):
    return TestClient(create_app(make_state(archive_root)))


RANGE = {"from": str(WS), "to": str(WS + 3 * W)}


def test_matrix_live_window_dense_and_ordered(client):
    r = client.get("/api/matrix", params={"window": WS})
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["source"] == "live"
    labels = m["labels"]
    # inventory nodes first, by switch then job, then names only seen in the data
    assert labels[:5] == [EVIL, "gpu01", "gpu02", "gpu04", "stor01"] and labels[5] == EVIL2
    n = len(labels)
    assert len(m["values"]) == n * n
    cell = lambda s, d: m["values"][labels.index(s) * n + labels.index(d)]
    assert cell("gpu01", "gpu02") == 5_010_000 and cell("gpu02", "gpu01") == 0
    assert m["nonzero"] == 6 and m["blocks"][0]["name"] == "train-a"


def test_matrix_category_filter_and_levels(client):
    m = client.get("/api/matrix", params={"window": WS, "category": "storage"}).json()
    assert m["total_bytes"] == 2_010_000
    g = client.get("/api/matrix", params={"window": WS, "level": "group"}).json()
    assert g["labels"] == ["gpu", "storage"] and g["total_bytes"] == 16_500_000
    r = client.get("/api/matrix", params={"window": WS, "level": "rack"}).json()
    assert r["labels"][:2] == ["r1", "r2"]
    assert r["values"][0] == 9_010_000  # r1 -> r1: gpu01->gpu02 (both), gpu02->EVIL


def test_matrix_range_from_archive_matches_live(client, archive_root):
    live = client.get("/api/matrix", params=RANGE).json()
    assert live["source"] == "live" and live["windows"] == 3
    # an archive-only console answers the same range from Parquet
    arch_client = TestClient(create_app(make_state(archive_root, fill=False)))
    arch = arch_client.get("/api/matrix", params=RANGE).json()
    assert arch["source"] == "archive" and arch["windows"] == 3
    assert arch["labels"] == live["labels"] and arch["values"] == live["values"]


def test_archive_ranges_are_read_from_the_smallest_dataset_that_answers(archive_root):
    """As ``fabricflow query``: whole hours from the 1-hour rollups, whole minutes from the 1-minute ones, the
    seconds at the edges from the matrix windows; the response names them."""
    L = layout()
    hist = History(__import__("fsspec").filesystem("file"), archive_root, protocols=("sflow5",))
    c = TestClient(create_app(ConsoleState(L, LiveStore(L), hist, None, None)))

    def get(path, lo, hi, **kw):
        r = c.get(path, params={"from": str(lo), "to": str(hi), **kw})
        assert r.status_code == 200, r.text
        return r.json()

    hour = get("/api/matrix", LATER, LATER + 3_600_000)
    assert hour["source"] == "archive" and hour["answered"] == "1-hour rollups"
    assert [a["dataset"] for a in hour["answered_by"]] == ["traffic_1h"] and hour["answered_by"][0]["files"] == 1
    labels, n = hour["labels"], len(hour["labels"])
    cell = lambda m, s, d: m["values"][m["labels"].index(s) * len(m["labels"]) + m["labels"].index(d)]
    # each packet once (the duplicate is not counted), the detector protocols only (the NetFlow v9 record is not)
    assert cell(hour, "gpu01", "gpu02") == 6_000_000 and cell(hour, "stor01", "gpu04") == 3_000_000
    assert hour["total_bytes"] == 9_000_000 and n == len(labels)
    week = get("/api/matrix", LATER - 3 * 86_400_000, LATER + 4 * 86_400_000, level="group")
    # the whole hours of the fixture day too: its flows (the fixture's matrix windows are not the same data)
    assert week["answered"] == "1-hour rollups" and week["total_bytes"] == 9_000_000 + 36_865_000
    minutes = get("/api/matrix", LATER + 60_000, LATER + 5 * 60_000)
    assert minutes["answered"] == "1-minute rollups" and minutes["total_bytes"] == 6_000_000
    detail = get("/api/matrix/cell", LATER + 60_000, LATER + 5 * 60_000, src="gpu01", dst="gpu02")
    assert detail["answered"] == "1-minute rollups" and detail["samples"] == 2 and detail["rel95"] is not None
    top = get("/api/topn", LATER, LATER + 3_600_000)
    assert top["answered"] == "1-hour rollups" and top["talkers"][0] == {
        "src": "gpu01", "dst": "gpu02", "bytes_est": 6_000_000, "rate_bps": 6_000_000 * 8 / 3600}
    # seconds at the edges from the matrix windows, the whole minutes between from the 1-minute rollups
    edge = get("/api/matrix", WS + W, WS + 3 * 60_000 + 5_000)
    assert [a["dataset"] for a in edge["answered_by"]] == ["matrix_windows", "traffic_1m", "matrix_windows"]
    assert edge["answered"] == "matrix windows + 1-minute rollups" and edge["total_bytes"] == 2 * 16_510_000 + 2 * 1234
    # a range inside one minute: the matrix windows alone, read with Arrow as before
    one = get("/api/matrix", WS, WS + W)
    assert one["answered"] == "matrix windows" and one["windows"] == 1
    # a port's series over a week: one point per hour from the port rollups; an hour: the link health samples
    port = get("/api/port", LATER - 3 * 86_400_000, LATER + 4 * 86_400_000, switch="tor1", if_index=1)
    assert port["answered"] == "1-hour port rollups" and port["series"]["time_ms"] == [LATER, LATER + 3_600_000]
    assert port["series"]["util_in"] == [0.5, 0.5] and port["series"]["util_out"] == [0.0, 0.0]
    assert port["series"]["errors_per_s"] == pytest.approx([1 / 6, 1 / 6]) and port["series"]["oper_up"] == [True] * 2
    port = get("/api/port", WS, WS + 3_600_000, switch="tor2", if_index=1)
    assert port["answered"] == "link health samples" and len(port["series"]["time_ms"]) == 1
    # the job timeline: a week in hourly bins from the 1-hour rollups, an hour in 6 s bins from the raw flows
    j = get("/api/job", LATER - 3 * 86_400_000, LATER + 4 * 86_400_000, name="train-a")
    assert j["answered"] == "1-hour rollups" and j["bin_ms"] == 3_600_000
    assert [(b["phase"], b["start_ms"], b["end_ms"]) for b in j["bands"]] == [("communication", WS, WS + 3_600_000)]
    j = get("/api/job", WS, WS + 3_600_000, name="train-a")
    assert j["answered"] == "raw flows" and j["bin_ms"] == 6_000
    assert [(b["phase"], b["start_ms"], b["end_ms"]) for b in j["bands"]] == [("communication", WS, WS + 6_000)]


def test_cell_detail_has_category_split_and_uncertainty(client):
    d = client.get("/api/matrix/cell", params={"window": WS, "src": "gpu01", "dst": "gpu02"}).json()
    assert [c["category"] for c in d["categories"]] == ["collective", "storage"]
    assert d["bytes_est"] == 5_010_000 and d["rate_bps"] == pytest.approx(5_010_000 * 8 / 10)
    assert d["rel95"] == pytest.approx(1.96 / 200 ** 0.5)


@pytest.mark.parametrize("path,params,needle", [
    ("/api/matrix", {"level": "pod"}, "level must be one of"),
    ("/api/matrix", {"category": "collective,bogus"}, "unknown value 'bogus'"),
    ("/api/matrix", {"window": "abc"}, "window must be an integer"),
    ("/api/matrix", {"from": "yesterday", "to": "1"}, "cannot read 'yesterday' as a time"),
    ("/api/matrix", {"from": "2000", "to": "1000"}, "to must be after from"),
    ("/api/matrix", {"from": "1000"}, "from and to go together"),
    ("/api/matrix", {"last": "forever"}, "duration"),
    ("/api/matrix", {"last": "30d"}, "longer than"),
    ("/api/matrix", {"rows": "1"}, "unknown parameter 'rows'"),
    ("/api/matrix/cell", {"src": "gpu01"}, "dst is required"),
    ("/api/topn", {"n": "0"}, "n must be between 1 and 200"),
    ("/api/events", {"types": "incast,meteor"}, "unknown value 'meteor'"),
    ("/api/events", {"limit": "1e9"}, "limit must be an integer"),
    ("/api/events", {"q": "x" * 201}, "longer than 200"),
    ("/api/port", {"switch": "tor1", "if_index": "-1"}, "if_index must be between"),
    ("/api/port", {"switch": "tor1\x00"}, "control characters"),
    ("/api/job", {}, "name is required"),
    ("/api/event", {}, "id is required"),
])
def test_bad_parameters_are_400_with_a_message(client, path, params, needle):
    r = client.get(path, params=params)
    assert r.status_code == 400, (path, params, r.text)
    assert needle in r.json()["error"]


def test_sql_injection_text_is_a_value_not_sql(client):
    evil = "x' OR 1=1 --"
    r = client.get("/api/event", params={"id": "incast:" + evil, **RANGE})
    assert r.status_code == 404
    r = client.get("/api/port", params={"switch": evil, "if_index": 1, **RANGE})
    assert r.status_code == 200 and r.json()["series"]["time_ms"] == []
    r = client.get("/api/job", params={"name": evil, **RANGE})
    assert r.status_code == 200 and r.json()["nodes"] == []


def test_events_on_one_axis_with_filters(client):
    evs = client.get("/api/events").json()["events"]
    types = sorted({e["type"] for e in evs})
    assert types == ["alert", "incast", "link", "straggler"]
    strag = [e for e in evs if e["type"] == "straggler"]
    assert [e["entity"] for e in strag] == [EVIL] and strag[0]["end_ms"] - strag[0]["start_ms"] == 2 * W
    only = client.get("/api/events", params={"types": "incast"}).json()["events"]
    assert [e["entity"] for e in only] == ["gpu02"]
    q = client.get("/api/events", params={"q": "downgrade"}).json()["events"]
    assert [e["subtype"] for e in q] == ["link_downgrade"] and q[0]["nodes"] == ["gpu04"]


def test_event_detail_related_and_flows(client):
    evs = client.get("/api/events", params=RANGE).json()["events"]
    incast = next(e for e in evs if e["type"] == "incast")
    d = client.get("/api/event", params={"id": incast["id"], **RANGE}).json()
    assert d["event"]["uncertainty"]["fraction_low"] == 0.9
    flows = d["flows"]
    assert {f["dst_node"] for f in flows} == {"gpu02"} and len(flows) == 3
    assert flows[0]["bytes_est"] >= flows[-1]["bytes_est"]
    assert flows[0]["src_addr"].startswith("10.0.1.") and flows[0]["exporter_addr"] == "10.0.255.1"
    assert flows[0]["sampling_rate"] == 4096 and flows[0]["dst_port"] == 50051
    # straggler EVIL's ring successor is gpu04, whose port tor2/if1 was downgraded
    strag = next(e for e in evs if e["type"] == "straggler")
    d = client.get("/api/event", params={"id": strag["id"], **RANGE}).json()
    assert any(r["subtype"] == "link_downgrade" and "ring successor gpu04" in r["reason"] for r in d["related"])


def test_events_carry_their_diagnosis_live_and_from_the_archive(client):
    for params in ({}, RANGE):
        evs = client.get("/api/events", params=params).json()["events"]
        inc = next(e for e in evs if e["type"] == "incast")
        assert inc["diagnosis"] == {"verdict": "switch_buffer_microburst", "title": "switch buffer micro-burst"}
        assert all(e["diagnosis"] is None for e in evs if e["type"] != "incast")
        d = client.get("/api/event", params={"id": inc["id"], **params}).json()["event"]["diagnosis"]
        assert d["next_step"].startswith("Check tor1's buffer") and d["evidence"][0]["value"] == 9000.0
    found = client.get("/api/events", params={"q": "micro-burst"}).json()["events"]
    assert [e["type"] for e in found] == ["incast"]


def test_topology_marks_downgraded_port(client):
    t = client.get("/api/ports").json()
    ports = {(p["switch"], p["if_index"]): p for s in t["switches"] for p in s["ports"]}
    assert ports[("tor2", 1)]["health"] == ["below_speed"] and ports[("tor2", 1)]["node"] == "gpu04"
    assert ports[("tor1", 1)]["health"] == [] and ports[("tor1", 1)]["util"] == 0.3
    assert ports[("tor1", 3)]["node"] == EVIL and ports[("tor1", 3)]["if_speed"] is None
    s = client.get("/api/port", params={"switch": "tor2", "if_index": 1}).json()
    assert len(s["series"]["time_ms"]) == 3 and s["series"]["if_speed"][-1] == 1_000_000_000
    a = client.get("/api/ports", params=RANGE).json()
    ports = {(p["switch"], p["if_index"]): p for s in a["switches"] for p in s["ports"]}
    assert "below_speed" not in ports[("tor2", 1)]["health"]  # the archived sample is still at 25G
    assert ports[("tor2", 1)]["events"] == ["link_downgrade"]


def test_job_view_and_topn(client):
    j = client.get("/api/job", params={"name": "train-a"}).json()
    assert [n["node"] for n in j["nodes"]] == ["gpu01", "gpu02", EVIL, "gpu04"]
    assert j["nodes"][2]["straggler"] == [False, True, True]
    assert j["stragglers"][0]["entity"] == EVIL
    t = client.get("/api/topn", params={"window": WS, "n": 1}).json()
    assert t["links"][0] == {"src": "gpu", "dst": "gpu", "category": "collective", "bytes_est": 14_500_000,
                             "rate_bps": 14_500_000 * 8 / 10}
    assert t["links"][1]["src"] == "(others)" and t["links"][1]["folded"] == 1
    assert t["talkers"][0]["src"] == "gpu01" and t["talkers"][-1]["folded"] == 5


def test_status_and_page(client):
    s = client.get("/api/status").json()
    assert s["live"]["windows"] == 3 and s["archive"]["ok"] is True and s["broker"]["ok"] is None
    page = client.get("/")
    assert page.status_code == 200 and "static/console.js" in page.text
    assert client.get("/api/nothing").status_code == 404


def test_archive_down_is_503_and_status_says_so(tmp_path):
    state = make_state(str(tmp_path / "gone"), fill=False)
    c = TestClient(create_app(state))
    r = c.get("/api/matrix", params=RANGE)
    assert r.status_code == 503 and "archive unavailable" in r.json()["error"]
    assert c.get("/api/status").json()["archive"]["ok"] is False
    (tmp_path / "gone").mkdir()
    assert c.get("/api/matrix", params=RANGE).status_code == 200
    assert c.get("/api/status").json()["archive"]["ok"] is True


def test_token_required_on_every_request(archive_root):
    c = TestClient(create_app(make_state(archive_root, token="s3cret")))
    assert c.get("/api/status").status_code == 401
    assert c.get("/").status_code == 401
    assert c.get("/static/console.js").status_code == 401
    assert c.get("/api/status", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/status", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    page = c.get("/", params={"token": "s3cret"})
    assert page.status_code == 200 and "static/console.js?token=s3cret" in page.text
    assert c.get("/static/console.js", params={"token": "s3cret"}).status_code == 200


def test_listen_needs_token_off_loopback():
    assert check_listen("127.0.0.1:8090", None) == ("127.0.0.1", 8090)
    assert check_listen("[::1]:8090", None) == ("::1", 8090)
    with pytest.raises(ConsoleConfigError, match="console.token"):
        check_listen("0.0.0.0:8090", None)
    with pytest.raises(ConsoleConfigError, match="console.token"):
        check_listen("10.1.2.3:8090", SecretStr(""))
    assert check_listen("0.0.0.0:8090", SecretStr("t")) == ("0.0.0.0", 8090)


def test_names_are_returned_verbatim_for_the_page_to_escape(client):
    """The API returns names as data (JSON-escaped); the page puts them in text nodes (browser test)."""
    r = client.get("/api/inventory")
    assert EVIL in [n["name"] for n in r.json()["nodes"]]
    assert r.headers["content-type"].startswith("application/json")


def test_a_downgrade_relates_to_a_later_straggler_until_the_port_recovers():
    from console import events as ev
    from tests.support.console import link

    L = layout()
    down = ev.link_event(link(WS, "tor2", 1, kind="link_downgrade", speed=1_000_000_000), "gpu04")
    strag = {"id": "straggler:train-a:x:1", "type": "straggler", "subtype": "straggler", "entity": EVIL,
             "start_ms": WS + 600_000, "end_ms": WS + 660_000, "nodes": [EVIL], "summary": ""}
    rel = ev.related(strag, [down], L)
    assert [r["id"] for r in rel] == [down["id"]] and "ring successor gpu04" in rel[0]["reason"]
    up = ev.link_event(link(WS + 300_000, "tor2", 1, kind="speed_change"), "gpu04")
    assert ev.related(strag, [down, up], L) == []


def test_an_incast_relates_to_its_destinations_port_not_to_a_sources_port():
    """An incast belongs to its destination's port: a link event on a source's port is not its cause."""
    from console import events as ev
    from tests.support.console import INCAST, link

    L = layout()
    inc = ev.incast_event(INCAST)  # gpu01, EVIL, gpu04 -> gpu02
    on_source = ev.link_event(link(WS + 2100, "tor2", 1, kind="error_burst", errors=50.0), "gpu04")
    on_dest = ev.link_event(link(WS + 2100, "tor1", 2, kind="error_burst", errors=50.0), "gpu02")
    assert [(r["id"], r["reason"]) for r in ev.related(inc, [on_source, on_dest], L)] == [
        (on_dest["id"], "link event on the destination gpu02's port")]
    # the other way round too: the source's link event does not list the incast
    assert ev.related(on_source, [inc], L) == []
    assert [r["id"] for r in ev.related(on_dest, [inc], L)] == [inc["id"]]


def test_detector_alerts_name_their_nodes_and_job():
    from console import events as ev

    storm = ev.alert_event({"dedup_key": "conn_storm|gpu04", "rule": "conn_storm", "state": "firing",
                            "window_start_ms": WS, "window_end_ms": WS + 10_000,
                            "entities": {"node": "gpu04", "signals": "syn", "port": "tor2/if1"}})
    cong = ev.alert_event({"dedup_key": "congestion|train-a|ecn_ce", "rule": "congestion", "state": "firing",
                           "window_start_ms": WS, "window_end_ms": WS + 10_000,
                           "entities": {"job": "train-a", "signal": "ecn_ce", "nodes": "gpu02:0.300,gpu01:0.060"}})
    assert (storm["entity"], storm["nodes"], storm["job"]) == ("gpu04", ["gpu04"], "")
    assert (cong["entity"], cong["nodes"], cong["job"]) == ("congestion|train-a|ecn_ce", ["gpu02", "gpu01"], "train-a")


def test_iteration_period_from_the_jobs_last_traffic_not_the_ranges_end(tmp_path):
    """A range reaching well past a job's traffic (a past hour, a job that stopped): the period comes from
    the last minutes of the job's communication, not from the empty last minutes of the range."""
    import fsspec

    from sinks.archive.buffer import HourlyBuffer

    from sinks.archive.parquet import ParquetWriter
    from sinks.archive.arrow_schema import table_from_columns
    from tests.support.archive import enriched

    start = WS + 60_000  # 2 minutes of a ring exchange, a 300 ms burst every 2 s, then nothing for the hour
    rows = [{"time_end_ms": start + k * 2000 + j * 100, "src_node": "gpu01", "dst_node": "gpu02",
             "category": "collective", "bytes": 1500, "packets": 1, "bytes_est": 6_000_000, "packets_est": 4096,
             "src_job": "train-a", "dst_job": "train-a"} for k in range(60) for j in range(3)]
    b = HourlyBuffer("flows_enriched", 0)
    b.add(table_from_columns(enriched(rows), "flow_enriched"), 0)
    ParquetWriter(None, str(tmp_path)).write_plan(b.flush_plan(force=True))
    state = make_state(fill=False)
    state.history = History(fsspec.filesystem("file"), str(tmp_path))
    c = TestClient(create_app(state))
    hour = {"from": str(WS), "to": str(WS + 3_600_000)}
    j = c.get("/api/job", params={"name": "train-a", **hour}).json()
    assert any(b["phase"] == "communication" for b in j["bands"]), j["bands"]
    assert j["iteration_period_ms"] == 2000.0, j["iteration_period_ms"]
    # the span still ends at the range's end when the job's traffic goes on to it
    assert state.history.iteration_period_ms("train-a", WS, start + 120_000) == 2000.0
    # a range with no communication of the job: no period, and no raw-flow read for it
    late = {"from": str(WS + 1_800_000), "to": str(WS + 3_600_000)}
    assert c.get("/api/job", params={"name": "train-a", **late}).json()["iteration_period_ms"] is None


def test_jobs_say_which_have_live_rates():
    """/api/jobs names the straggler scores held live per job: the page opens on a job that has some, not on
    the first name (an inference job sorting before the training jobs had an empty view)."""
    from console.layout import Layout
    from processors.logic.enrich.inventory import Inventory
    from tests.support.console import INVENTORY

    inv = dict(INVENTORY, jobs=[{"name": "a-idle", "nodes": ["stor01"]}, *INVENTORY["jobs"]])
    L = Layout.from_inventory(Inventory.from_dict(inv))
    store = LiveStore(L)
    fill_store(store)
    c = TestClient(create_app(ConsoleState(L, store, None, None, None)))
    jobs = c.get("/api/jobs").json()["jobs"]
    assert [(j["name"], j["live_scores"] > 0) for j in jobs] == [("a-idle", False), ("train-a", True)]


def test_a_packet_drops_link_event_shows_with_its_drop_reasons():
    from console import events as ev
    from tests.support.console import link

    e = ev.link_event(link(WS, "tor2", 1, kind="packet_drops",
                           detail="3.0 dropped-packet notifications/s; dropped-packet notifications: acl 30"), "gpu04")
    assert e["subtype"] == "packet_drops" and e["severity"] == "warning"
    assert e["summary"] == ("packet drops on tor2/if1 (gpu04): 3.0 dropped-packet notifications/s; dropped-packet "
                            "notifications: acl 30")
