"""sinks/metrics/fabric.py: per-uplink and per-rail families from link-health samples, bounded by the topology."""

from __future__ import annotations

import pytest

from processors.logic.enrich.inventory import Inventory
from sinks.metrics.state import MetricsState
from tests.support.fabric import fabric_inventory

T = 1_764_600_000_000
G = 400_000_000_000


def sample(switch, port, util_in, util_out, t=T):
    return {"time_ms": t, "interval_ms": 10_000, "kind": "sample", "exporter": "10.255.0.1", "switch": switch,
            "if_index": port, "if_speed": G, "util_in": util_in, "util_out": util_out}


def values(st, family):
    return dict(getattr(st.fabric, family).values)


def test_uplink_and_rail_families():
    st = MetricsState(fabric_inventory())
    recs = [sample("leaf-0", 49 + k, 0.1, u) for k, u in enumerate((0.8, 0.0, 0.0, 0.0))]
    recs += [sample("leaf-0", 1, 0.2, 0.1), sample("leaf-0", 2, 0.4, 0.3), sample("leaf-1", 1, 0.05, 0.05)]
    recs.append(sample("leaf-0", 77, 0.5, 0.5))  # a port the topology does not name: no fabric series
    assert st.add_link_health(recs, now=0.0) == len(recs)
    b = values(st, "uplink_bytes")
    assert set(b) == {("leaf-0", s, d) for s in ("spine-0", "spine-1") for d in ("tx", "rx")}
    assert b[("leaf-0", "spine-0", "tx")] == pytest.approx(0.8 * G * 10 / 8)  # if49 (spine-0) + if51 (spine-0, idle)
    assert b[("leaf-0", "spine-1", "tx")] == 0
    assert values(st, "uplink_imbalance") == {("leaf-0",): pytest.approx(4.0)}
    rb = values(st, "rail_bytes")
    assert rb[("0", "tx")] == pytest.approx((0.2 + 0.4) * G * 10 / 8)  # what the nodes send = switch port in
    assert rb[("1", "rx")] == pytest.approx(0.05 * G * 10 / 8)
    ru = values(st, "rail_util")
    assert ru[("0", "min")] == pytest.approx(0.2) and ru[("0", "max")] == pytest.approx(0.4)
    assert ru[("0", "mean")] == pytest.approx(0.3)


def test_series_count_grows_with_the_inventory_not_the_traffic():
    st = MetricsState(fabric_inventory())
    for t in range(50):
        st.add_link_health([sample("leaf-0", 49 + k, 0.1, 0.2 + t / 100) for k in range(4)]
                           + [sample(f"leaf-{s}", p, 0.3, 0.3) for s in (0, 1) for p in (1, 2)], now=float(t))
    # 2 spines x 2 directions, 1 leaf with uplinks samples, 2 rails x 2 directions, 2 rails x 3 stats
    assert [len(values(st, f)) for f in ("uplink_bytes", "uplink_imbalance", "rail_bytes", "rail_util")] == [4, 1, 4, 6]


def test_inventory_without_topology_exports_no_fabric_series():
    st = MetricsState(Inventory.empty())
    st.add_link_health([sample("leaf-0", 49, 0.5, 0.5)], now=0.0)
    assert all(not getattr(st.fabric, f).values for f in ("uplink_bytes", "uplink_imbalance", "rail_bytes", "rail_util"))
