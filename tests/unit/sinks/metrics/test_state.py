"""Flow-metrics sink logic: window-close increments, budget folding, port counters, labels, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from processors.logic.enrich.inventory import Inventory
from schemas import codec
from sinks.metrics.budget import OTHER_RESERVE, PairBudget
from sinks.metrics.state import MetricsState
from sinks.metrics.store import COUNTER, Family
from tests.support.flows import counters
from tests.support.matrix import window_message
from tests.support.metrics_state import INVENTORY, T0, cell, scrape, values


def test_window_close_increments_and_born_at_zero():
    st = MetricsState()
    st.add_matrix([cell(b=1000, p=10), cell(level="group", src="gpu", dst="gpu", b=1000, p=10),
                   cell(level="rack", src="r1", dst="r1", b=1000, p=10)])
    # a new series is shown at 0 by its first scrape (Prometheus' baseline), with its value from the next one on
    assert values(st, "node_to_node_flow_traffic_bytes_total") == {("gpu-1", "gpu-2", "collective"): 0.0}
    scrape(st)
    st.add_matrix([cell(b=500, p=5, end=T0 + 20_000)])  # the next window closes
    assert values(st, "node_to_node_flow_traffic_bytes_total") == {("gpu-1", "gpu-2", "collective"): 1500.0}
    assert values(st, "node_to_node_flow_traffic_packets_total") == {("gpu-1", "gpu-2", "collective"): 15.0}
    assert values(st, "group_to_group_flow_traffic_bytes_total") == {("gpu", "gpu", "collective"): 1000.0}
    assert values(st, "rack_to_rack_flow_traffic_packets_total") == {("r1", "r1", "collective"): 10.0}
    assert values(st, "app_flow_traffic_bytes_total") == {
        ("gpu-1", "collective", "tx"): 1500.0, ("gpu-2", "collective", "rx"): 1500.0}
    assert values(st, "fabricflow_metrics_last_window_end_seconds") == {("matrix",): (T0 + 20_000) / 1000}


def test_signals_per_node_and_pair():
    st = MetricsState()
    st.add_matrix([cell(syn_packets_est=2048, rst_packets_est=3, ecn_ce_packets_est=100, cnp_packets_est=7),
                   cell(src="gpu-3", dst="gpu-2", cat="other", syn_packets_est=1)])
    scrape(st)
    assert values(st, "node_flow_tcp_syn_packets_total") == {
        ("gpu-1", "tx"): 2048.0, ("gpu-2", "rx"): 2049.0, ("gpu-3", "tx"): 1.0}
    assert values(st, "node_flow_tcp_rst_packets_total") == {("gpu-1", "tx"): 3.0, ("gpu-2", "rx"): 3.0}
    assert values(st, "node_flow_ecn_ce_packets_total") == {("gpu-1", "tx"): 100.0, ("gpu-2", "rx"): 100.0}
    assert values(st, "node_flow_roce_cnp_packets_total") == {("gpu-1", "tx"): 7.0, ("gpu-2", "rx"): 7.0}
    assert values(st, "node_to_node_flow_tcp_syn_packets_total") == {("gpu-1", "gpu-2"): 2048.0,
                                                                      ("gpu-3", "gpu-2"): 1.0}


def test_unknown_node_label_never_an_address():
    st = MetricsState()
    st.add_matrix([cell(src="", dst="gpu-2")])
    st.add_incast([{"event_id": "x", "state": "open", "window_start_ms": T0, "window_end_ms": T0 + 200,
                    "destination": "10.9.9.9", "destination_group": "unknown", "fraction": 1.5}], now=0.0)
    st.add_straggler([{"window_end_ms": T0, "job": "j", "node": "", "score": -4.0, "straggler": True}], now=0.0)
    scrape(st)
    assert values(st, "node_to_node_flow_traffic_bytes_total") == {("unknown", "gpu-2", "collective"): 1000.0}
    assert values(st, "incast_events_total") == {("unknown", "unknown"): 1.0}
    assert values(st, "incast_capacity_fraction") == {("unknown", "unknown"): 1.5}
    assert values(st, "straggler_score") == {("j", "unknown"): -4.0}
    text = _text(st)
    assert "10.9.9.9" not in text


def _text(st: MetricsState) -> str:
    r = CollectorRegistry()
    r.register(st)
    return generate_latest(r).decode()


def _budget(room: int) -> tuple[PairBudget, dict[str, Family]]:
    f = {n: Family(n + "_total", "", labels, COUNTER) for n, labels in (
        ("bytes", ("s", "d", "c")), ("packets", ("s", "d", "c")), ("syn", ("s", "d")), ("rst", ("s", "d")),
        ("folded", ("family",)))}
    return PairBudget(room + OTHER_RESERVE, f["bytes"], f["packets"], f["syn"], f["rst"], f["folded"]), f


def test_budget_folds_beyond_room_then_prefers_job_pairs_and_rate():
    b, f = _budget(room=6)  # three single-category pairs without TCP signals
    assert b.add("a", "b", "collective", 100, 1, 0, 0)
    assert b.add("c", "d", "collective", 900, 9, 0, 0)
    assert not b.add("x", "y", "collective", 50, 5, 3, 0)  # needs bytes + packets + syn: 7 > 6, folded
    assert not b.add("x", "z", "storage", 7, 1, 0, 0)  # the budget was full: new pairs wait
    assert f["bytes"].values == {("a", "b", "collective"): 100, ("c", "d", "collective"): 900,
                                 ("other", "other", "collective"): 50, ("other", "other", "storage"): 7}
    assert f["syn"].values == {("other", "other"): 3}
    assert f["folded"].values == {("bytes_total",): 2, ("packets_total",): 2, ("syn_total",): 1}
    # x and y are in one job: their pair goes first, then the highest rate (c->d); a->b and x->z lose
    res = b.reselect({"x": "job", "y": "job"})
    assert b.selected == {("x", "y"), ("c", "d")} and res == {"selected": 2, "evicted": 1, "left_out": 2}
    assert ("a", "b", "collective") not in f["bytes"].values  # an evicted pair's series go away
    # a->b and x->z (one category each, no TCP signals) are left out: the series they would need
    assert b.dropped == {"bytes_total": 2, "packets_total": 2, "syn_total": 0, "rst_total": 0}
    assert not b.add("a", "b", "collective", 10, 1, 0, 0)
    assert b.add("x", "y", "collective", 20, 2, 1, 0)
    assert f["bytes"].values[("other", "other", "collective")] == 60
    assert f["bytes"].values[("x", "y", "collective")] == 20 and ("x", "y", "collective") in f["bytes"].newborn
    assert b.total == 5 and b.series == {("x", "y"): 3, ("c", "d"): 2}


def test_budget_without_pressure_folds_nothing():
    st = MetricsState(series_budget=50_000)
    nodes = [f"n{i}" for i in range(40)]
    st.add_matrix([cell(src=a, dst=c) for a in nodes for c in nodes if a != c])
    st.reselect()
    scrape(st)
    assert len(values(st, "node_to_node_flow_traffic_bytes_total")) == 40 * 39
    assert values(st, "fabricflow_metrics_series_folded_total") == {}
    assert set(values(st, "fabricflow_metrics_series_dropped").values()) == {0}


def test_state_budget_counts_every_family():
    """The budget is for all series: with little left after the fixed families, pairs fold into other."""
    st = MetricsState(series_budget=147)
    st.add_matrix([cell(level="group", src="gpu", dst="gpu"), cell(level="rack", src="r1", dst="r2")])
    st.add_matrix([cell(src=f"n{i}", dst="m", b=100 * (i + 1)) for i in range(30)])
    st.reselect()
    st.add_matrix([cell(src=f"n{i}", dst="m", b=100 * (i + 1), end=T0 + 20_000) for i in range(30)])
    scrape(st)
    assert st.series_count() <= 147
    pairs = values(st, "node_to_node_flow_traffic_bytes_total")
    kept = {k[0] for k in pairs if k[0] != "other"}
    assert 0 < len(kept) < 30
    assert kept == {f"n{i}" for i in range(30 - len(kept), 30)}  # the highest-rate pairs keep their series
    # pairs without series fold into "other"; per-node families take every cell, folded or not
    assert pairs[("other", "other", "collective")] >= sum(100 * (i + 1) for i in range(30 - len(kept)))
    app = values(st, "app_flow_traffic_bytes_total")
    assert app[("m", "collective", "rx")] == 2 * sum(100 * (i + 1) for i in range(30))
    assert values(st, "fabricflow_metrics_series_folded_total")[("node_to_node_flow_traffic_bytes_total",)] >= 30 - len(kept)
    # the series the left-out pairs would need, as the selection counted them (one category, no TCP each)
    left_out = 30 - len(kept)
    assert values(st, "fabricflow_metrics_series_dropped") == {
        ("node_to_node_flow_traffic_bytes_total",): left_out, ("node_to_node_flow_traffic_packets_total",): left_out,
        ("node_to_node_flow_tcp_syn_packets_total",): 0, ("node_to_node_flow_tcp_rst_packets_total",): 0}


def test_port_counters_mapped_to_switch_and_peer():
    inv = Inventory.from_dict(INVENTORY)
    st = MetricsState(inv)
    batch = counters([
        dict(exporter="10.0.255.1", if_index=1, t=T0, in_octets=2**63 + 5, out_octets=1000, in_errors=3,
             out_discards=4, speed=100_000_000_000),
        dict(exporter="10.0.255.1", if_index=2, t=T0, in_octets=10, speed=0, oper=False),
        dict(exporter="192.0.2.99", if_index=1, t=T0, in_octets=99),  # agent of no inventory switch
    ])
    assert st.add_counters(batch, now=0.0) == 2
    st.add_counters(counters([dict(exporter="10.0.255.1", if_index=2, t=T0 - 1, in_octets=1)]), now=0.0)  # older
    assert values(st, "sflow_port_rx_bytes_total") == {("tor-1", "1", "gpu-1"): float(2**63 + 5),
                                                       ("tor-1", "2", "gpu-2"): 10.0}
    assert values(st, "sflow_port_tx_bytes_total")[("tor-1", "1", "gpu-1")] == 1000.0
    assert values(st, "sflow_port_errors_total") == {("tor-1", "1", "gpu-1", "rx"): 3.0, ("tor-1", "1", "gpu-1", "tx"): 0.0,
                                                     ("tor-1", "2", "gpu-2", "rx"): 0.0, ("tor-1", "2", "gpu-2", "tx"): 0.0}
    assert values(st, "sflow_port_discards_total")[("tor-1", "1", "gpu-1", "tx")] == 4.0
    assert values(st, "sflow_port_speed_bps")[("tor-1", "1", "gpu-1")] == 100e9
    assert values(st, "sflow_port_configured_speed_bps") == {("tor-1", "1", "gpu-1"): 400e9}
    assert values(st, "sflow_port_oper_up") == {("tor-1", "1", "gpu-1"): 1.0, ("tor-1", "2", "gpu-2"): 0.0}
    # live ifSpeed of the node's port (100G, downgraded from 400G) wins; gpu-2's port reports 0: capacity
    bw = values(st, "node_interface_bandwidth_bytes")
    assert bw[("gpu-1", "rx")] == bw[("gpu-1", "tx")] == 100e9 / 8
    assert bw[("gpu-2", "tx")] == 400e9 / 8 and bw[("gpu-3", "rx")] == 100e9 / 8 and ("st-1", "rx") not in bw
    assert values(st, "fabricflow_metrics_skipped_records_total") == {
        ("counters", "unknown_switch"): 0.0, ("counters", "older_sample"): 0.0}  # born at zero
    scrape(st)
    assert values(st, "fabricflow_metrics_skipped_records_total") == {
        ("counters", "unknown_switch"): 1.0, ("counters", "older_sample"): 1.0}


def test_gauges_expire_after_ttl():
    st = MetricsState(ttl_s=60)
    st.add_straggler([{"window_end_ms": T0, "job": "j", "node": "n", "score": 1.0, "straggler": False}], now=100.0)
    assert st.straggler_score.values
    st.collect(now=150.0)
    assert st.straggler_score.values
    st.collect(now=161.0)
    assert not st.straggler_score.values


def test_detector_topics():
    inv = Inventory.from_dict(INVENTORY)
    st = MetricsState(inv)
    ev = {"event_id": "gpu-2@1", "state": "open", "window_start_ms": T0, "window_end_ms": T0 + 200,
          "destination": "gpu-2", "destination_group": "gpu", "fraction": 0.9}
    st.add_incast([ev, ev | {"state": "update", "fraction": 1.1}, ev], now=0.0)  # the re-delivered open: once
    link = {"time_ms": T0, "kind": "link_downgrade", "exporter": "10.0.255.1", "switch": "tor-1", "if_index": 1,
            "util_in": 0.0, "util_out": 0.0}
    st.add_link_health([link, link, link | {"kind": "sample", "util_in": 0.25, "util_out": 0.5}], now=0.0)
    alert = {"dedup_key": "k1", "rule": "segmentation", "severity": "warning", "state": "firing",
             "window_end_ms": T0, "first_seen_ms": T0}
    st.add_alerts([alert, alert | {"dedup_key": "k2"}, alert | {"state": "updated"},
                   alert | {"dedup_key": "k2", "state": "resolved"}], now=0.0)
    st.add_patterns([{"job": "job-a", "current_period_ms": 3000, "window_end_ms": T0},
                     {"job": "job-b", "current_period_ms": -1, "window_end_ms": T0},
                     # a training-timeline record has no window-level period: it leaves the gauge alone
                     {"kind": "pattern_timeline", "job": "job-a", "current_period_ms": -1, "window_end_ms": T0}],
                    now=0.0)
    scrape(st)
    assert values(st, "incast_events_total") == {("gpu-2", "gpu"): 1.0}
    assert values(st, "incast_active") == {("gpu-2", "gpu"): 1.0}
    assert values(st, "incast_capacity_fraction") == {("gpu-2", "gpu"): 1.1}
    assert values(st, "link_events_total") == {("tor-1", "1", "gpu-1", "link_downgrade"): 1.0}
    assert values(st, "link_utilization_ratio") == {("tor-1", "1", "gpu-1", "rx"): 0.25,
                                                    ("tor-1", "1", "gpu-1", "tx"): 0.5}
    assert values(st, "flow_alerts_total") == {("segmentation", "warning"): 2.0}
    assert values(st, "flow_alerts_firing") == {("segmentation", "warning"): 1.0}
    assert values(st, "job_iteration_period_seconds") == {("job-a",): 3.0}
    assert values(st, "fabricflow_metrics_skipped_records_total") == {("incast", "duplicate"): 1.0,
                                                                      ("link", "duplicate"): 1.0}


def test_malformed_and_unknown_messages_are_counted_and_skipped():
    st = MetricsState(topics={"matrix": "matrix.windows.v2", "patterns": "patterns.v1", "counters": "counters.raw.v1"})
    good = window_message([cell()])
    v1 = codec.encode_record("matrix_cell", cell())  # a v1 cell on the v2 topic: the wrong schema
    incast = codec.encode_record("incast_event", {
        "event_id": "e", "state": "open", "window_start_ms": 0, "window_end_ms": 1, "destination": "d",
        "destination_group": "g", "sources": [], "source_rates_bps": [], "aggregate_bps": 0.0, "capacity_bps": 1.0,
        "fraction": 0.0, "fraction_low": 0.0, "fraction_high": 0.0, "samples": 0, "sampling_rate": 1})
    n = st.add_values("matrix", [good, b"", b"junk", incast, good[:-3], codec.header("matrix_window_v2") + b"\xff" * 3,
                                 b"\xc3\x01" + b"\x00" * 8 + b"x", good, v1], now=0.0)
    assert n == 2
    assert st.add_values("patterns", [b"{not json", b"[1]", json.dumps({"job": "j", "current_period_ms": "x",
                                                                        "window_end_ms": 1}).encode(),
                                      json.dumps({"job": "j", "current_period_ms": 2000, "window_end_ms": 1}).encode()],
                         now=0.0) == 1
    assert st.add_values("counters", [b"junk"], now=0.0) == 0
    scrape(st)
    assert values(st, "fabricflow_metrics_undecodable_messages_total") == {
        ("matrix.windows.v2", "empty"): 1.0, ("matrix.windows.v2", "not_avro"): 1.0,
        ("matrix.windows.v2", "wrong_schema"): 2.0, ("matrix.windows.v2", "corrupt"): 2.0,
        ("matrix.windows.v2", "unknown_schema"): 1.0, ("patterns.v1", "not_json"): 2.0,
        ("patterns.v1", "bad_record"): 1.0, ("counters.raw.v1", "not_avro"): 1.0}
    assert values(st, "fabricflow_metrics_messages_total") == {
        ("matrix.windows.v2",): 9.0, ("patterns.v1",): 4.0, ("counters.raw.v1",): 1.0}
    assert values(st, "node_to_node_flow_traffic_bytes_total") == {("gpu-1", "gpu-2", "collective"): 2000.0}
    # a record with a field of the wrong type is skipped whole (nothing half applied)
    st.add_matrix([cell(b=5) | {"packets_est": "many"}, cell(level="switch")])
    scrape(st)
    assert st.app_bytes.values[("gpu-1", "collective", "tx")] == 2000.0
    assert values(st, "fabricflow_metrics_undecodable_messages_total")[("matrix.windows.v2", "bad_record")] == 2.0


@pytest.mark.parametrize("n", [0, 3])
def test_series_gauge_counts_families(n):
    st = MetricsState()
    st.add_matrix([cell(src=f"n{i}") for i in range(n)])
    fams = values(st, "fabricflow_metrics_series")
    assert fams[("node_to_node_flow_traffic_bytes_total",)] == n
    assert fams[("app_flow_traffic_bytes_total",)] == (n + 1 if n else 0)
    assert np.isfinite(list(fams.values())).all()


def test_cells_counted_once_per_key_and_window_with_the_horizon_bounding_memory():
    st = MetricsState(duplicate_horizon_s=30)
    key = b"w|node|gpu-1|gpu-2|collective|0"
    assert st.add_matrix([cell(b=1000)], [key]) == 1
    assert st.add_matrix([cell(b=1000)], [key]) == 0  # the same (key, window) again: ignored
    assert st.add_matrix([cell(b=7, end=T0 + 20_000)], [key]) == 1  # same key text, next window: counted
    assert st.add_matrix([cell(b=3)], [None]) == 1  # no key: cannot tell, counted
    assert st.app_bytes.values[("gpu-1", "collective", "tx")] == 1010
    assert st.skipped.values == {("matrix", "duplicate"): 1}
    # windows ending more than the horizon before the newest are forgotten
    for i in range(3, 13):
        st.add_matrix([cell(b=1, end=T0 + i * 10_000)], [key])
    assert sorted(st._cell_seen.by_end) == [T0 + i * 10_000 for i in range(9, 13)]
    assert len(st._cell_seen) == 4
    st.add_matrix([cell(b=1000)], [key])  # beyond the horizon: cannot tell any more, counted
    assert st.app_bytes.values[("gpu-1", "collective", "tx")] == 2020
    # a producer that gives every message one key: different cells still count, each once
    one = MetricsState()
    assert one.add_matrix([cell(src="gpu-1"), cell(src="gpu-3"), cell(src="gpu-1")], [b"k"] * 3) == 2
    assert one.app_bytes.values == {("gpu-1", "collective", "tx"): 1000, ("gpu-3", "collective", "tx"): 1000,
                                    ("gpu-2", "collective", "rx"): 2000}
    # a bad record is neither counted nor remembered
    st.add_matrix([cell(level="switch", end=T0 + 120_000)], [b"k2"])
    assert st.add_matrix([cell(end=T0 + 120_000)], [b"k2"]) == 1


def test_the_scrape_body_is_what_prometheus_client_writes():
    """MetricsState.exposition (what /metrics serves) renders series lines itself: the same text as
    generate_latest over collect(), newborn counters, gauges, odd label values and large values included."""
    from sinks.metrics.store import GAUGE

    st = MetricsState()
    st.add_matrix([cell(b=1000, p=10, syn_packets_est=4), cell(level="group", src="gpu", dst="gpu")])
    st.add_matrix([cell(b=500, p=5, end=T0 + 20_000)])
    odd = Family("fabricflow_test_odd_total", 'doc with \\ and\nnewline', ["b", "a"], COUNTER)
    odd.inc(('x"y', "back\\slash\nnl"), 3)
    odd.inc(("é", ""), 1.5e22)
    gauge = Family("fabricflow_test_gauge", "g", [], GAUGE)
    gauge.set((), 12345678.0)
    st.families.extend([odd, gauge])
    for now in (0.0, 1.0):  # newborn series shown at 0, then their values
        reg = CollectorRegistry()
        reg.register(_Fixed(st.collect(now=now)))
        want = generate_latest(reg)
        got = st.exposition(now=now)
        assert got == want and b'a="back\\\\slash\\nnl",b="x\\"y"' in got
        st.scraped()


class _Fixed:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families
