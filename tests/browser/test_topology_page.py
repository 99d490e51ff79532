"""The Topology view in headless Chromium on a 512-node rail-optimised fabric (devtools.fabric_fixture): the graph
grouped into rack bubbles with the degraded links red, a bubble opened by a real click, a hover's details, a link's
drill-down and the per-rail view. Skipped without Debian's chromium / chromium-driver unless
FABRICFLOW_REQUIRE_BROWSER=1."""

from __future__ import annotations

import os
import time

import pytest

from devtools.console_run import wait_for
from console.app import ConsoleState, create_app
from console.live import LiveStore
from devtools import fabric_fixture as ff
from devtools.browser import browser, click, console_errors, wait_rendered
from tests.browser.serve import need_browser, serve

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
PORT = int(os.environ.get("FABRICFLOW_TEST_CONSOLE_PORT", "31333")) + 3  # +1, +2: the other browser tests' servers
RED = "#ff5a5f"


@pytest.fixture(scope="module")
def page():
    need_browser()
    layout = ff.fabric_layout()
    store = LiveStore(layout)
    ff.fill_ports(store, int(time.time() * 1000) // 10_000 * 10_000)
    with serve(create_app(ConsoleState(layout, store)), PORT) as url, browser(1600, 1000) as d:
        yield url, d


def _links(d) -> dict:
    return d.execute_script("""const out = {};
      for (const li of document.querySelectorAll('#o-links li'))
        out[li.dataset.link] = {state: li.dataset.state, color: li.dataset.color, kind: li.dataset.kind, text: li.textContent};
      return out;""")


def _drawn(d) -> tuple[int, int]:
    g = d.find_element("id", "o-graph")
    return int(g.get_attribute("data-drawn-nodes")), int(g.get_attribute("data-drawn-links"))


def _item_pixel(d, item_id: str) -> tuple[float, float]:
    """Where the graph drew item ``item_id`` (canvas pixels from the chart's top left)."""
    return tuple(d.execute_script("""const c = echarts.getInstanceByDom(document.getElementById('o-graph'));
      const data = c.getModel().getSeriesByIndex(0).getData();
      for (let i = 0; i < data.count(); i++) if (data.getId(i) === arguments[0]) return c.convertToPixel({seriesIndex: 0}, data.getItemLayout(i));
      return null;""", item_id))


def _at(d, item_id: str, action: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    g = d.find_element("id", "o-graph")
    x, y = _item_pixel(d, item_id)
    size = g.size
    chain = ActionChains(d).move_to_element_with_offset(g, int(x - size["width"] / 2), int(y - size["height"] / 2))
    (chain.click() if action == "click" else chain).perform()


def test_512_nodes_are_drawn_as_rack_bubbles_with_the_degraded_links_red(page):
    url, d = page
    d.get(url + "#view=topology")
    assert wait_rendered(d, "topology") == "topology"
    assert _drawn(d) == (8 + 32 + 32, 32 * 8 + 32 * 8)  # spines, leaves, rack bubbles; uplinks, rack-to-leaf links
    info = d.find_element("id", "o-info").text
    assert "512 nodes" in info and "4352 links" in info and "3 with a problem" in info and "grouped by rack" in info
    links = _links(d)
    assert links[ff.ERRORS]["state"] == "degraded" and links[ff.ERRORS]["color"] == RED
    assert links[ff.DOWN]["state"] == "down" and links[ff.DOWN]["color"] == RED
    assert links["rack:rack00>leaf-s0-r2"]["state"] == "degraded" and links["rack:rack00>leaf-s0-r2"]["color"] == RED
    healthy = [k for k, v in links.items() if v["state"] == "ok"]
    assert len(healthy) == 512 - 3 and all(links[k]["color"] != RED for k in healthy)
    names = d.execute_script("return Array.from(document.querySelectorAll('#o-names li')).map(e => e.textContent)")
    assert "spine0" in names and "leaf-s3-r7" in names and "rack31" in names and "gpu000" not in names
    _at(d, "rack:rack00", "hover")  # the bubble's tooltip: its nodes and the link with a problem
    wait_for(lambda: "1 with a problem" in d.find_element("id", "o-graph").text, 10, "the rack00 tooltip")
    assert "16" in d.find_element("id", "o-graph").text
    zoom = """const c = echarts.getInstanceByDom(document.getElementById('o-graph'));
      return c.getOption().series[0].zoom;"""
    d.execute_script("""echarts.getInstanceByDom(document.getElementById('o-graph')).dispatchAction(
      {type: 'graphRoam', seriesIndex: 0, zoom: 2, originX: 300, originY: 300});""")
    assert d.execute_script(zoom) == pytest.approx(2)
    d.execute_script("document.body.dataset.rendered = ''; window.dispatchEvent(new HashChangeEvent('hashchange'))")
    wait_rendered(d, "topology")  # a refresh (as a live update does) keeps the zoom
    assert d.execute_script(zoom) == pytest.approx(2)
    assert console_errors(d) == []


def test_a_click_opens_a_bubble_into_its_nodes(page):
    url, d = page
    d.get(url + "?fresh=1#view=topology")  # a new document: not the zoomed graph of the test before
    wait_rendered(d, "topology")
    _at(d, "rack:rack03", "click")
    wait_for(lambda: "expand=rack%3Arack03" in d.current_url or "expand=rack:rack03" in d.current_url, 10, "expand in URL")
    wait_for(lambda: _drawn(d)[0] == 72 - 1 + 16, 20, "rack03's 16 nodes drawn")
    assert _drawn(d)[1] == 512 - 8 + 16 * 8  # its 8 bubble-to-leaf links become 128 node links
    links = _links(d)
    assert sum(1 for v in links.values() if v["kind"] == "node") == 128
    assert "gpu048" in d.execute_script("return Array.from(document.querySelectorAll('#o-names li')).map(e => e.textContent)")
    _at(d, "node:gpu048", "click")  # a node of an open group closes it again
    wait_for(lambda: _drawn(d)[0] == 72, 20, "rack03 closed")
    assert console_errors(d) == []


def test_a_link_opens_its_history_with_the_unhealthy_samples_marked(page):
    url, d = page
    d.get(url + "#view=topology&link=" + ff.ERRORS)
    wait_rendered(d, "topology")
    wait_for(lambda: d.find_element("id", "o-link").is_displayed(), 20, "the link panel")
    title = d.find_element("id", "o-link-title").text
    assert "leaf-s1-r4:1001 ↔ spine1:13" in title and "degraded (errors)" in title
    chart = d.find_element("id", "o-link-chart")
    assert int(chart.get_attribute("data-unhealthy-samples")) == 3  # every sample has 500 errors/s
    d.get(url + "#view=topology&link=" + ff.DOWNGRADED)
    wait_rendered(d, "topology")
    wait_for(lambda: "gpu005 nic2 (rail 2)" in d.find_element("id", "o-link-title").text, 20, "the NIC link title")
    assert "below speed" in d.find_element("id", "o-link-title").text
    assert console_errors(d) == []


def test_the_rail_view_highlights_the_nics_below_their_share(page):
    url, d = page
    d.get(url + "#view=topology&tsub=rails")
    wait_rendered(d, "topology")
    rows = wait_for(lambda: d.execute_script("return Array.from(document.querySelectorAll('#o-rails-table tbody tr'))"
                                             ".map(r => [r.dataset.node, r.dataset.rail])"), 20, "the rails table")
    assert sorted(rows) == [["gpu005", "2"], [ff.THIN_NODE, str(ff.THIN_RAIL)]]
    assert d.find_element("id", "o-graph-wrap").is_displayed() is False
    series = d.execute_script("""const c = echarts.getInstanceByDom(document.getElementById('o-rails-chart'));
      return c.getOption().series.map(s => [s.name, s.data.length]);""")
    assert series == [["rail total (in + out)", 8], ["NIC", 4096 - 2], ["NIC below its expected share", 2]]
    assert "2 NICs below 50 %" in d.find_element("id", "o-info").text
    click(d, f"#o-rails-table tr[data-node='{ff.THIN_NODE}']")  # a flagged NIC opens its link over time
    wait_for(lambda: f"{ff.THIN_NODE} nic{ff.THIN_RAIL} (rail {ff.THIN_RAIL})" in d.find_element("id", "o-link-title").text,
             20, "the thin NIC's link")
    assert "tsub=rails" not in d.current_url and d.find_element("id", "o-graph-wrap").is_displayed()
    assert console_errors(d) == []
