"""Every PromQL expression the repository ships, run by a real Prometheus.

A real Prometheus (tests/support/prom.py) scrapes a stand-in target that serves every
family of the flow-metrics contract (tests/support/fake_flow_metrics.py) and loads the
shipped rules. Then every rule expression and every dashboard query (Grafana
variables substituted) goes through /api/v1/query: any error fails, and so
does an empty answer where the stand-in data must give one.

Ports: FABRICFLOW_TEST_PROM_PORT (default 29690) for Prometheus, +1 for the target,
+2 for a second Prometheus, +3 a port where nothing listens.
"""

from __future__ import annotations

import pytest

from tests.support.fake_flow_metrics import FakeFlowMetrics
from tests.support.prom import DEFAULT_PORT, PromQueryError, PrometheusServer, prometheus_or_skip
from tests.support.promql_sources import dashboard_expressions, rule_expressions, rules

# Dashboard queries allowed to be empty on the stand-in data, with the reason.
MAY_BE_EMPTY = {
    # the stand-in's speeds never change during a test run
    "Speed changes (ports whose ifSpeed changed in the range)",
    # errors/discards > 0 filter: only some ports have them (non-empty expected), kept strict
}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    prometheus_or_skip()
    with FakeFlowMetrics(DEFAULT_PORT + 1) as fake, PrometheusServer(
        tmp_path_factory.mktemp("prometheus"), fake.address, port=DEFAULT_PORT, for_override="0s",
    ) as server:
        server.wait_for_scrape()
        server.wait_for_rules_evaluated()
        # rates need two scrapes, rules built on rules one more evaluation
        server.wait_for_query("direction:sflow_port_utilization:quantile_rate5m > 0")
        server.wait_for_query("src_dst:node_to_node_flow_traffic_bytes:rate5m > 0")
        server.wait_for_query("fabricflow:checkpoint_quiet:any")
        server.wait_for_query("exporter_protocol:fabricflow_ingest_export_loss:ratio_rate10m")  # a rule on a rule
        yield server


def test_rules_loaded_and_healthy(prom):
    loaded = {r["name"] for g in prom.rules() for r in g["rules"]}
    shipped = {r.get("alert") or r.get("record") for f, r in rules(include_example=False)}
    assert shipped <= loaded
    for g in prom.rules():
        for r in g["rules"]:
            assert r["health"] != "err", (r["name"], r.get("lastError"))


@pytest.mark.parametrize("where,expr", rule_expressions(), ids=[w for w, _ in rule_expressions()])
def test_rule_expression_evaluates(prom, where, expr):
    res = prom.query(expr)
    if ":" in where.split(".yml:", 1)[1] and "checkpoint-schedule" not in where:
        # a recording rule: the stand-in data feeds every one of them
        assert res, f"{where} returned nothing"


@pytest.mark.parametrize("where,expr", dashboard_expressions(), ids=[w for w, _ in dashboard_expressions()])
def test_dashboard_query_evaluates(prom, where, expr):
    res = prom.query(expr)
    title = where.split("'")[1] if "'" in where else ""
    if title not in MAY_BE_EMPTY:
        assert res, f"{where}: no data for {expr!r}"


def test_a_bad_query_is_reported(prom):
    """The harness fails on PromQL errors rather than returning nothing."""
    with pytest.raises(PromQueryError, match="parse error|vector matching"):
        prom.query('sum(rate(x[5m])) by (dst_node) > 0.7 * on(dst_node) (y{direction="rx"})')


def test_training_job_label_survives_the_scrape(prom):
    """honor_labels on the flow-metrics job: straggler_score keeps job=<training job>."""
    assert prom.value('count(straggler_score{job="train-a"})') == 4
    assert not prom.query("straggler_score{exported_job!=\"\"}")
    # series without their own job label carry the scrape job
    assert prom.query('sflow_port_speed_bps{job="fabricflow-metrics"}')


def test_alerts_reach_firing(prom):
    """With `for` shortened, the alerts whose conditions the stand-in data holds fire."""
    a = prom.wait_for_alert("FabricLinkSpeedDowngrade", labels={"node": "gpu04"}, timeout=60)
    assert a["labels"]["severity"] == "critical" and float(a["value"]) == 1e9
    prom.wait_for_alert("FabricStraggler", labels={"job": "train-a", "node": "gpu03"}, timeout=60)
    prom.wait_for_alert("FabricExfiltration", labels={"severity": "critical"}, timeout=60)
    prom.wait_for_alert("FabricIncastSustained", labels={"dst_node": "gpu01"}, timeout=60)


def test_factory_fixture_with_other_jobs_and_per_alert_for(prometheus_factory, prom):
    """The fixture the end-to-end tests use: several jobs, rules with one alert's `for` changed."""
    second = prometheus_factory(
        targets={"fabricflow-metrics": [f"127.0.0.1:{DEFAULT_PORT + 1}"], "fabricflow-ingest": [f"127.0.0.1:{DEFAULT_PORT + 3}"]},
        port=DEFAULT_PORT + 2, for_override={"FabricflowTargetDown": "1s"},
    )
    second.wait_for_scrape("fabricflow-metrics")
    a = second.wait_for_alert("FabricflowTargetDown", labels={"job": "fabricflow-ingest"}, timeout=60)
    assert a["labels"]["instance"] == f"127.0.0.1:{DEFAULT_PORT + 3}"   # nothing listens there
    down = [r for g in second.rules() for r in g["rules"] if r["name"] == "FabricflowTargetDown"][0]
    straggler = [r for g in second.rules() for r in g["rules"] if r["name"] == "FabricStraggler"][0]
    assert down["duration"] == 1 and straggler["duration"] == 300   # only the named alert changed
