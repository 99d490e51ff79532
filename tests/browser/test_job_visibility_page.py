"""The jobs view's collective visibility panel in headless Chromium: a job whose members are active but whose
collectives the flows never show reads "collectives not visible (InfiniBand, or this fabric is not sampled)",
never idle; a RoCEv2 job shows its share and its operations by type per node. Skipped without a browser, unless
FABRICFLOW_REQUIRE_BROWSER=1."""

from __future__ import annotations

import os

import pytest

from tests.browser.serve import need_browser, serve
from devtools.browser import browser, console_errors, wait_rendered
from devtools.console_run import wait_for
from console.app import ConsoleState, create_app
from console.layout import Layout
from console.live import LiveStore
from processors.logic.enrich.inventory import Inventory
from tests.support.console import INVENTORY, WS, W, cell, fill_store

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
PORT = int(os.environ.get("FABRICFLOW_TEST_CONSOLE_PORT", "31333")) + 4  # +1..+3: the other browser tests' servers


def _store() -> tuple[Layout, LiveStore]:
    """train-a (RoCEv2 write/ack/CNP from gpu01 besides the fixture's collectives) and ib-job (two nodes that
    only exchange SSH and storage over IP: active, no collective)."""
    nodes = [{"name": n, "ips": [f"10.0.3.{k}"], "rack": "r3", "group": "gpu", "capacity": "200G"}
             for k, n in ((5, "gpu05"), (6, "gpu06"))]
    inv = dict(INVENTORY, nodes=[*INVENTORY["nodes"], *nodes],
               jobs=[*INVENTORY["jobs"], {"name": "ib-job", "nodes": ["gpu05", "gpu06"]}])
    L = Layout.from_inventory(Inventory.from_dict(inv))
    store = LiveStore(L)
    fill_store(store)
    for k in range(3):
        ws = WS + k * W
        store.add("matrix", cell(ws, "gpu01", "gpu02", "rocev2", 2_000_000) | {
            "roce_write_packets_est": 1500, "roce_ack_packets_est": 40, "cnp_packets_est": 3})
        store.add("matrix", cell(ws, "gpu05", "gpu06", "ssh", 2_000))
        store.add("matrix", cell(ws, "gpu06", "gpu05", "storage", 20_000))
    store.last_record_ms -= 2000  # the newest window is complete
    return L, store


@pytest.fixture(scope="module")
def url():
    need_browser()
    L, store = _store()
    with serve(create_app(ConsoleState(L, store, None, None)), PORT) as u:
        yield u


@pytest.fixture(scope="module")
def drv():
    with browser(1400, 900) as d:
        yield d
        d.get("about:blank")  # closes the page's event stream so the server stops at once


def _panel(drv) -> dict:
    return drv.execute_script("""
      const s = document.getElementById('j-vis-state');
      const rows = Array.from(document.querySelectorAll('#j-roce tr')).map(tr => Array.from(tr.children).map(c => c.textContent));
      return {state: s && s.dataset.state, text: s && s.textContent, detail: document.getElementById('j-vis').textContent, rows};""")


def test_job_with_active_members_and_no_collectives_reads_not_visible(url, drv):
    drv.get(url + "#view=jobs&job=ib-job")
    wait_rendered(drv, "jobs")
    wait_for(lambda: _panel(drv)["state"] == "not_visible", 10, "the not-visible state")
    p = _panel(drv)
    assert p["text"] == "collectives not visible (InfiniBand, or this fabric is not sampled)"
    assert "0 of 2 active members" in p["detail"] and "not seen: gpu05, gpu06" in p["detail"]
    assert "RoCEv2 operations: none seen" in p["detail"] and p["rows"] == []
    assert console_errors(drv) == []


def test_roce_job_shows_its_share_and_operations_per_node(url, drv):
    drv.get(url + "#view=jobs&job=train-a")
    wait_rendered(drv, "jobs")
    wait_for(lambda: _panel(drv)["state"] == "visible", 10, "the visible state")
    p = _panel(drv)
    assert p["text"] == "collectives visible" and "4 of 4 active members" in p["detail"]
    head, total, *nodes = p["rows"]
    assert head == ["node (sender)", "send", "write", "read request", "read response", "ack", "atomic", "cnp"]
    assert total[0] == "job" and total[2] == "4.5 k" and total[5] == "120" and total[7] == "9"
    assert [r[0] for r in nodes] == ["gpu01"]
    assert drv.execute_script("return document.querySelectorAll('#j-vis img, #j-vis script').length") == 0
    assert console_errors(drv) == []
