"""Grafana cannot be installed here: check the provisioned dashboards as JSON.

The queries themselves run against a real Prometheus in
tests/integration/test_prometheus_real.py.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import yaml

from tests.support import promql_sources
from tests.support.promql_sources import DASHBOARD_DIR, REPO, dashboard_expressions, dashboards, substitute

GRAFANA = REPO / "deploy" / "grafana"
PANEL_TYPES = {"timeseries", "table", "bargauge", "stat", "status-history", "heatmap", "row"}


def _builder():
    spec = importlib.util.spec_from_file_location("build_dashboards", GRAFANA / "build_dashboards.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _provisioned_uid() -> str:
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert len(ds) == 1 and ds[0]["type"] == "prometheus"
    return ds[0]["uid"]


def test_json_is_what_the_builder_writes():
    """Edit deploy/grafana/build_dashboards.py and run it; the JSON must not drift from it."""
    rendered = _builder().render()
    on_disk = {p.name: p.read_text() for p in DASHBOARD_DIR.glob("*.json")}
    assert set(rendered) == set(on_disk)
    for name, text in rendered.items():
        assert on_disk[name] == text, f"{name} is stale: run python deploy/grafana/build_dashboards.py"


def test_the_four_dashboards_exist_with_unique_uids():
    ds = dashboards()
    uids = [d["uid"] for d in ds.values()]
    assert len(set(uids)) == len(uids) == 4
    assert set(uids) == {"fabricflow-overview", "fabricflow-job", "fabricflow-links", "fabricflow-security"}
    for d in ds.values():
        assert d["title"] and d["schemaVersion"] >= 36 and "fabricflow" in d["tags"]


@pytest.mark.parametrize("name", sorted(p.name for p in DASHBOARD_DIR.glob("*.json")))
def test_panels_are_well_formed(name):
    d = dashboards()[name]
    uid = _provisioned_uid()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    # The datasource variable defaults to the provisioned Prometheus.
    dsvar = variables["datasource"]
    assert dsvar["type"] == "datasource" and dsvar["query"] == "prometheus"
    assert dsvar["current"]["value"] == uid
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}"
    cells = set()
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, (p["title"], g)
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"{p['title']!r} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["title"] and p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"{p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"] == p["datasource"], p["title"]
        for o in p["fieldConfig"]["overrides"]:
            if o["matcher"]["id"] == "byFrameRefID":
                assert o["matcher"]["options"] in refs, (p["title"], o)
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_queries_use_only_defined_variables():
    for where, expr in dashboard_expressions(raw=True):
        d = dashboards()[where.split(":", 1)[0]]
        names = {v["name"] for v in d["templating"]["list"]}
        substitute(expr, names)          # KeyError on an undefined $variable
        assert "$" not in re.sub(r'"\$\d+"', "", substitute(expr, names)), (where, expr)


def test_expressions_include_panels_of_collapsed_rows(tmp_path, monkeypatch):
    """A collapsed row keeps its panels inside the row: their queries must be collected (and run) too."""
    d = {"templating": {"list": []}, "panels": [
        {"id": 1, "type": "stat", "title": "top", "targets": [{"refId": "A", "expr": "up"}]},
        {"id": 2, "type": "row", "title": "r", "collapsed": True, "panels": [
            {"id": 3, "type": "timeseries", "title": "inner", "targets": [{"refId": "A", "expr": "sum(up)"}]}]}]}
    (tmp_path / "x.json").write_text(json.dumps(d))
    monkeypatch.setattr(promql_sources, "DASHBOARD_DIR", tmp_path)
    assert promql_sources.dashboard_expressions() == [
        ("x.json:panel 1 'top' A", "up"), ("x.json:panel 3 'inner' A", "sum(up)")]


def test_substitution_leaves_label_replace_groups_alone():
    e = 'label_replace(x{job=~"$job"}, "src_node", "$1", "node", "(.+)")[$__rate_interval]'
    assert substitute(e, {"job"}) == 'label_replace(x{job=~".+"}, "src_node", "$1", "node", "(.+)")[1m]'
    with pytest.raises(KeyError):
        substitute('x{node=~"$nope"}', {"job"})


def _exprs(uid: str) -> list[tuple[str, str]]:
    name = f"{uid}.json"
    return [(w, e) for w, e in dashboard_expressions(raw=True) if w.startswith(name)]


def _panels(uid: str) -> dict[str, dict]:
    return {p["title"]: p for p in dashboards()[f"{uid}.json"]["panels"]}


def test_overview_has_matrix_heatmap_top_talkers_categories_and_storage_vs_capacity():
    panels = _panels("fabricflow-overview")
    matrix = panels["Traffic matrix, node to node (heatmap)"]
    assert matrix["transformations"][0]["id"] == "groupingToMatrix"
    assert matrix["transformations"][0]["options"]["rowField"] == "src_node"
    assert matrix["fieldConfig"]["defaults"]["custom"]["cellOptions"]["type"] == "color-background"
    top = panels["Top talkers (node pairs)"]["targets"][0]["expr"]
    assert "topk(10, src_dst:node_to_node_flow_traffic_bytes:rate5m" in top
    assert "app_category" in panels["Traffic by app category"]["targets"][0]["legendFormat"]
    storage = panels["Storage traffic received / link capacity"]["targets"][0]["expr"]
    assert 'app_category="storage"' in storage and "node_interface_bandwidth_bytes" in storage


def test_job_dashboard_has_send_rate_straggler_iteration_and_gpu_beside_network():
    panels = _panels("fabricflow-job")
    assert "straggler_score" in panels["Straggler score per node"]["targets"][0]["expr"]
    assert "job_iteration_period_seconds" in panels["Iteration period"]["targets"][0]["expr"]
    assert 'direction="tx"' in panels["Send rate per node"]["targets"][0]["expr"]
    gpu = panels["GPU utilisation, collective traffic, storage, TCP SYN (per node)"]
    exprs = [t["expr"] for t in gpu["targets"]]
    assert "node:DCGM_FI_DEV_GPU_UTIL:avg" in exprs[0]
    assert any("app_flow_traffic_bytes" in e for e in exprs[1:]) and any("tcp_syn" in e for e in exprs)


def test_gpu_panels_join_dcgm_through_the_node_mapping_rule():
    """dcgm's Hostname becomes our node in exactly one recording rule; dashboards use that rule."""
    rules = (REPO / "deploy/prometheus/rules/fabricflow-recording.yml").read_text()
    assert 'label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.*)")' in rules
    gpu_panels = [p for d in dashboards().values() for p in d["panels"]
                  if any("DCGM_FI_DEV_GPU_UTIL" in t["expr"] for t in p.get("targets", []))]
    assert len(gpu_panels) >= 2
    for p in gpu_panels:
        assert any("flow_traffic_bytes" in t["expr"] for t in p["targets"]), p["title"]


def test_links_dashboard_scales_to_thousands_of_ports():
    panels = _panels("fabricflow-links")
    q = panels["Port utilisation across all ports, tx (min, quartiles, max)"]["targets"][0]["expr"]
    assert q.startswith("direction:sflow_port_utilization:quantile_rate5m")
    titles = " ".join(panels)
    for word in ("Errors", "Discards", "Speed changes", "Per-port utilisation"):
        assert word in titles


def test_security_dashboard_has_alerts_and_egress():
    panels = _panels("fabricflow-security")
    assert "ALERTS" in panels["Firing alerts"]["targets"][0]["expr"]
    assert 'app_category="external"' in panels["Egress per node (external destinations)"]["targets"][0]["expr"]


def test_compose_mounts_the_provisioning():
    c = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    prov = yaml.safe_load((GRAFANA / "provisioning/dashboards/fabricflow.yml").read_text())
    path = prov["providers"][0]["options"]["path"]
    mounts = c["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    url = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())["datasources"][0]["url"]
    assert url == "http://prometheus:9090" and "prometheus" in c["services"]


def test_compose_mounts_exist_and_prometheus_reads_the_compose_config():
    c = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name in ("prometheus", "grafana"):
        for m in c["services"][name]["volumes"]:
            src = m.split(":", 1)[0]
            if src.startswith("./"):
                assert (REPO / src).exists(), f"{name} mounts missing {src}"
    cmd = c["services"]["prometheus"]["command"]
    assert "--config.file=/etc/prometheus/prometheus.compose.yml" in cmd
    assert "./deploy/prometheus:/etc/prometheus:ro" in c["services"]["prometheus"]["volumes"]
    # The services Prometheus scrapes listen on all interfaces inside compose.
    env = c["services"]["sink-archive"]["environment"]
    assert env["FABRICFLOW_ARCHIVE__METRICS_BIND"] == "0.0.0.0"
    assert c["services"]["processors"]["environment"]["FABRICFLOW_PROCESSORS__WEB_BIND"] == "0.0.0.0"
    assert c["services"]["ingest"]["environment"]["FABRICFLOW_INGEST__METRICS_BIND"] == "0.0.0.0"
