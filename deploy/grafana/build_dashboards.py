"""Writes the Grafana dashboards in deploy/grafana/dashboards/*.json.

    python deploy/grafana/build_dashboards.py        # after editing this file

The JSON files are what Grafana provisions and what operators import; this
script is their source, so that panels stay consistent (one datasource
variable, units, layout). tests/unit/monitoring/test_dashboards.py fails when
the JSON and this script disagree, and runs every query against a real
Prometheus in tests/integration/test_prometheus_real.py.

Queries read the recording rules of deploy/prometheus/rules/ (names
`level:metric:operations`) so that a dashboard over thousands of ports or
node pairs stays cheap. docs/monitoring.md describes each dashboard.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards"
DS_UID = "fabricflow-prometheus"        # provisioning/datasources/prometheus.yml
DS_NAME = "Prometheus (fabricflow)"
DS = {"type": "prometheus", "uid": "${datasource}"}


# ---------------------------------------------------------------- building blocks
def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> dict:
    t = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "range": not instant,
         "instant": instant, "format": fmt}
    return t


def _panel(kind: str, title: str, targets: list[dict], w: int, h: int, unit: str = "", desc: str = "", **extra) -> dict:
    p = {"type": kind, "title": title, "description": desc, "datasource": DS, "targets": targets,
         "gridPos": {"w": w, "h": h},
         "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []}, "options": {}}
    for k, v in extra.items():
        if k == "defaults":
            p["fieldConfig"]["defaults"].update(v)
        elif k == "overrides":
            p["fieldConfig"]["overrides"] = v
        else:
            p[k] = v
    return p


def timeseries(title, targets, unit="", w=12, h=8, desc="", stack=False, thresholds=None, overrides=None):
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10 if not stack else 60, "showPoints": "never",
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    defaults = {"custom": custom}
    if thresholds:
        custom["thresholdsStyle"] = {"mode": "line"}
        defaults["thresholds"] = {"mode": "absolute", "steps": [{"color": "green", "value": None}] +
                                  [{"color": c, "value": v} for v, c in thresholds]}
    return _panel("timeseries", title, targets, w, h, unit, desc, defaults=defaults, overrides=overrides or [],
                  options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["mean", "max"]},
                           "tooltip": {"mode": "multi", "sort": "desc"}})


def matrix(title, expr, row_label, col_label, unit="Bps", w=12, h=10, desc=""):
    """A colour-coded src x dst matrix: table panel + Grafana's groupingToMatrix transformation."""
    return _panel("table", title, [target(expr, instant=True, fmt="table")], w, h, unit, desc,
                  defaults={"custom": {"cellOptions": {"type": "color-background", "mode": "gradient"},
                                       "align": "center"},
                            "color": {"mode": "continuous-BlYlRd"}},
                  transformations=[{"id": "groupingToMatrix", "options": {
                      "rowField": row_label, "columnField": col_label, "valueField": "Value",
                      "emptyValue": "null"}}],
                  options={"showHeader": True, "cellHeight": "sm"})


def bars(title, expr, legend, unit="Bps", w=12, h=8, desc=""):
    return _panel("bargauge", title, [target(expr, legend, instant=True)], w, h, unit, desc,
                  options={"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                           "reduceOptions": {"calcs": ["lastNotNull"], "values": False}})


def stat(title, expr, unit="", w=6, h=4, desc="", thresholds=None):
    steps = [{"color": "green", "value": None}] + [{"color": c, "value": v} for v, c in (thresholds or [])]
    return _panel("stat", title, [target(expr, instant=True)], w, h, unit, desc,
                  defaults={"thresholds": {"mode": "absolute", "steps": steps}},
                  options={"reduceOptions": {"calcs": ["lastNotNull"], "values": False}, "colorMode": "background"})


def table(title, targets, unit="", w=12, h=8, desc="", organize=None, overrides=None):
    transformations = [{"id": "merge", "options": {}}]
    if organize:
        transformations.append({"id": "organize", "options": {"excludeByName": {k: True for k in organize}}})
    return _panel("table", title, targets, w, h, unit, desc, transformations=transformations,
                  overrides=overrides or [],
                  options={"showHeader": True, "cellHeight": "sm"})


def history(title, expr, legend, unit="", w=12, h=8, desc="", thresholds=None):
    """Status history: one row per series, time left to right, colour = value (a heatmap over time)."""
    steps = [{"color": "transparent", "value": None}] + [{"color": c, "value": v} for v, c in (thresholds or [])]
    return _panel("status-history", title, [target(expr, legend)], w, h, unit, desc,
                  defaults={"color": {"mode": "thresholds"}, "thresholds": {"mode": "absolute", "steps": steps}},
                  options={"showValue": "never", "rowHeight": 0.9, "legend": {"showLegend": False}})


def heatmap(title, expr, unit="percentunit", w=12, h=8, desc=""):
    """Distribution over time: Grafana counts the series in value buckets per step."""
    return _panel("heatmap", title, [target(expr, "{{switch}}/{{port}}")], w, h, unit, desc,
                  options={"calculate": True, "calculation": {"yBuckets": {"mode": "count", "value": "10"}},
                           "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                           "yAxis": {"unit": unit}, "cellGap": 1})


def row(title: str) -> dict:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"w": 24, "h": 1}}


def by_ref(ref: str, **props) -> dict:
    """Override for every field of one query (GPU % on the right axis beside bytes/s)."""
    return {"matcher": {"id": "byFrameRefID", "options": ref},
            "properties": [{"id": k, "value": v} for k, v in props.items()]}


# ---------------------------------------------------------------- dashboard shell
def variable(name, query, label="", multi=True, include_all=True):
    return {"type": "query", "name": name, "label": label or name, "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
            "refresh": 2, "multi": multi, "includeAll": include_all, "allValue": ".*", "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all else {}}


def datasource_variable():
    return {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
            "current": {"selected": True, "text": DS_NAME, "value": DS_UID}, "hide": 0}


def checkpoint_annotation(expr="fabricflow:checkpoint_quiet:any"):
    return {"name": "Checkpoint quiet windows", "datasource": DS, "enable": True, "iconColor": "purple",
            "expr": expr, "step": "60s", "titleFormat": "checkpoint window", "textFormat": "{{job}}",
            "useValueForTime": False}


def change_annotation(expr="change_marker_timestamp_seconds * 1000"):
    """Change markers (fabricflow mark): the sink's gauge holds when the latest change of each job and scope took
    effect; with the value as the time, every change in the dashboard's range is one annotation. The change's
    text is not a label (unbounded): the console's Compare view and GET /api/marks have it."""
    return {"name": "Changes (fabricflow mark)", "datasource": DS, "enable": True, "iconColor": "orange",
            "expr": expr, "step": "60s", "titleFormat": "change: {{scope}} {{job}}",
            "textFormat": "a change marker (fabricflow mark); its text and the before/after comparison: "
                          "the console's Compare view", "useValueForTime": True}


def layout(panels: list[dict]) -> list[dict]:
    """Left-to-right, top-to-bottom placement in Grafana's 24-column grid; ids 1..n."""
    x = y = row_h = 0
    for i, p in enumerate(panels, 1):
        g = p["gridPos"]
        if p["type"] == "row" or x + g["w"] > 24:
            x, y = 0, y + row_h
            row_h = 0
        g["x"], g["y"] = x, y
        p["id"] = i
        x += g["w"]
        row_h = max(row_h, g["h"])
        if p["type"] == "row":
            x, y, row_h = 0, y + 1, 0
    return panels


def dashboard(uid, title, description, panels, variables=(), annotations=()) -> dict:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["fabricflow"],
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "time": {"from": "now-3h", "to": "now"}, "refresh": "1m", "timezone": "browser",
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
             "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
            *annotations]},
        "links": [{"type": "dashboards", "tags": ["fabricflow"], "asDropdown": True, "title": "fabricflow"}],
        "panels": layout(panels),
    }


# ---------------------------------------------------------------- the dashboards
JOB_NODES = 'group by (node) (straggler_score{job=~"$job"})'   # the nodes of the selected job(s)
PORT_LEGEND = "{{switch}}/{{port}} {{node}} {{direction}}"


def overview() -> dict:
    panels = [
        stat("Cluster traffic", "sum(app:app_flow_traffic_bytes:rate5m)", "Bps",
             desc="All flow traffic, every byte counted once (by its sender), sampling-scaled."),
        stat("Storage share", 'sum(app:app_flow_traffic_bytes:rate5m{app_category="storage"}) '
             "/ sum(app:app_flow_traffic_bytes:rate5m)", "percentunit"),
        stat("Firing alerts", 'count(ALERTS{alertstate="firing", alertname=~"Fabric.*"}) or vector(0)',
             thresholds=[(1, "red")]),
        stat("Series exported", "sum(fabricflow_metrics_series)", "short",
             desc="Series the metrics sink exports (its budget: metrics.series_budget). "
                  "Folded node pairs appear as other/other.",
             thresholds=[(45000, "orange")]),
        row("Who talks to whom"),
        matrix("Traffic matrix, node to node (heatmap)",
               'src_dst:node_to_node_flow_traffic_bytes:rate5m{src_node=~"$node"}', "src_node", "dst_node",
               desc="Rows: sender, columns: receiver, colour: bytes/s over 5 minutes. A ring all-reduce shows as "
                    "a band beside the diagonal. Pairs beyond the series budget are folded into other/other.",
               w=14, h=12),
        matrix("Group to group", "sum by (src_group, dst_group) (src_dst_app:group_to_group_flow_traffic_bytes:rate5m)",
               "src_group", "dst_group", w=10, h=12, desc="Never folded by the budget."),
        bars("Top talkers (node pairs)",
             'topk(10, src_dst:node_to_node_flow_traffic_bytes:rate5m{src_node!="other", src_node=~"$node"})',
             "{{src_node}} → {{dst_node}}"),
        bars("Top senders", 'topk(10, node_direction:app_flow_traffic_bytes:rate5m{direction="tx", node=~"$node"})',
             "{{node}}"),
        history("Top 20 node pairs over time",
                'topk(20, src_dst:node_to_node_flow_traffic_bytes:rate5m{src_node!="other", src_node=~"$node"})',
                "{{src_node}} → {{dst_node}}", "Bps", w=24,
                thresholds=[(1e8, "blue"), (1e9, "yellow"), (2.5e9, "red")]),
        row("What kind of traffic"),
        timeseries("Traffic by app category", [target("app:app_flow_traffic_bytes:rate5m", "{{app_category}}")],
                   "Bps", stack=True),
        timeseries("Rack to rack", [target("src_dst:rack_to_rack_flow_traffic_bytes:rate5m",
                                           "{{src_rack}} → {{dst_rack}}")], "Bps",
                   desc="Never folded by the budget; r1 → r1 is traffic that stays under one ToR."),
        row("Storage against link capacity"),
        timeseries("Storage traffic received / link capacity",
                   [target('sum by (node) (node_app_direction:app_flow_traffic_bytes:rate5m{app_category="storage", '
                           'direction="rx", node=~"$node"}) / on(node) max by (node) '
                           '(node_interface_bandwidth_bytes{direction="rx"})', "{{node}}")],
                   "percentunit", thresholds=[(0.7, "red")],
                   desc="The FabricStorageTrafficHigh alert fires when this stays above 70 % for 10 minutes "
                        "outside checkpoint windows."),
        timeseries("Storage traffic and capacity (bytes/s)", [
            target('sum by (node) (node_app_direction:app_flow_traffic_bytes:rate5m{app_category="storage", '
                   'direction="rx", node=~"$node"})', "{{node}} storage rx"),
            target('max by (node) (node_interface_bandwidth_bytes{direction="rx", node=~"$node"}) and on(node) '
                   'sum by (node) (node_app_direction:app_flow_traffic_bytes:rate5m{app_category="storage", '
                   'direction="rx"})', "{{node}} capacity", ref="B")], "Bps",
            overrides=[by_ref("B", **{"custom.lineStyle": {"fill": "dash", "dash": [10, 10]},
                                      "custom.fillOpacity": 0})]),
        row("GPU beside the network"),
        timeseries("GPU utilisation beside collective traffic", [
            target('avg(node:DCGM_FI_DEV_GPU_UTIL:avg{node=~"$node"})', "GPU utilisation (avg)"),
            target('sum(node_app_direction:app_flow_traffic_bytes:rate5m{app_category=~"collective|rocev2", '
                   'direction="tx", node=~"$node"})', "collective + RoCEv2 traffic", ref="B")], "percent", w=24,
            desc="dcgm-exporter's DCGM_FI_DEV_GPU_UTIL, its Hostname mapped to our node label by the recording rule "
                 "node:DCGM_FI_DEV_GPU_UTIL:avg (docs/monitoring.md).",
            overrides=[by_ref("B", unit="Bps", **{"custom.axisPlacement": "right"})]),
        row("Metrics pipeline"),
        timeseries("Age of the latest closed window",
                   [target("time() - fabricflow_metrics_last_window_end_seconds", "{{stream}}")], "s",
                   desc="Counters advance when a window closes: window + allowed lateness behind the wire."),
        timeseries("Node-pair cells folded into other/other",
                   [target("sum by (family) (rate(fabricflow_metrics_series_folded_total[$__rate_interval]))",
                           "{{family}}")], "cps"),
        *telemetry_health(),
    ]
    return dashboard("fabricflow-overview", "fabricflow / Cluster overview",
                     "Traffic matrix, top talkers, traffic by app category, storage against capacity, GPU beside "
                     "the network.", panels,
                     [variable("node", "label_values(node_direction:app_flow_traffic_bytes:rate5m, node)")],
                     [checkpoint_annotation(), change_annotation()])


def telemetry_health() -> list[dict]:
    """The "Telemetry health" row: what the alerts of rules/fabricflow-telemetry.yml read, per exporter."""
    health = [  # (ref, instant expression by exporter, column name, unit)
        ("A", "sum by (exporter) (rate(fabricflow_ingest_datagrams_total[5m]))", "datagrams/s", "pps"),
        ("B", "max by (exporter) (exporter_protocol:fabricflow_ingest_export_loss:ratio_rate10m)", "export loss",
         "percentunit"),
        ("C", "exporter:fabricflow_ingest_sflow_sampler_loss:ratio_rate10m", "sampler drops", "percentunit"),
        ("D", "max by (exporter) (fabricflow_ingest_clock_skew_seconds)", "clock skew", "s"),
        ("E", "sum by (exporter) (increase(fabricflow_ingest_template_missing_sets_total[15m]))",
         "sets without template (15m)", "short"),
        ("F", "exporter:fabricflow_ingest_sampling_rate_missing:ratio_rate10m", "records without rate", "percentunit"),
    ]
    return [
        row("Telemetry health"),
        table("Exporters", [target(e, instant=True, fmt="table", ref=r) for r, e, _n, _u in health], w=24,
              organize=["Time"], desc="One row per exporter; an empty cell: not measured for its protocol (sFlow has "
              "no clock skew, NetFlow no sampler drops). Alerts: docs/monitoring.md, \"Telemetry health\".",
              overrides=[{"matcher": {"id": "byName", "options": f"Value #{r}"},
                          "properties": [{"id": "displayName", "value": n}, {"id": "unit", "value": u}]}
                         for r, _e, n, u in health]),
        timeseries("Export loss (sequence gaps)", [target(
            "exporter_protocol:fabricflow_ingest_export_loss:ratio_rate10m > 0", "{{exporter}} {{protocol}}")],
            "percentunit", desc="Share of what the exporter sent that never reached ingest."),
        timeseries("sFlow sampler drops", [target(
            "exporter:fabricflow_ingest_sflow_sampler_loss:ratio_rate10m > 0", "{{exporter}}")], "percentunit",
            desc="Share of flow samples the agent dropped before export (its own drops counter)."),
    ]


def job() -> dict:
    sel = f"and on(node) {JOB_NODES}"
    panels = [
        timeseries("Send rate per node", [target(
            f'node_direction:app_flow_traffic_bytes:rate5m{{direction="tx", node=~"$node"}} {sel}', "{{node}}")],
            "Bps", desc="A straggler sends much less than its peers in every iteration."),
        timeseries("Straggler score per node", [target(
            'max by (node) (straggler_score{job=~"$job", node=~"$node"})', "{{node}}")], "short",
            thresholds=[(3, "red")], desc="Robust score over several windows (docs/detectors.md)."),
        history("Flagged as straggler", 'max by (node) (straggler_flagged{job=~"$job", node=~"$node"})', "{{node}}",
                thresholds=[(1, "red")]),
        timeseries("Iteration period", [target('job_iteration_period_seconds{job=~"$job"}', "{{job}}")], "s",
                   desc="Detected from the traffic's periodicity (patterns.v1)."),
        timeseries("GPU utilisation, collective traffic, storage, TCP SYN (per node)", [
            target(f'node:DCGM_FI_DEV_GPU_UTIL:avg{{node=~"$node"}} {sel}', "{{node}} GPU %"),
            target(f'sum by (node) (node_app_direction:app_flow_traffic_bytes:rate5m{{'
                   f'app_category=~"collective|rocev2", direction="tx", node=~"$node"}}) {sel}',
                   "{{node}} collective", ref="B"),
            target(f'sum by (node) (node_app_direction:app_flow_traffic_bytes:rate5m{{app_category="storage", '
                   f'node=~"$node"}}) {sel}', "{{node}} storage", ref="C"),
            target(f'sum by (node) (node_direction:node_flow_tcp_syn_packets:rate5m{{node=~"$node"}}) {sel}',
                   "{{node}} SYN/s", ref="D")], "percent", w=24, h=10,
            desc="The domain notes' view (4.3): when an iteration stutters, zoom in and see whether traffic fell "
                 "off a cliff or spiked at that moment. GPU from dcgm-exporter (Hostname -> node).",
            overrides=[by_ref("B", unit="Bps", **{"custom.axisPlacement": "right"}),
                       by_ref("C", unit="Bps", **{"custom.axisPlacement": "right"}),
                       by_ref("D", unit="pps", **{"custom.axisPlacement": "hidden"})]),
        matrix("Node pairs in the job (heatmap)",
               'src_dst:node_to_node_flow_traffic_bytes:rate5m and on(src_node) '
               'group by (src_node) (label_replace(straggler_score{job=~"$job"}, "src_node", "$1", "node", "(.+)"))',
               "src_node", "dst_node", desc="Ring all-reduce: a band beside the diagonal; a straggler: a pale row."),
        timeseries("Congestion: ECN CE and RoCEv2 CNP packets", [
            target(f'node_direction:node_flow_ecn_ce_packets:rate5m{{direction="rx", node=~"$node"}} {sel}',
                   "{{node}} ECN CE rx"),
            target(f'node_direction:node_flow_roce_cnp_packets:rate5m{{direction="tx", node=~"$node"}} {sel}',
                   "{{node}} CNP tx", ref="B")], "pps",
            desc="Estimated from sampled headers (sFlow); NetFlow cannot see RDMA bypassing the IP stack."),
    ]
    return dashboard("fabricflow-job", "fabricflow / Training job",
                     "Per-node send rate, straggler scores, iteration period, GPU beside the network.", panels,
                     [variable("job", "label_values(straggler_score, job)", include_all=False, multi=False),
                      variable("node", 'label_values(straggler_score{job=~"$job"}, node)')],
                     [checkpoint_annotation('job:fabricflow_checkpoint_quiet:max5m{job=~"$job"}'),
                      change_annotation('change_marker_timestamp_seconds{job=~"$job|"} * 1000')])


def links() -> dict:
    port = 'switch=~"$switch"'
    panels = [
        timeseries("Port utilisation across all ports, tx (min, quartiles, max)",
                   [target('direction:sflow_port_utilization:quantile_rate5m{direction="tx"}', "q{{quantile}}")],
                   "percentunit", desc="Five lines whatever the number of ports: q0 = least used port, q1 = busiest."),
        timeseries("Port utilisation across all ports, rx (min, quartiles, max)",
                   [target('direction:sflow_port_utilization:quantile_rate5m{direction="rx"}', "q{{quantile}}")],
                   "percentunit"),
        heatmap("Port utilisation distribution",
                f"switch_port_direction:sflow_port_utilization:ratio_rate5m{{{port}}}",
                desc="How many ports sit in each utilisation band, over time."),
        bars("Busiest ports", f"topk(10, switch_port_direction:sflow_port_utilization:ratio_rate5m{{{port}}})",
             "{{switch}}/{{port}} {{node}} {{direction}}", "percentunit"),
        # three queries with the same labels (switch, port, node), merged into one row per port
        table("Per-port utilisation", [
            target(f'max by (switch, port, node) (switch_port_direction:sflow_port_utilization:ratio_rate5m'
                   f'{{direction="tx", {port}}})', instant=True, fmt="table"),
            target(f'max by (switch, port, node) (switch_port_direction:sflow_port_utilization:ratio_rate5m'
                   f'{{direction="rx", {port}}})', instant=True, fmt="table", ref="B"),
            target(f"max by (switch, port, node) (sflow_port_speed_bps{{{port}}})", instant=True, fmt="table",
                   ref="C")], "percentunit", w=24, organize=["Time"],
            overrides=[{"matcher": {"id": "byName", "options": "Value #C"},
                        "properties": [{"id": "unit", "value": "bps"}, {"id": "displayName", "value": "ifSpeed"}]},
                       {"matcher": {"id": "byName", "options": "Value #A"},
                        "properties": [{"id": "displayName", "value": "tx utilisation"}]},
                       {"matcher": {"id": "byName", "options": "Value #B"},
                        "properties": [{"id": "displayName", "value": "rx utilisation"}]}]),
        row("Errors, discards, speed"),
        timeseries("Errors per port", [target(
            f"switch_port_direction:sflow_port_errors:rate5m{{{port}}} > 0", PORT_LEGEND)],
            "cps", desc="The switches' own counters (sFlow counter samples)."),
        timeseries("Discards per port", [target(
            f"switch_port_direction:sflow_port_discards:rate5m{{{port}}} > 0", PORT_LEGEND)],
            "cps"),
        timeseries("Speed changes (ports whose ifSpeed changed in the range)", [target(
            f"max by (switch, port, node) (sflow_port_speed_bps{{{port}}}) and on(switch, port, node) "
            f"(max by (switch, port, node) (changes(sflow_port_speed_bps{{{port}}}[$__range])) > 0)",
            "{{switch}}/{{port}} {{node}}")], "bps"),
        table("Ports below their configured speed", [target(
            f"max by (switch, port, node) (sflow_port_speed_bps{{{port}}} > 0) < on(switch, port, node) "
            f"max by (switch, port, node) (sflow_port_configured_speed_bps)", instant=True, fmt="table")], "bps",
            organize=["Time"]),
        timeseries("Link health events", [target(
            f"sum by (kind) (increase(link_events_total{{{port}}}[$__rate_interval]))", "{{kind}}")], "short",
            stack=True, desc="From the processors' link-health detector (link.health.v1)."),
        stat("Ports down", f"count(sflow_port_oper_up{{{port}}} == 0) or vector(0)", thresholds=[(1, "red")], w=12,
             h=8),
        timeseries("Dropped packets by reason (sFlow drop notifications)", [target(
            f"sum by (switch, port, node, reason) (rate(sflow_port_dropped_packets_total{{{port}}}[$__rate_interval]))"
            f" > 0", "{{switch}}/{{port}} {{node}} {{reason}}")], "pps", w=24,
            desc="Packets the switches reported dropping, with the spec's reason (no_buffer_space, acl, ...): only "
                 "from agents that send sFlow dropped-packet notifications (docs/metrics.md, \"Drop reasons\")."),
    ]
    return dashboard("fabricflow-links", "fabricflow / Links",
                     "Per-port utilisation, errors, discards and speed changes; utilisation as min/quartiles/max "
                     "across ports, which scales to thousands of ports.", panels,
                     [variable("switch", "label_values(sflow_port_speed_bps, switch)")])


def security() -> dict:
    panels = [
        table("Firing alerts", [target('ALERTS{alertstate="firing", alertname=~"Fabric.*"}', instant=True,
                                       fmt="table")], w=24, organize=["Time", "__name__", "Value", "alertstate"]),
        timeseries("Policy engine alerts firing", [target("max by (rule) (flow_alerts_firing)", "{{rule}}")], "short",
                   desc="Segmentation, unregistered hosts, exfiltration, ... (docs/alerts.md)."),
        timeseries("Policy engine alerts fired", [target(
            "sum by (rule) (increase(flow_alerts_total[$__rate_interval]))", "{{rule}}")], "short", stack=True),
        timeseries("Egress per node (external destinations)", [target(
            'topk(10, node_app_direction:app_flow_traffic_bytes:rate5m{app_category="external", direction="tx"})',
            "{{node}}")], "Bps"),
        timeseries("Traffic out of the model store", [target(
            'sum by (dst_group) (src_dst_app:group_to_group_flow_traffic_bytes:rate5m{src_group="model-store", '
            'dst_group!="model-store"})', "→ {{dst_group}}")], "Bps",
            desc="Large transfers to unauthorized destinations raise the exfiltration rule."),
        timeseries("Traffic of hosts outside the inventory", [target(
            'sum by (app_category) (node_app_direction:app_flow_traffic_bytes:rate5m{node="unknown"})',
            "{{app_category}}")], "Bps"),
        matrix("Group to group", "sum by (src_group, dst_group) (src_dst_app:group_to_group_flow_traffic_bytes:rate5m)",
               "src_group", "dst_group", desc="What the segmentation policy is checked against."),
        timeseries("TCP SYN and RST per node", [
            target("topk(10, node_direction:node_flow_tcp_syn_packets:rate5m)", "{{node}} SYN {{direction}}"),
            target("topk(10, node_direction:node_flow_tcp_rst_packets:rate5m)", "{{node}} RST {{direction}}",
                   ref="B")], "pps",
            desc="Estimated from sampled packets: a trigger to capture, not a measure of a SYN storm "
                 "(domain notes 6.5)."),
    ]
    return dashboard("fabricflow-security", "fabricflow / Security", "Alerts and egress.", panels)


DASHBOARDS = {"overview": overview, "job": job, "links": links, "security": security}


def render() -> dict[str, str]:
    """file name -> JSON text."""
    return {f"fabricflow-{name}.json": json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(OUT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
