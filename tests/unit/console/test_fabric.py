"""The console's fabric APIs: /api/topology as a graph, /api/rails, /api/link, on the flat fixture inventory and on a
512-node rail-optimised two-tier fabric (devtools.fabric_fixture), live and from the archive."""

from __future__ import annotations

import fsspec
import pytest
from starlette.testclient import TestClient

from console import topology as topo
from console.app import ConsoleState, create_app
from console.history import History
from console.layout import Layout, PortInfo
from console.live import LiveStore
from devtools import fabric_fixture as ff
from sinks.archive.arrow_schema import table_from_dicts
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from tests.support.console import EVIL, WS, W, fill_store, layout, write_archive

T = WS + 10 * W


@pytest.fixture(scope="module")
def fabric():
    return ff.fabric_layout()


@pytest.fixture(scope="module")
def fabric_archive(tmp_path_factory, fabric):
    root = str(tmp_path_factory.mktemp("fabric-archive"))
    rows = [r for k in range(3) for r in ff.link_samples(fabric, T - (2 - k) * W)]
    b = HourlyBuffer("link_health", 0)
    b.add(table_from_dicts(rows, "link_health"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))
    return root


@pytest.fixture(scope="module")
def client(fabric, fabric_archive):
    store = LiveStore(fabric)
    ff.fill_ports(store, T)
    return TestClient(create_app(ConsoleState(fabric, store, History(fsspec.filesystem("file"), fabric_archive))))


def _links(t: dict) -> dict:
    return {k["id"]: k for k in t["links"]}


def test_a_flat_inventory_is_leaves_and_nodes_with_the_downgraded_port_degraded(tmp_path):
    write_archive(str(tmp_path))
    store = LiveStore(layout())
    fill_store(store)
    c = TestClient(create_app(ConsoleState(store.layout, store, History(fsspec.filesystem("file"), str(tmp_path)))))
    t = c.get("/api/topology").json()
    assert [s["name"] for s in t["leaves"]] == ["tor1", "tor2"] and t["spines"] == []
    assert t["counts"]["nodes"] == 5 and t["counts"]["links"] == 5 and not t["collapse"]
    links = _links(t)
    assert links["tor2:1"]["node"] == "gpu04" and links["tor2:1"]["state"] == "degraded"
    assert links["tor2:1"]["health"] == ["below_speed"] and links["tor2:1"]["rail"] is None
    assert links["tor1:1"]["state"] == "ok" and links["tor1:1"]["util"] == 0.3
    assert links["tor1:3"]["node"] == EVIL and links["tor1:3"]["state"] == "unknown"  # no counters yet
    a = c.get("/api/topology", params={"from": WS, "to": WS + 3 * W}).json()
    assert a["source"] == "archive" and _links(a)["tor2:1"]["events"] == ["link_downgrade"]
    r = c.get("/api/rails").json()  # one NIC per node: nothing to balance, one rail "none"
    assert [x["rail"] for x in r["rails"]] == [None] and r["flagged"] == 0


def test_512_nodes_fold_into_rack_bubbles_and_keep_every_problem(client):
    t = client.get("/api/topology").json()
    c = t["counts"]
    assert (c["spines"], c["leaves"], c["nodes"], c["links"]) == (8, 32, 512, 512 * 8 + 32 * 8)
    assert (c["down"], c["degraded"]) == (1, 2)
    assert t["collapse"] and t["group_by"] == "rack" and len(t["groups"]) == 32
    assert all(len(g["nodes"]) == 16 and len(g["leaves"]) == 8 for g in t["groups"])
    links = _links(t)
    # collapsed: the 256 uplinks and the one node link with a problem, not the 4096 node links
    assert len(links) == 256 + 1 and t["links_total"] == 4352
    assert links[ff.DOWNGRADED]["health"] == ["below_speed"] and links[ff.DOWNGRADED]["node"] == "gpu005"
    assert links[ff.ERRORS]["health"] == ["errors"] and links[ff.ERRORS]["errors_per_s"] == 500.0
    assert links[ff.DOWN]["state"] == "down" and links[ff.DOWN]["b"] == {"switch": "spine3", "if_index": 18}
    gl = {g["id"]: g for g in t["group_links"]}
    assert gl["rack:rack00>leaf-s0-r2"]["bad"] == 1 and gl["rack:rack00>leaf-s0-r2"]["state"] == "degraded"
    assert gl["rack:rack01>leaf-s0-r2"]["bad"] == 0 and gl["rack:rack01>leaf-s0-r2"]["links"] == 16
    rack00 = next(g for g in t["groups"] if g["id"] == "rack:rack00")
    assert rack00["bad_links"] == 1 and rack00["state"] == "degraded"
    e = client.get("/api/topology", params={"expand": "rack:rack03,rack:nope"}).json()
    assert e["expanded"] == ["rack:rack03"] and len(e["links"]) == 257 + 16 * 8
    assert len(client.get("/api/topology", params={"detail": "all"}).json()["links"]) == 4352
    assert not client.get("/api/topology", params={"group_over": 1000}).json()["collapse"]


def test_rails_flag_the_nics_below_their_expected_share(client):
    r = client.get("/api/rails").json()
    assert [x["rail"] for x in r["rails"]] == list(range(8)) and all(x["nics"] == 512 for x in r["rails"])
    low = sorted((n["node"], x["nic"]) for n in r["nodes"] for x in n["nics"] if x["below"])
    assert low == [("gpu005", "nic2"), (ff.THIN_NODE, f"nic{ff.THIN_RAIL}")] and r["flagged"] == 2
    thin = next(x for n in r["nodes"] if n["node"] == ff.THIN_NODE for x in n["nics"] if x["rail"] == ff.THIN_RAIL)
    assert thin["share"] < 0.01 and thin["expected_share"] == 1 / 8
    assert r["rails"][ff.THIN_RAIL]["below"] == 1 and r["rails"][0]["below"] == 0
    assert client.get("/api/rails", params={"below": 1}).json()["flagged"] == 0
    a = client.get("/api/rails", params={"from": T - 3 * W, "to": T + W}).json()
    assert a["source"] == "archive" and a["flagged"] == 2
    assert all(x["bytes"] > 0 for x in a["rails"])  # bytes over the 20 s the samples cover


def test_a_link_over_time_from_either_end_live_and_archived(client):
    d = client.get("/api/link", params={"id": "spine3:18"}).json()  # the spine end names the same link
    assert d["id"] == ff.DOWN and d["kind"] == "fabric" and [e["switch"] for e in d["ends"]] == ["leaf-s2-r1", "spine3"]
    assert d["now"]["state"] == "down" and len(d["ends"][0]["series"]["time_ms"]) == 3
    assert all(h == ["oper_down"] for e in d["ends"] for h in e["health"])
    n = client.get("/api/link", params={"id": ff.DOWNGRADED}).json()
    assert n["kind"] == "node" and n["node"] == "gpu005" and n["rail"] == 2 and len(n["ends"]) == 1
    assert n["ends"][0]["health"][-1] == ["below_speed"] and n["now"]["health"] == ["below_speed"]
    a = client.get("/api/link", params={"id": ff.ERRORS, "from": T - 3 * W, "to": T + W}).json()
    assert a["source"] == "archive" and a["answered"] and a["ends"][0]["series"]["errors_per_s"] == [500.0] * 3
    assert a["ends"][0]["health"] == [["errors"]] * 3 and a["ends"][1]["health"] == [[]] * 3
    for bad in ({"id": "nolink"}, {"id": "leaf-s0-r0:x"}, {}):
        r = client.get("/api/link", params=bad)
        assert r.status_code == 400 and r.json()["error"]


def test_switch_links_are_read_from_port_peers_without_a_links_section():
    L = Layout(ports=[PortInfo("tor1", 49, "spine1", 1e11), PortInfo("spine1", 3, "tor1", 1e11),
                      PortInfo("tor1", 1, "gpu01", 2.5e10)], switches=["tor1", "spine1"], roles={"spine1": "spine"})
    assert [(k.a_switch, k.a_port, k.b_switch, k.b_port) for k in topo.fabric_links(L)] == [("tor1", 49, "spine1", 3)]
    assert [(c.node, c.switch, c.if_index) for c in topo.node_nics(L)] == [("gpu01", "tor1", 1)]
    g = topo.graph(L, [], {})
    assert [s["name"] for s in g["spines"]] == ["spine1"] and [s["name"] for s in g["leaves"]] == ["tor1"]
    assert {k["id"]: k["state"] for k in g["links"]} == {"tor1:1": "unknown", "tor1:49": "unknown"}
