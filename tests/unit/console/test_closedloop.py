"""The console's closed-loop API: marks in (POST, JSON only, same origin, token), marks out (live + archive),
/api/compare and /api/steps over an archive backfilled from the ``tuning`` scenario."""

from __future__ import annotations

import json

import fsspec
import pytest
from starlette.testclient import TestClient

from console.app import ConsoleState, create_app
from console.history import History
from console.layout import load_layout
from console.live import LiveStore
from tests.support import scenario_archives as sa

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def tuning(scenario_archive):
    return scenario_archive(sa.scenario_doc("tuning"))


def _client(tuning, stored=None, token=None, accept=True, per_s=100.0):
    archive, inv = tuning
    lay = load_layout(str(inv))
    calls = [] if stored is None else stored

    def store(marks):
        calls.append(marks)
        return "kafka"

    state = ConsoleState(lay, LiveStore(lay), History(fsspec.filesystem("file"), str(archive)), None, token,
                         store_marks=store, accept_marks=accept, marks_per_s=1000.0, marks_per_source_per_s=per_s)
    return TestClient(create_app(state)), calls


def test_a_change_is_recorded_and_comes_back_on_the_timeline(tuning):
    c, calls = _client(tuning)
    r = c.post("/api/marks/change", content=json.dumps({"text": "raised NCCL_IB_TIMEOUT to 22", "job": "train-a",
                                                        "at": "2026-12-01T14:03:00"}), headers=JSON)
    assert r.status_code == 200, r.text
    mark = r.json()["mark"]
    assert r.json()["stored"] == "kafka" and calls == [[("change", mark)]] and mark["source"] == "http"
    got = c.get("/api/marks", params={"job": "train-a"}).json()["changes"]
    assert [x["mark_id"] for x in got] == [mark["mark_id"]]
    # a range adds the archive's markers: the scenario's own change concerns train-b, not train-a
    ranged = c.get("/api/marks", params={"job": "train-b", "from": "2026-12-01T14:00:00", "to": "2026-12-01T14:10:00",
                                         "steps": "1"}).json()
    assert [x["job"] for x in ranged["changes"]] == ["train-b"] and len(ranged["steps"]) > 100


@pytest.mark.parametrize("headers,status,msg", [
    ({"content-type": "text/plain"}, 403, "Content-Type"),
    ({"content-type": "application/x-www-form-urlencoded"}, 403, "Content-Type"),
    ({**JSON, "origin": "http://evil.example"}, 403, "cross-site"),
    ({**JSON, "origin": "null"}, 403, "cross-site"),
    ({**JSON, "origin": "http://testserver"}, 200, ""),
])
def test_write_paths_take_json_from_this_console_only(tuning, headers, status, msg):
    c, calls = _client(tuning)
    r = c.post("/api/marks/change", content=json.dumps({"text": "x", "job": "train-a"}), headers=headers)
    assert r.status_code == status and msg in r.text
    assert bool(calls) == (status == 200)


def test_bad_changes_are_400_and_writes_can_be_turned_off(tuning):
    c, _ = _client(tuning)
    for body, msg in (([1], "one JSON object"), ({"text": ""}, "needs a text"), ({"text": "x", "bogus": 1}, "unknown field"),
                      ({"text": "x", "at": "yesterday"}, "at:"), ({"text": "x", "if_index": 3}, "needs a switch")):
        r = c.post("/api/marks/change", content=json.dumps(body), headers=JSON)
        assert r.status_code == 400 and msg in r.json()["error"], (body, r.text)
    off, calls = _client(tuning, accept=False)
    assert off.post("/api/marks/change", content=json.dumps({"text": "x"}), headers=JSON).status_code == 403
    assert calls == []


def test_writes_need_the_token_when_there_is_one(tuning):
    c, calls = _client(tuning, token="s3cret")
    body = json.dumps({"text": "x"})
    assert c.post("/api/marks/change", content=body, headers=JSON).status_code == 401
    ok = c.post("/api/marks/change", content=body, headers={**JSON, "authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and len(calls) == 1


def test_step_lines_over_http_are_bounded_and_bad_ones_reported(tuning):
    c, calls = _client(tuning, per_s=3)
    lines = "\n".join(json.dumps({"job": "train-a", "event": "step_start", "step": i}) for i in range(5))
    r = c.post("/api/marks/step", content=lines + "\n{oops}", headers={"content-type": "application/x-ndjson"})
    d = r.json()
    assert r.status_code == 200 and d["accepted"] == 3 and d["rate_limited"] == 2
    assert [x["reason"] for x in d["refused"]] == ["not_json"] and len(calls[0]) == 3
    assert c.post("/api/marks/step", content="{oops}", headers={"content-type": "application/x-ndjson"}).status_code == 400


def test_compare_and_steps(tuning):
    c, _ = _client(tuning)
    rep = c.get("/api/compare", params={"scope": "job", "entity": "train-b"}).json()
    got = sorted((r["entity"], r["metric"]) for r in rep["metrics"] if r["verdict"] in ("improved", "worse"))
    assert got == [("gpu07", "cnp_share"), ("gpu07", "ecn_ce_share"), ("train-b", "cnp_share"), ("train-b", "ecn_ce_share")]
    for params, msg in (({"scope": "job"}, "entity is required"), ({"scope": "rack", "entity": "x"}, "scope must be"),
                        ({"scope": "job", "entity": "train-a"}, "no change marker"),
                        ({"scope": "job", "entity": "train-b", "bfrom": "1"}, "go together"),
                        ({"scope": "job", "entity": "train-b", "window": "15s"}, "multiple of 10 s")):
        r = c.get("/api/compare", params=params)
        assert r.status_code == 400 and msg in r.json()["error"], (params, r.text)
    st = c.get("/api/steps", params={"job": "train-b", "from": "2026-12-01T14:00:00", "to": "2026-12-01T14:07:00"}).json()
    assert st["total"] > 100 and {"comm_ms", "io_ms", "comm_bytes", "stretched"} <= set(st["steps"][0])
