"""``fabricflow compare`` on simulator scenarios backfilled offline: no verdict where nothing changed, ``improved``
exactly where a change helped.

The false-verdict cases (docs/closed-loop.md, "When is a change significant"): ``healthy`` with three seeds and
``mixed`` with every fault held constant for the whole run, compared over two halves with no change between
them, for both jobs, a node, a link and a group pair: not one metric may come out improved or worse. The changed
cases: ``tuning`` (train-b's ECN marking towards gpu07 stops at a change marker) and ``straggler`` ending mid-run.
"""

from __future__ import annotations

import pytest

from query.compare.report import CompareError, CompareRequest, build_report
from query.reports import ArchiveQuery
from tests.support import scenario_archives as sa

DURATION_S = 300
CHANGED = ("improved", "worse")


def _q(archive):
    import fsspec

    return ArchiveQuery(fsspec.filesystem("file"), str(archive))


def _halves(doc, duration_s=DURATION_S):
    t0 = sa.start_ms(doc)
    return (t0 + 40_000, t0 + 160_000), (t0 + 180_000, t0 + duration_s * 1000)


def _verdicts(rep) -> list[str]:
    return [f"{r['entity']} {r['metric']}: {r['verdict']} ({r['before']} -> {r['after']}, {r['interval']})"
            for r in rep["metrics"] if r["verdict"] in CHANGED]


def _report(archive, scope, name, before, after):
    return build_report(_q(archive), CompareRequest(scope, name, before, after))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_healthy_runs_get_no_verdict_anywhere(scenario_archive, seed):
    doc = sa.scenario_doc("healthy")
    archive, _inv = scenario_archive(doc, seed, DURATION_S)
    before, after = _halves(doc)
    for scope, name in (("job", "train-a"), ("job", "train-b"), ("node", "gpu03"), ("link", "tor1/3"),
                        ("pair", "gpu>storage")):
        rep = _report(archive, scope, name, before, after)
        assert rep["metrics"], (scope, name)
        assert _verdicts(rep) == [], (seed, scope, name)
        with_verdict = [r for r in rep["metrics"] if r["better"] is not None]
        assert all(r["verdict"] == "no significant change" for r in with_verdict), (scope, name)


def test_mixed_with_constant_faults_gets_no_verdict(scenario_archive):
    """Straggler, incast bursts, a downgraded link, LB skew, a storage slow-down, exporter loss and clock skew, all
    present the whole time: plenty of activity, nothing that changes."""
    doc = sa.constant_faults("mixed", DURATION_S)
    archive, _inv = scenario_archive(doc, 6, DURATION_S)
    before, after = _halves(doc)
    for scope, name in (("job", "train-a"), ("job", "train-b"), ("node", "gpu05"), ("link", "tor2/4"),
                        ("pair", "gpu>storage")):
        assert _verdicts(_report(archive, scope, name, before, after)) == [], (scope, name)


def test_a_change_that_helped_is_improved_where_it_helped_and_nowhere_else(scenario_archive):
    """tuning: around its change marker (found without --before/--after), train-b's ECN-CE and CNP shares improve,
    for the job and for gpu07 (the congested receiver), and nothing else; train-a, unchanged, gets no verdict."""
    doc = sa.scenario_doc("tuning")
    archive, _inv = scenario_archive(doc, None, None)
    rep = build_report(_q(archive), CompareRequest("job", "train-b"))
    assert rep["marker"]["job"] == "train-b" and "ECN" in rep["marker"]["text"]
    got = {(r["entity"], r["metric"]): r["verdict"] for r in rep["metrics"] if r["verdict"] in CHANGED}
    assert got == {("train-b", "ecn_ce_share"): "improved", ("train-b", "cnp_share"): "improved",
                   ("gpu07", "ecn_ce_share"): "improved", ("gpu07", "cnp_share"): "improved"}, _verdicts(rep)
    ecn = next(r for r in rep["metrics"] if r["entity"] == "gpu07" and r["metric"] == "ecn_ce_share")
    assert 0.12 < ecn["before"] < 0.18 and ecn["after"] == 0 and ecn["interval"][1] < 0
    m = rep["marker"]["time_ms"]
    assert rep["before"]["to_ms"] == m and rep["after"]["from_ms"] == m + rep["settle_ms"]
    other = build_report(_q(archive), CompareRequest("job", "train-a", (rep["before"]["from_ms"], m),
                                                     (rep["after"]["from_ms"], rep["after"]["to_ms"])))
    assert _verdicts(other) == []
    assert rep["steps"]["before"]["steps"] > 50 and rep["steps"]["after"]["steps"] > 50


def test_a_straggler_that_went_away_is_improved(scenario_archive):
    doc = sa.scenario_doc("straggler")
    doc["simulation"]["faults"][0].update(start_s=0, end_s=150)
    archive, _inv = scenario_archive(doc, None, DURATION_S)
    t0 = sa.start_ms(doc)
    rep = _report(archive, "job", "train-a", (t0 + 30_000, t0 + 150_000), (t0 + 180_000, t0 + 300_000))
    got = {(r["entity"], r["metric"]): r["verdict"] for r in rep["metrics"] if r["verdict"] in CHANGED}
    assert got.get(("gpu03", "straggler_score")) == "improved", _verdicts(rep)
    assert got.get(("gpu03", "comm_rate_bps")) == "improved", _verdicts(rep)
    assert {e for e, _m in got} <= {"gpu03", "train-a"}, _verdicts(rep)


def test_the_json_has_every_field_per_metric(scenario_archive):
    doc = sa.scenario_doc("tuning")
    archive, _inv = scenario_archive(doc, None, None)
    rep = build_report(_q(archive), CompareRequest("job", "train-b"))
    assert rep["family"] == sum(1 for r in rep["metrics"] if r["better"] and r["interval"])
    for r in rep["metrics"]:
        assert set(r) >= {"entity", "metric", "unit", "before", "after", "change", "interval", "verdict", "better"}
        if r["better"] is None:
            assert r["verdict"] == "no verdict"
    assert {"before", "after"} == set(rep["events"]) and rep["changes"]


def test_no_marker_and_bad_requests_are_one_line_errors(scenario_archive):
    doc = sa.scenario_doc("tuning")
    archive, _inv = scenario_archive(doc, None, None)
    q = _q(archive)
    with pytest.raises(CompareError, match="no change marker for job train-a"):
        build_report(q, CompareRequest("job", "train-a"))
    with pytest.raises(CompareError, match="no traffic"):
        t0 = sa.start_ms(doc)
        build_report(q, CompareRequest("job", "nope", (t0, t0 + 100_000), (t0 + 200_000, t0 + 300_000)))
    with pytest.raises(CompareError, match="SWITCH/IFINDEX"):
        build_report(q, CompareRequest("link", "tor1"))
