"""The Compare view and change markers in headless Chromium, on the ``tuning`` scenario backfilled offline.

The view compares train-b around its change marker and shows the ECN-CE and CNP verdicts; the *Record a change*
form posts a marker whose hostile text ends up as text (the jobs view then counts it and draws it on canvas). No
broker: the console writes the marker into (a copy of) the archive. Skipped without Debian's chromium /
chromium-driver, unless FABRICFLOW_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import os
import shutil
import time

import fsspec
import pytest

from devtools.browser import browser, console_errors, wait_rendered
from tests.browser.serve import need_browser, serve
from devtools.console_run import wait_for
from console.app import ConsoleState, create_app
from console.closedloop import mark_storer
from console.history import History
from console.layout import load_layout
from console.live import LiveStore
from fabricflow.settings import load_settings
from tests.support import scenario_archives as sa

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
PORT = int(os.environ.get("FABRICFLOW_TEST_CONSOLE_PORT", "31333")) + 2  # +1: test_console_page's second server
HOSTILE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def page(scenario_archive, tmp_path_factory):
    need_browser()
    archive, inv = scenario_archive(sa.scenario_doc("tuning"))
    root = tmp_path_factory.mktemp("compare-page") / "archive"
    shutil.copytree(archive, root)  # the form writes a marker: not into the session's shared archive
    L = load_layout(str(inv))
    settings = load_settings(None, archive={"url": f"file://{root}"})
    app = create_app(ConsoleState(L, LiveStore(L), History(fsspec.filesystem("file"), str(root)), None,
                                  store_marks=mark_storer(settings, live=False, archive=True)))
    with serve(app, PORT) as url, browser(1500, 1000) as d:
        yield d, url, sa.start_ms(sa.scenario_doc("tuning"))


def _cells(d, css):
    return d.execute_script(f"return Array.from(document.querySelectorAll({css!r})).map(e => e.textContent)")


def test_compare_shows_the_verdicts_around_the_marker(page):
    d, url, _t0 = page
    d.get(url + "#view=compare&centity=train-b")
    assert wait_rendered(d, "compare") == "compare", d.find_element("id", "c-info").text
    rows = d.execute_script("return Array.from(document.querySelectorAll('#c-result table.cmp tbody tr'))"
                            ".map(r => [r.dataset.entity, r.dataset.metric, r.lastChild.textContent])")
    improved = sorted((e, m) for e, m, v in rows if v == "improved")
    assert rows, d.find_element("id", "c-info").text
    assert improved == [("gpu07", "cnp_share"), ("gpu07", "ecn_ce_share"), ("train-b", "cnp_share"),
                        ("train-b", "ecn_ce_share")]
    assert not any(v == "worse" for _e, _m, v in rows)
    assert "raised the RoCE queue" in d.find_element("css selector", ".cmp-head").text
    assert console_errors(d) == []


def test_a_change_recorded_in_the_form_shows_as_text_on_the_timeline(page):
    d, url, t0 = page
    d.get(url + "#view=compare&centity=train-a&cscope=job")
    wait_rendered(d, "compare")
    d.find_element("id", "c-mark-text").send_keys(HOSTILE)
    d.execute_script("document.getElementById('c-mark-at').value = arguments[0]",
                     time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 / 1000 + 150)))
    d.find_element("css selector", "#c-mark button[type=submit]").click()
    wait_for(lambda: "recorded" in d.find_element("id", "c-mark-info").text, 20, "the marker to be recorded")
    wait_for(lambda: any(HOSTILE in e.text for e in d.find_elements("css selector", ".cmp-head")), 30,
             "compare around the new marker")
    assert d.execute_script("return document.querySelectorAll('main img').length") == 0
    d.get(url + f"#view=jobs&job=train-a&mode=range&from={t0}&to={t0 + 400_000}")
    wait_rendered(d, "jobs")
    wait_for(lambda: "1 change" in d.find_element("id", "j-info").text, 20, "the jobs view to count the change")
    assert d.execute_script("return window.__xss === undefined")
    # the first compare of train-a, before its marker existed, was answered 400 ("no change marker"): expected
    assert [e for e in console_errors(d) if "api/compare" not in e] == []
