"""The console page in headless Chromium on fixture data with hostile names (no broker needed).

A node named ``<script>alert(1)</script>`` and one named ``<img/src=x/onerror=alert(2)>`` must
show as text in every view; no element is created from them and no script runs. Skipped when
Debian's chromium / chromium-driver are not installed, unless FABRICFLOW_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import os

import fsspec
import pytest

from tests.browser.serve import need_browser, serve
from devtools.browser import browser, click, console_errors, wait_rendered
from devtools.console_run import wait_for
from console.app import ConsoleState, create_app
from console.history import History
from console.live import LiveStore
from tests.support.console import EVIL, EVIL2, LATER, archive_root_for, fill_store, layout

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
PORT = int(os.environ.get("FABRICFLOW_TEST_CONSOLE_PORT", "31333"))


@pytest.fixture(scope="module")
def archive_root(tmp_path_factory):
    return archive_root_for(tmp_path_factory)


@pytest.fixture(scope="module")
def page_url(archive_root):
    need_browser()
    root = archive_root
    L = layout()
    store = LiveStore(L)
    fill_store(store)
    app = create_app(ConsoleState(L, store, History(fsspec.filesystem("file"), root), None))
    with serve(app, PORT) as url:
        yield url


@pytest.fixture(scope="module")
def drv():
    with browser(1400, 900) as d:
        yield d


def _no_injection(d):
    assert d.execute_script("return document.querySelectorAll('main img, main script').length") == 0
    assert d.execute_script("return window.__xss === undefined")


def test_hostile_names_render_as_text_in_every_view(page_url, drv):
    drv.get(page_url + "#view=matrix")
    wait_rendered(drv, "matrix")
    labels = drv.execute_script("return Array.from(document.querySelectorAll('#m-labels li')).map(li => li.textContent)")
    assert EVIL in labels and EVIL2 in labels
    _no_injection(drv)

    drv.get(page_url + "#view=events")
    wait_rendered(drv, "events")
    cells = drv.execute_script("return Array.from(document.querySelectorAll('#e-table td')).map(td => td.textContent)")
    assert EVIL in cells and EVIL2 in cells
    click(drv, "#e-table tr[data-id^='alert:']")
    wait_for(lambda: EVIL2 in drv.find_element("id", "e-detail").text, 20, "the alert's detail panel")
    _no_injection(drv)

    drv.get(page_url + "#view=topology")
    wait_rendered(drv, "topology")
    assert EVIL in drv.execute_script("return Array.from(document.querySelectorAll('#o-names li')).map(e => e.textContent)")
    assert any(EVIL in t for t in drv.execute_script(
        "return Array.from(document.querySelectorAll('#o-links li')).map(e => e.textContent)"))
    _no_injection(drv)

    for view in ("jobs", "topn"):
        drv.get(page_url + "#view=" + view)
        assert wait_rendered(drv, view) == view
        _no_injection(drv)
    assert console_errors(drv) == []


def test_view_state_is_in_the_url(page_url, drv):
    drv.get(page_url + "#view=matrix&level=group&cat=collective")
    wait_rendered(drv, "matrix")
    labels = drv.execute_script("return Array.from(document.querySelectorAll('#m-labels li')).map(li => li.textContent)")
    assert labels == ["gpu", "storage"]
    assert drv.find_element("id", "m-level").get_attribute("value") == "group"
    click(drv, "#tabs button[data-view='topology']")
    wait_rendered(drv, "topology")
    assert "view=topology" in drv.current_url and "level=group" in drv.current_url
    assert console_errors(drv) == []


def test_a_long_range_says_which_archive_dataset_answered(page_url, drv):
    """A range of whole hours is drawn from the 1-hour rollups and the page says so; a few seconds come from
    the matrix windows."""
    drv.get(page_url + f"#view=matrix&mode=range&from={LATER}&to={LATER + 3_600_000}")
    wait_rendered(drv, "matrix")
    info = drv.find_element("id", "m-info")
    wait_for(lambda: "from 1-hour rollups" in info.text, 20, "the matrix info to name the 1-hour rollups")
    assert info.text.startswith("archive: ")
    drv.get(page_url + f"#view=topn&mode=range&from={LATER + 60_000}&to={LATER + 300_000}")
    wait_rendered(drv, "topn")
    wait_for(lambda: "from 1-minute rollups" in drv.find_element("id", "n-info").text, 20, "the top-N info")
    assert console_errors(drv) == []


def test_archive_outage_shows_a_banner_and_the_page_recovers(page_url, drv, archive_root):
    import os as _os

    off = archive_root + ".off"
    drv.get(page_url + "#view=events&mode=range&from=1767229200000&to=1767229230000")
    wait_rendered(drv, "events")
    _os.rename(archive_root, off)
    try:
        drv.execute_script("window.dispatchEvent(new HashChangeEvent('hashchange'))")  # re-query the archive
        banner = drv.find_element("id", "banner")
        wait_for(lambda: banner.is_displayed() and "archive unavailable" in banner.text, 20, "the archive banner")
    finally:
        _os.rename(off, archive_root)
    wait_for(lambda: not banner.is_displayed(), 20, "the banner to go once the archive is back")
    wait_for(lambda: "could not load" not in drv.find_element("id", "e-info").text, 20, "the events to load again")
    drv.get_log("browser")  # the 503 of the outage is expected; nothing else after


def _job_chart(drv) -> dict:
    """What the jobs view's ECharts instance draws: the small multiples' names and, per series, its name, its
    points and its largest value."""
    return drv.execute_script("""
        const o = echarts.getInstanceByDom(document.getElementById('j-chart')).getOption();
        return {names: o.yAxis.map((a) => a.name),
                series: o.series.map((s) => [s.name, s.xAxisIndex, s.data.length,
                                             Math.max(0, ...s.data.map((p) => p[1] || 0))])};""")


def test_jobs_view_opens_on_a_job_with_rates_and_draws_every_jobs_nodes(drv, archive_root):
    """No job in the URL: the view opens on the first job with straggler scores in the live window. A job the
    straggler detector does not score still gets each node's send/receive small multiples (all the node's
    traffic), live and for an archive range, says that it has no scores, and says what the lines count."""
    from console.layout import Layout
    from processors.logic.enrich.inventory import Inventory
    from tests.support.console import INVENTORY, WS, cell

    inv = dict(INVENTORY, jobs=[{"name": "a-idle", "nodes": ["stor01"]}, *INVENTORY["jobs"]])
    L = Layout.from_inventory(Inventory.from_dict(inv))
    store = LiveStore(L)
    fill_store(store)  # stor01 -> gpu01 2 MB in each of its three windows
    store.add("matrix", cell(WS, "gpu01", "stor01", "storage", 1_000_000))  # a checkpoint write to stor01
    store.last_record_ms -= 2000  # as if the last record came 2 s ago: the newest window is complete
    hist = History(fsspec.filesystem("file"), archive_root)
    with serve(create_app(ConsoleState(L, store, hist, None)), PORT + 1) as url:
        try:
            _idle_job_view(drv, url)
        finally:
            drv.get("about:blank")  # closes the page's event stream: the server stops at once instead of after 10 s


def _idle_job_view(drv, url):
    drv.get(url + "#view=jobs")
    wait_rendered(drv, "jobs")
    assert drv.find_element("id", "j-job").get_attribute("value") == "train-a"
    assert "no straggler scores" not in drv.find_element("id", "j-info").text
    assert "thin dotted: to / from the job's peers" in drv.find_element("id", "j-caption").text

    drv.get(url + "#view=jobs&job=a-idle")
    wait_rendered(drv, "jobs")
    wait_for(lambda: "no straggler scores" in drv.find_element("id", "j-info").text, 10, "the no-scores note")
    caption = drv.find_element("id", "j-caption").text
    assert caption.startswith("sent / received: all traffic of each node") and "per matrix window" in caption
    drawn = _job_chart(drv)
    assert drawn["names"] == ["stor01"]
    assert drawn["series"] == [["sent (all traffic)", 0, 3, 1_600_000], ["received (all traffic)", 0, 3, 800_000]]
    assert drv.find_element("id", "j-chart").size["height"] > 100
    _no_injection(drv)

    # an archive range: the hour of the later flows (stor01 -> gpu04, 3 MB, in one 6 s bin of the raw flows)
    drv.get(url + f"#view=jobs&job=a-idle&mode=range&from={LATER}&to={LATER + 3_600_000}")
    wait_rendered(drv, "jobs")
    wait_for(lambda: "per 6 s bin from raw flows" in drv.find_element("id", "j-caption").text, 10,
             "the archive caption")
    drawn = _job_chart(drv)
    assert drawn["names"] == ["stor01"]
    assert drawn["series"] == [["sent (all traffic)", 0, 600, 4_000_000], ["received (all traffic)", 0, 600, 0]]
    assert console_errors(drv) == []


def test_exporters_view_names_the_lossy_exporter_as_text(page_url, drv):
    from tests.support.console import WS

    drv.get(page_url + f"#view=exporters&mode=range&from={WS}&to={WS + 3 * 10_000}")
    assert wait_rendered(drv, "exporters") == "exporters"
    rows = drv.execute_script("return Array.from(document.querySelectorAll('#x-table tbody tr')).map("
                              "tr => Array.from(tr.children).map(td => td.textContent))")
    by = {r[0]: r for r in rows}
    assert set(by) == {"10.0.255.1", EVIL}
    assert by[EVIL][2] == "export loss" and by[EVIL][5] == "8.26 %" and by["10.0.255.1"][2] == "ok"
    assert "1 with a problem" in drv.find_element("id", "x-info").text
    _no_injection(drv)
    assert console_errors(drv) == []
