"""End to end with a real Prometheus: simulator -> UDP -> ingest -> Kafka -> processors -> metrics sink
-> Prometheus (scraping it, with the shipped rules) -> Prometheus' HTTP API.

Two runs, each on a fresh local pipeline (:class:`devtools.runner.LocalPipeline`, driven by
``devtools/scenario_run.py``'s ``run_scenario``) on this file's ports, with a Prometheus
(tests/support/prom.py) that starts once the pipeline is up, scrapes the flow-metrics sink every
0.5 s, evaluates the shipped rules every 0.5 s and is stopped at teardown:

- ``healthy`` (300 s at 10x): the final values of ``node_to_node_flow_traffic_bytes_total``,
  summed over app categories, match the simulator's truth per node pair over the whole run
  within the sampling bound (pairs with >= 1,000 expected samples); with every alert's
  ``for:`` set to 0, no alert expression was true at any evaluation (``ALERTS`` stays empty); and
  every rule expression and dashboard query (tests/support/promql_sources.py) runs without error on the
  pipeline's series (many-to-many matches show up only on real data); and the output topics carry no
  detection at all, with every matrix cell of the truth present (the suite's only healthy pipeline run).
- ``link_downgrade`` (220 s at 10x; tor2 port 2 toward gpu10 at 1G with CRC errors from t=60 s
  to t=200 s): ``FabricLinkSpeedDowngrade`` goes pending, then ``firing`` (``for:`` 6 s of wall
  time instead of the shipped 2m, which at 10x would leave it 2 s to fire) for that port and no
  other, and is resolved once the port is back at 25G; ``FabricPortErrorsPersistent``'s
  expression (``for:`` 0) is true for that port only.

Why 10x is honest here (docs/monitoring.md, "End-to-end test"): the matrix check compares
whole-run totals, which the window-edge shifts of an accelerated replay do not change; and as
long as a run lasts less than the rules' ranges (5m-1d of wall time), every range covers the
whole run at any speed, so a rate over [5m] at 10x has the same value as a fresh Prometheus'
at 1x at the same scenario time (10x the bytes per wall second over a tenth of the seconds).

About 2.5 minutes on 2 cores. Skipped when prometheus or the embedded stack is missing,
unless FABRICFLOW_REQUIRE_BROKER=1.
"""

from __future__ import annotations

import os
import time

import pytest

from devtools.scenario_run import run_scenario, score_run
from devtools.runner import PipelineError, PipelinePorts
from devtools.scoring import matrix_total_error
from devtools.simulator.truth import read_truth
from devtools.stack import port_free
from tests.support.prom import PromQueryError, prometheus_or_skip
from tests.support.promql_sources import dashboard_expressions, rule_expressions

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# everything in 31900-31999 (below the ephemeral range; SeaweedFS takes s3_base .. s3_base + 8)
PORTS = PipelinePorts(
    kafka=31900, s3=31901, sflow=31902, netflow=31903, ipfix=31904, ingest_metrics=31905, processors_web=31906,
    archive_metrics=31907, processors_metrics=31908, flow_metrics=31909, s3_base=31910, console=31920,
    marks=31921,
)  # fmt: skip
PROM_PORT = 31930
SPEED = 10.0
INTERVAL = "500ms"  # scrape and rule evaluation: 5 s of scenario time at 10x, half a window
MIN_SAMPLES = 1000.0  # per pair over the run: 95 % bound 6.2 %
REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"


class Attached:
    """Starts a Prometheus on the pipeline once it is up; after the drain, waits until it shows the
    scenario's last matrix window and the flow counters stop moving, then runs ``collect(prom)``."""

    def __init__(self, prometheus_factory, collect, **prom_kwargs):
        self.factory = prometheus_factory
        self.collect = collect
        self.kwargs = prom_kwargs
        self.prom = None
        self.started_at: float | None = None
        self.result = None

    def on_up(self, pipe) -> None:
        self.prom = self.factory(targets={"fabricflow-metrics": [f"127.0.0.1:{PORTS.flow_metrics}"]},
                                 port=PROM_PORT, scrape_interval=INTERVAL, evaluation_interval=INTERVAL,
                                 **self.kwargs)  # fmt: skip
        self.prom.wait_for_scrape(timeout=30)
        self.started_at = time.time()

    def on_drained(self, pipe, last_window_ms: int) -> None:
        prom = self.prom
        end_s = (last_window_ms + 10_000) / 1000.0
        prom.wait_until(
            lambda: (prom.value('max(fabricflow_metrics_last_window_end_seconds{stream=~"matrix.*"})') or 0) >= end_s,
            timeout=60, what="the scenario's last matrix window in Prometheus")
        # born-at-zero series show their value from their second scrape; cells of the last window come
        # from several partitions: wait until the totals are the same in three polls 1 s apart
        seen: list = []

        def stable():
            seen.append((prom.value("sum(node_to_node_flow_traffic_bytes_total)"), prom.value("count(ALERTS)")))
            return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]
        prom.wait_until(stable, timeout=30, interval=1.0, what="flow counters stop moving")
        self.result = self.collect(prom, self.started_at, time.time())


def _run(name, tmp_path, attached, **kw):
    prometheus_or_skip()
    if not (port_free(PORTS.kafka) and port_free(PORTS.s3) and port_free(PROM_PORT)):
        pytest.skip(f"ports {PORTS.kafka}/{PORTS.s3}/{PROM_PORT} in use")
    try:
        return run_scenario(name, tmp_path / name, speed=SPEED, ports=PORTS, log=lambda *_: None,
                            on_up=attached.on_up, on_drained=attached.on_drained, **kw)  # fmt: skip
    except PipelineError as e:
        if REQUIRE or "exited with status" in str(e):
            raise
        pytest.skip(f"local pipeline unavailable: {e}")


def _range_s(t0: float, t1: float) -> str:
    return f"{int(t1 - t0) + 5}s"


# What the alerts compare, at its highest over the healthy run (max_over_time of the rules' own terms):
# reported, and required to exist, so that "no alert was true" is not the trivial answer of missing inputs.
INPUTS = {
    "port utilisation (FabricLinkUtilizationHigh > 0.8)":
        "max(max_over_time(switch_port_direction:sflow_port_utilization:ratio_rate5m[R]))",
    "storage rx / bandwidth (FabricStorageTrafficHigh > 0.7)":
        'max(max_over_time((sum by (dst_node) (rate(node_to_node_flow_traffic_bytes_total{app_category="storage"}[5m]))'
        " / on(dst_node) dst_node:node_interface_bandwidth_bytes:rx)[R:500ms]))",
    "port speed / configured (FabricLinkSpeedDowngrade < 1)":
        "min(min_over_time((max by (switch, port, node) (sflow_port_speed_bps)"
        " / on(switch, port, node) max by (switch, port, node) (sflow_port_configured_speed_bps))[R:500ms]))",
    "port errors/s (FabricPortErrorsPersistent > 0.1)":
        "max(max_over_time(switch_port_direction:sflow_port_errors:rate5m[R]))",
    "port discards/s (FabricPortDiscardBurst > 1)":
        "max(max_over_time(switch_port_direction:sflow_port_discards:rate5m[R]))",
    "straggler flagged (FabricStraggler)": "max(max_over_time(straggler_flagged[R]))",
}
# Inputs that exist only once something happened (a first incast, a first policy alert): absent is fine.
EVENT_INPUTS = {
    "incast events (FabricIncastRepeated)": "sum(max_over_time(incast_events_total[R]))",
    "flow alerts firing (FabricExfiltration, ...)": "max(max_over_time(flow_alerts_firing[R]))",
}


def _query_errors(prom) -> list[tuple[str, str]]:
    """Every rule expression and dashboard query (variables substituted) run once; (where, error) of failures."""
    errors = []
    for where, expr in rule_expressions() + dashboard_expressions():
        try:
            prom.query(expr)
        except PromQueryError as e:
            errors.append((where, str(e)))
    return errors


def test_healthy_matrix_matches_truth_and_no_alert_is_ever_true(tmp_path, prometheus_factory):
    def collect(prom, t0, t1):
        rng = _range_s(t0, t1)
        pairs = prom.query("sum by (src_node, dst_node) (node_to_node_flow_traffic_bytes_total)")
        # with for: 0 every evaluation whose expression was true left an ALERTS sample
        fired = prom.query(f"max by (alertname) (max_over_time(ALERTS[{rng}]))")
        return {
            "pairs": {(r["metric"]["src_node"], r["metric"]["dst_node"]): float(r["value"][1]) for r in pairs},
            "fired": {r["metric"]["alertname"]: r["metric"] for r in fired},
            "folded": prom.value("sum(fabricflow_metrics_series_folded_total)") or 0.0,
            "undecodable": prom.query("fabricflow_metrics_undecodable_messages_total > 0"),
            "rules": [(r["name"], r.get("lastError")) for g in prom.rules() for r in g["rules"]
                      if r["health"] == "err"],
            "wall_s": t1 - t0,
            "inputs": {k: prom.value(q.replace("[R", f"[{rng}")) for k, q in {**INPUTS, **EVENT_INPUTS}.items()},
            "up_samples": prom.value(f'count_over_time(up{{job="fabricflow-metrics"}}[{rng}])'),
            "evaluations": prom.value(f"max(count_over_time(node_direction:app_flow_traffic_bytes:rate5m[{rng}]))"),
            "query_errors": _query_errors(prom),
        }

    att = Attached(prometheus_factory, collect, for_override="0s")
    run = _run("healthy", tmp_path, att)
    res = att.result
    assert res is not None
    assert run.datagrams > 1000
    # the same run through the output topics (once tests/e2e/test_scenarios.py's own healthy run, a second
    # pipeline for the same path): not one detection, every matrix cell of the truth present
    score_run(run)
    assert [f"{x.detection.kind} {x.detection.entity}: {x.detection.summary}" for x in run.seen] == []
    assert run.matrix.cells >= 50 and run.matrix.missing == 0, run.matrix.as_dict()
    assert res["rules"] == [], res["rules"]
    assert res["undecodable"] == [], res["undecodable"]
    # every shipped rule and dashboard query on the pipeline's real series (not only the stand-in's)
    assert res["query_errors"] == [], res["query_errors"]
    # the alert check covered the run: Prometheus scraped all along, and evaluated the rules from the
    # first closed window on (a recording rule's samples)
    every = res["wall_s"] / 0.5
    assert res["up_samples"] and res["up_samples"] >= 0.8 * every, (res["up_samples"], res["wall_s"])
    assert res["evaluations"] and res["evaluations"] >= 0.5 * every, (res["evaluations"], res["wall_s"])
    print(f"healthy: alert inputs at their extreme over the run: {res['inputs']}")
    assert res["fired"] == {}, res["fired"]
    missing = [k for k in INPUTS if res["inputs"][k] is None]
    assert not missing, missing
    assert res["inputs"]["port utilisation (FabricLinkUtilizationHigh > 0.8)"] > 0.001
    assert res["inputs"]["storage rx / bandwidth (FabricStorageTrafficHigh > 0.7)"] > 0.001

    truth = read_truth(run.truth_path)
    assert res["folded"] == 0  # 20 nodes: far inside the series budget, every pair has its own series
    estimated = {k: v for k, v in res["pairs"].items() if "other" not in k}
    m = matrix_total_error(estimated, truth, min_expected_samples=MIN_SAMPLES)
    print(f"healthy: {len(estimated)} pairs in Prometheus, {run.wall_s:.0f}s wall; matrix totals {m.as_dict()}")
    assert m.cells >= 30 and m.missing == 0, m.as_dict()
    assert m.ok and abs(m.bias) < 0.03, m.as_dict()


DOWNGRADE_FOR = "6s"  # the shipped 2m / SPEED would be 12 s: 2 s of firing in a 14 s (wall) downgrade


def test_link_downgrade_alert_fires_for_the_downgraded_port(tmp_path, prometheus_factory):
    def collect(prom, t0, t1):
        rng = _range_s(t0, t1)
        states = prom.query(f'max by (alertstate, switch, port, node) '
                            f'(max_over_time(ALERTS{{alertname="FabricLinkSpeedDowngrade"}}[{rng}]))')
        return {
            "states": sorted((r["metric"]["alertstate"], r["metric"].get("switch"), r["metric"].get("port"),
                              r["metric"].get("node")) for r in states),
            "active_now": [a["labels"] for a in prom.alerts()
                           if a["labels"]["alertname"] == "FabricLinkSpeedDowngrade"],
            "errors_fired": sorted({
                (r["metric"]["switch"], r["metric"]["port"], r["metric"]["node"]) for r in prom.query(
                    f'max_over_time(ALERTS{{alertname="FabricPortErrorsPersistent",alertstate="firing"}}[{rng}])')}),
            "min_speed": prom.value(f'min_over_time(sflow_port_speed_bps{{switch="tor2",port="2"}}[{rng}])'),
            "speed_now": prom.value('sflow_port_speed_bps{switch="tor2",port="2"}'),
        }

    # the port's CRC errors (150/s) as well: the persistent-errors expression (for: 0 here) names that port only
    att = Attached(prometheus_factory, collect,
                   for_override={"FabricLinkSpeedDowngrade": DOWNGRADE_FOR, "FabricPortErrorsPersistent": "0s"})
    # the fault lasts t=60-200 s; 220 s leave the port back at 25G for two counter samples
    _run("link_downgrade", tmp_path, att, duration_s=220)
    res = att.result
    print(f"link_downgrade: {res}")
    assert res["min_speed"] == 1e9 and res["speed_now"] == 25e9, res
    assert res["states"] == [("firing", "tor2", "2", "gpu10"), ("pending", "tor2", "2", "gpu10")], res
    assert res["active_now"] == [], res  # resolved once the port is back at its configured speed
    assert res["errors_fired"] == [("tor2", "2", "gpu10")], res
