"""A stand-in scrape target that serves every metric family of the flow-metrics contract.

It exists so the rules and dashboards can be run against a real Prometheus
without the pipeline: the families, label names and label values follow
docs/monitoring.md (the contract of ``fabricflow sink metrics``); counters grow
linearly with wall time so rates are non-zero. The values describe a small
cluster in which several alerts hold on purpose (a 25G port at 1G with CRC
errors, a straggler, incast, storage traffic above 70 %, policy alerts), plus
dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL`` and a checkpoint schedule.

    with FakeFlowMetrics(port) as fake:       # serves http://127.0.0.1:port/metrics
        ...

Not the metrics sink: the end-to-end test of issue #16 scrapes the real one.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

NODES = {  # node -> (rack, group, switch, port)
    "gpu01": ("r1", "gpu", "tor1", "1"),
    "gpu02": ("r1", "gpu", "tor1", "2"),
    "gpu03": ("r2", "gpu", "tor2", "1"),
    "gpu04": ("r2", "gpu", "tor2", "2"),
    "stor01": ("r2", "storage", "tor2", "17"),
    "mstore01": ("r2", "model-store", "tor2", "18"),
}
JOB = "train-a"
JOB_NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
CATEGORIES = ("collective", "rocev2", "storage", "dns", "mgmt", "external", "other")
LINK_CAPACITY_BYTES = {n: (100e9 if n == "stor01" else 25e9) / 8 for n in NODES}
DOWNGRADED = ("tor2", "2")  # gpu04's port negotiated 1G (configured 25G)


def _pairs():
    """(src, dst, category, bytes/s): a ring among the job, storage reads/writes, one folded 'other' cell."""
    ring = list(JOB_NODES)
    for i, s in enumerate(ring):
        d = ring[(i + 1) % len(ring)]
        yield s, d, "collective", 1.5e9
        yield s, d, "rocev2", 0.5e9
        yield s, "stor01", "storage", 2.5e9       # 4 x 2.5 GB/s = 80 % of stor01's 12.5 GB/s
        yield "stor01", s, "storage", 0.2e9
    yield "mstore01", "unknown", "external", 5e6
    yield "other", "other", "other", 1e6


class _Collector:
    def __init__(self):
        self.t0 = time.time()

    def collect(self):
        t = time.time() - self.t0 + 1.0
        pairs = list(_pairs())

        def counter(name, doc, labels, rows):
            fam = CounterMetricFamily(name, doc, labels=labels)
            for values, rate in rows:
                fam.add_metric(list(values), rate * t)
            return fam

        def gauge(name, doc, labels, rows):
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for values, v in rows:
                fam.add_metric(list(values), v)
            return fam

        yield counter("node_to_node_flow_traffic_bytes", "bytes", ["src_node", "dst_node", "app_category"],
                      [((s, d, c), r) for s, d, c, r in pairs])
        yield counter("node_to_node_flow_traffic_packets", "packets", ["src_node", "dst_node", "app_category"],
                      [((s, d, c), r / 1000) for s, d, c, r in pairs])

        def rack(n):
            return NODES[n][0] if n in NODES else "unknown"

        def group(n):
            return NODES[n][1] if n in NODES else "unknown"

        for fam, key, lab in (("rack_to_rack", rack, ("src_rack", "dst_rack")),
                              ("group_to_group", group, ("src_group", "dst_group"))):
            agg: dict = {}
            for s, d, c, r in pairs:
                k = (key(s), key(d), c)
                agg[k] = agg.get(k, 0.0) + r
            yield counter(f"{fam}_flow_traffic_bytes", "bytes", [*lab, "app_category"], list(agg.items()))
            yield counter(f"{fam}_flow_traffic_packets", "packets", [*lab, "app_category"],
                          [(k, v / 1000) for k, v in agg.items()])
        app: dict = {}
        for s, d, c, r in pairs:
            app[(s, c, "tx")] = app.get((s, c, "tx"), 0.0) + r
            app[(d, c, "rx")] = app.get((d, c, "rx"), 0.0) + r
        yield counter("app_flow_traffic_bytes", "bytes", ["node", "app_category", "direction"], list(app.items()))
        yield counter("app_flow_traffic_packets", "packets", ["node", "app_category", "direction"],
                      [(k, v / 1000) for k, v in app.items()])

        per_node = [((n, dr), 10.0) for n in NODES for dr in ("tx", "rx")]
        for fam in ("node_flow_tcp_syn_packets", "node_flow_tcp_rst_packets", "node_flow_ecn_ce_packets",
                    "node_flow_roce_cnp_packets"):
            yield counter(fam, "packets", ["node", "direction"], per_node)
        job_pairs = [((s, d), 2.0) for s in JOB_NODES for d in JOB_NODES if s != d]
        yield counter("node_to_node_flow_tcp_syn_packets", "packets", ["src_node", "dst_node"], job_pairs)
        yield counter("node_to_node_flow_tcp_rst_packets", "packets", ["src_node", "dst_node"], job_pairs)

        ports = [(sw, p, n) for n, (_r, _g, sw, p) in NODES.items()] + [("tor1", "49", "")]
        yield counter("sflow_port_rx_bytes", "bytes", ["switch", "port", "node"], [(k, 1e9) for k in ports])
        yield counter("sflow_port_tx_bytes", "bytes", ["switch", "port", "node"], [(k, 2e9) for k in ports])
        yield counter("sflow_port_rx_packets", "packets", ["switch", "port", "node"], [(k, 1e6) for k in ports])
        yield counter("sflow_port_tx_packets", "packets", ["switch", "port", "node"], [(k, 2e6) for k in ports])
        speed = {k: (100e9 if k[2] == "stor01" else 25e9) for k in ports}
        speed[(*DOWNGRADED, "gpu04")] = 1e9
        yield gauge("sflow_port_speed_bps", "ifSpeed", ["switch", "port", "node"], list(speed.items()))
        yield gauge("sflow_port_configured_speed_bps", "inventory speed", ["switch", "port", "node"],
                    [(k, 100e9 if k[2] == "stor01" else 25e9) for k in ports if k[2]])
        errs = [((*k, dr), 150.0 if k[:2] == DOWNGRADED else 0.0) for k in ports for dr in ("rx", "tx")]
        yield counter("sflow_port_errors", "errors", ["switch", "port", "node", "direction"], errs)
        yield counter("sflow_port_discards", "discards", ["switch", "port", "node", "direction"],
                      [((*k, dr), 2.0) for k in ports for dr in ("rx", "tx")])
        yield gauge("sflow_port_oper_up", "oper status", ["switch", "port", "node"], [(k, 1) for k in ports])
        yield gauge("node_interface_bandwidth_bytes", "bytes/s", ["node", "direction"],
                    [((n, dr), LINK_CAPACITY_BYTES[n]) for n in NODES for dr in ("rx", "tx")])

        yield gauge("straggler_score", "score", ["job", "node"],
                    [((JOB, n), 4.0 if n == "gpu03" else 0.3) for n in JOB_NODES])
        yield gauge("straggler_flagged", "flag", ["job", "node"], [((JOB, n), int(n == "gpu03")) for n in JOB_NODES])
        incast = [(("stor01", "storage"), 1.0), (("gpu01", "gpu"), 0.5)]
        yield counter("incast_events", "episodes", ["dst_node", "dst_group"], incast)
        yield gauge("incast_active", "0/1", ["dst_node", "dst_group"], [(k, 1) for k, _ in incast])
        yield gauge("incast_capacity_fraction", "fraction", ["dst_node", "dst_group"], [(k, 0.95) for k, _ in incast])
        yield counter("link_events", "events", ["switch", "port", "node", "kind"],
                      [((*DOWNGRADED, "gpu04", "link_downgrade"), 0.001),
                       ((*DOWNGRADED, "gpu04", "error_burst"), 0.01)])
        yield gauge("link_utilization_ratio", "0..1", ["switch", "port", "node", "direction"],
                    [((*k, dr), 0.64) for k in ports for dr in ("rx", "tx")])
        rules = [("exfiltration", "critical", 1), ("segmentation", "warning", 2), ("unregistered_host", "warning", 1),
                 ("checkpoint_late", "warning", 0)]
        yield counter("flow_alerts", "alerts fired", ["rule", "severity"], [((r, s), 0.01) for r, s, _ in rules])
        yield gauge("flow_alerts_firing", "firing", ["rule", "severity"], [((r, s), v) for r, s, v in rules])
        yield gauge("job_iteration_period_seconds", "period", ["job"], [((JOB,), 2.0)])
        yield counter("change_markers", "changes", ["job", "scope"], [((JOB, "job"), 1.0), (("", "cluster"), 1.0)])
        yield gauge("change_marker_timestamp_seconds", "unix s", ["job", "scope"],
                    [((JOB, "job"), time.time() - 600), (("", "cluster"), time.time() - 1200)])

        fams = ("node_to_node_flow_traffic_bytes_total", "group_to_group_flow_traffic_bytes_total")
        yield gauge("fabricflow_metrics_series", "series", ["family"], [((f,), 100) for f in fams])
        yield counter("fabricflow_metrics_series_folded", "cells", ["family"], [((f,), 1.0) for f in fams])
        yield gauge("fabricflow_metrics_series_dropped", "series", ["family"], [((fams[0],), 12)])
        yield gauge("fabricflow_metrics_last_window_end_seconds", "unix s", ["stream"],
                    [(("matrix.windows.v1",), time.time() - 20), (("counters.raw.v1",), time.time() - 10)])
        yield counter("fabricflow_metrics_messages", "messages", ["topic"], [(("matrix.windows.v1",), 1.0)])
        yield counter("fabricflow_metrics_undecodable_messages", "messages", ["topic", "reason"],
                      [(("matrix.windows.v1", "bad_magic"), 0.0)])

        # ingest's own series (the telemetry-health rules): an sFlow switch losing 2 % of its datagrams and
        # dropping samples in its agent, a NetFlow v9 router with a slow clock, data before templates and
        # records without a sampling rate
        exp = [(("10.0.255.1", "sflow5"), 100.0), (("10.0.255.9", "netflow9"), 20.0)]
        yield counter("fabricflow_ingest_datagrams", "datagrams", ["exporter", "protocol"], exp)
        yield counter("fabricflow_ingest_records", "records", ["exporter", "protocol", "kind"],
                      [((e, p, "flow"), r * 10) for (e, p), r in exp])
        yield counter("fabricflow_ingest_sequence_lost", "lost", ["exporter", "protocol"], [(k, 2.0) for k, _ in exp])
        yield counter("fabricflow_ingest_sflow_sampler_samples", "samples", ["exporter"], [(("10.0.255.1",), 1000.0)])
        yield counter("fabricflow_ingest_sflow_sampler_drops", "drops", ["exporter"], [(("10.0.255.1",), 30.0)])
        yield gauge("fabricflow_ingest_clock_skew_seconds", "s", ["exporter"], [(("10.0.255.9",), 42.0)])
        yield counter("fabricflow_ingest_template_missing_sets", "sets", ["exporter", "protocol"],
                      [(("10.0.255.9", "netflow9"), 1.0)])
        yield counter("fabricflow_ingest_sampling_rate_missing", "records", ["exporter"], [(("10.0.255.9",), 50.0)])
        yield counter("sflow_port_dropped_packets", "drop notifications", ["switch", "port", "node", "reason"],
                      [(("tor2", "17", "stor01", "no_buffer_space"), 3.0), (("tor1", "1", "gpu01", "acl"), 0.1)])

        # dcgm-exporter (two GPUs per node) and a schedule for train-a that is never open now.
        yield gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilisation %", ["gpu", "Hostname"],
                    [((str(g), n), 90.0 - 40 * (n == "gpu03")) for n in JOB_NODES for g in (0, 1)])
        yield gauge("fabricflow_checkpoint_schedule_period_seconds", "s", ["job"], [((JOB,), 86400)])
        yield gauge("fabricflow_checkpoint_schedule_duration_seconds", "s", ["job"], [((JOB,), 1)])
        yield gauge("fabricflow_checkpoint_schedule_offset_seconds", "s", ["job"],
                    [((JOB,), (time.time() + 43200) % 86400)])
        # train-b (no traffic here) is checkpointing: the quiet rules have data, and
        # storage incast (stor01) is quiet while GPU incast (gpu01) is not.
        yield gauge("fabricflow_checkpoint_window", "0/1", ["job"], [((JOB,), 0), (("train-b",), 1)])


class FakeFlowMetrics:
    """HTTP server on 127.0.0.1:port serving the families above on /metrics."""

    def __init__(self, port: int):
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self._server = None

    def __enter__(self) -> FakeFlowMetrics:
        registry = CollectorRegistry()
        registry.register(_Collector())
        self._server, _thread = start_http_server(self.port, addr="127.0.0.1", registry=registry)
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
