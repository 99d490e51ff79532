"""uplink_imbalance, rail_imbalance and job_spread: healthy balanced traffic stays quiet, skew fires with evidence."""

from __future__ import annotations

import numpy as np

from processors.logic.detectors.fabric import FabricBalanceConfig, FabricBalanceDetector
from processors.logic.detectors.jobspread import JobSpreadConfig, JobSpreadDetector, racks_needed
from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.interning import Interner
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import counters, flows
from tests.support.fabric import LEAF_AGENT, fabric_inventory

G = 400e9


def sample(switch, if_index, t, util_in=0.0, util_out=0.0):
    return {"kind": "sample", "switch": switch, "if_index": if_index, "time_ms": t, "interval_ms": 10_000,
            "if_speed": int(G), "util_in": util_in, "util_out": util_out}


def detector(**kw) -> FabricBalanceDetector:
    return FabricBalanceDetector(FabricBalanceConfig(eval_s=60, **kw), 10_000, fabric_inventory())


def run_counters(det, uplink_utils, nic_utils=(0.3, 0.3), periods=4):
    """Counter samples every 10 s: leaf-0's uplinks at ``uplink_utils``, n1's NICs at ``nic_utils`` (each way)."""
    alerts = []
    for t in range(0, periods * 60_000, 10_000):
        recs = [sample("leaf-0", 49 + k, t, 0.1, u) for k, u in enumerate(uplink_utils)]
        recs += [sample("leaf-1", 49 + k, t, 0.1, 0.3) for k in range(4)]
        recs += [sample(f"leaf-{k}", 1, t, u, u) for k, u in enumerate(nic_utils)]
        recs += [sample(f"leaf-{k}", 2, t, 0.3, 0.3) for k in range(2)]
        det.observe_link(recs)
        alerts += det.advance(t + 10_000)
    return alerts


def test_balanced_uplinks_and_rails_stay_quiet():
    assert run_counters(detector(), (0.30, 0.27, 0.34, 0.29)) == []


def test_polarised_uplinks_fire_with_counter_evidence():
    alerts = run_counters(detector(), (0.92, 0.01, 0.02, 0.01))
    fired = [a for a in alerts if a["state"] == "firing"]
    assert [a["dedup_key"] for a in fired] == ["uplink_imbalance|leaf-0"]
    e = fired[0]["entities"]
    assert (e["uplink"], e["spine"], e["source"], e["members"], e["idle_uplinks"]) == ("if49", "spine-0", "counters",
                                                                                        "4", "3")
    assert float(e["share"]) > 0.9 and e["low"] == e["share"] and e["shares"].startswith("if49:0.96")
    assert int(e["evidence_periods"]) >= 2 and "ECMP polarisation" in fired[0]["summary"]


def test_hot_uplink_without_an_idle_peer_is_not_polarisation():
    # one uplink at twice the even share, the others still busy: uneven, but no peer idles
    assert run_counters(detector(), (0.8, 0.4, 0.4, 0.4)) == []


def test_low_nic_fires_rail_imbalance():
    alerts = run_counters(detector(), (0.3, 0.3, 0.3, 0.3), nic_utils=(0.4, 0.05))
    fired = [a for a in alerts if a["state"] == "firing"]
    assert [a["dedup_key"] for a in fired] == ["rail_imbalance|n1|eth1"]
    e = fired[0]["entities"]
    assert (e["node"], e["nic"], e["rail"], e["port"], e["source"]) == ("n1", "eth1", "1", "leaf-1/if1", "counters")
    assert float(e["share"]) < 0.15


def test_idle_fabric_is_not_judged():
    assert run_counters(detector(min_util=0.05), (0.04, 0.0, 0.0, 0.0), nic_utils=(0.0, 0.0)) == []


def uplink_flows(counts, t, packets=1):
    """sFlow samples exported by leaf-0 leaving on its uplinks: ``counts[k]`` samples on if49+k."""
    recs = []
    for k, c in enumerate(counts):
        recs += [dict(t=t, exporter=LEAF_AGENT, src_ip="10.0.0.1", dst_ip="10.0.0.99", bytes=1500, packets=packets,
                      rate=4096)] * c
    arr = flows(recs)
    arr["out_if"] = np.repeat(np.arange(49, 49 + len(counts)), counts)
    return arr


def run_flows(det, counts, periods=4):
    alerts = []
    for p in range(periods):
        for w in range(6):
            t = p * 60_000 + w * 10_000
            det.observe_flows(uplink_flows(counts, t + 100))
            alerts += det.advance(t + 10_000)
    return alerts


def test_polarised_uplinks_fire_from_sampled_flows_with_bounds():
    alerts = run_flows(detector(source="flows", min_samples=100), (40, 1, 0, 1))
    fired = [a for a in alerts if a["state"] == "firing" and a["rule"] == "uplink_imbalance"]
    assert [a["dedup_key"] for a in fired] == ["uplink_imbalance|leaf-0"]
    e = fired[0]["entities"]
    assert e["source"] == "flows" and int(e["samples"]) == 6 * 42
    assert 0.85 < float(e["low"]) < float(e["share"]) < float(e["high"]) <= 1.0


def test_few_samples_are_not_judged_and_balanced_flows_stay_quiet():
    def uplink_alerts(counts, min_samples):
        alerts = run_flows(detector(source="flows", min_samples=min_samples), counts)
        return [a for a in alerts if a["rule"] == "uplink_imbalance"]

    assert uplink_alerts((40, 1, 0, 1), 1000) == []
    assert uplink_alerts((11, 9, 10, 12), 100) == []


def test_rail_imbalance_from_flows_by_nic_address():
    det = detector(source="flows", min_samples=100)
    alerts = []
    for w in range(24):
        t = w * 10_000
        recs = [dict(t=t + 1, src_ip="10.0.0.1", dst_ip="10.0.0.2", bytes=1500)] * 30
        recs += [dict(t=t + 1, src_ip="10.1.0.1", dst_ip="10.1.0.2", bytes=1500)] * 3
        det.observe_flows(flows(recs))
        alerts += det.advance(t + 10_000)
    keys = sorted({a["dedup_key"] for a in alerts if a["state"] == "firing"})
    assert keys == ["rail_imbalance|n1|eth1", "rail_imbalance|n2|eth1"]


def test_engine_wires_counters_to_uplink_imbalance_and_snapshots():
    cfg = EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("link", "fabric_balance"),
                       fabric_balance=FabricBalanceConfig(eval_s=60))
    e = Engine(cfg, switch_name={LEAF_AGENT: "leaf-0"}.get)
    e.set_inventory(fabric_inventory())
    out = []
    octets = [0, 0, 0, 0]
    for i, t in enumerate(range(0, 300_000, 10_000)):
        for k, u in enumerate((0.9, 0.01, 0.01, 0.01)):
            octets[k] += int(u * G * 10 / 8)
        batch = counters([dict(exporter=LEAF_AGENT, if_index=49 + k, t=t, seq=i + 1, speed=int(G), out_octets=o)
                          for k, o in enumerate(octets)])
        out += e.process_counters(batch)
        if i == 10:
            e2 = Engine(cfg, switch_name={LEAF_AGENT: "leaf-0"}.get)
            e2.set_inventory(fabric_inventory())
            e2.restore(e.snapshot())
            e = e2
    fired = [o.value for o in out if o.kind == "alert" and o.value["state"] == "firing"]
    assert [a["dedup_key"] for a in fired] == ["uplink_imbalance|leaf-0"]


# ---------------------------------------------------------------- job spread

def test_racks_needed():
    assert racks_needed(8, {"a": 8, "b": 8}) == 1
    assert racks_needed(9, {"a": 8, "b": 8, "c": 4}) == 2
    assert racks_needed(4, {}) == 0


def spread_cells(interner, pairs, samples=20):
    """Cells of job j's collective traffic: (src node, src rack, dst node, dst rack) per pair."""
    c = interner.code
    cols = {k: [] for k in ("sn", "dn", "sg", "dg", "sj", "dj", "cat", "sr", "dr")}
    for sn, sr, dn, dr in pairs:
        for k, v in zip(("sn", "dn", "sg", "dg", "sj", "dj", "cat", "sr", "dr"),
                        (sn, dn, "gpu", "gpu", "j", "j", "rocev2", sr, dr)):
            cols[k].append(c(v))
    cells = {k: np.array(v, np.int32) for k, v in cols.items()}
    n = len(pairs)
    cells.update(bytes_est=np.full(n, 10**9, np.int64), samples=np.full(n, samples, np.int64),
                 flow_records=np.ones(n, np.int64))
    return cells


RACKS = {f"r{k}": [f"r{k}-n{i}" for i in range(8)] for k in (1, 2, 3, 4)}


def run_spread(pairs, windows=5, jobs_of=None):
    det = JobSpreadDetector(JobSpreadConfig(persist_windows=3), 10_000, RACKS, jobs_of)
    interner = Interner([""])
    out = []
    for w in range(windows):
        out += det.on_window(w * 10_000, (w + 1) * 10_000, spread_cells(interner, pairs), interner)
    return out


def ring(placement):
    nodes = list(placement.items())
    return [(a, ra, b, rb) for (a, ra), (b, rb) in zip(nodes, nodes[1:] + nodes[:1])]


def test_job_packed_in_one_rack_stays_quiet():
    assert run_spread(ring({f"g{i}": "r1" for i in range(8)})) == []


def test_job_scattered_over_four_racks_fires():
    out = run_spread(ring({f"g{i}": f"r{i % 4 + 1}" for i in range(8)}))
    fired = [a for a in out if a["state"] == "firing"]
    assert [a["dedup_key"] for a in fired] == ["job_spread|j"]
    e = fired[0]["entities"]
    assert (e["racks"], e["racks_needed"], e["nodes"]) == ("4", "1", "8")
    assert float(e["cross_share"]) == 1.0 and float(e["low"]) > 0.9


def test_job_spread_over_racks_the_other_jobs_fill_is_not_spread():
    # 8 nodes over r1 and r2, where every rack has 4 nodes busy in another job: no rack could hold the job
    def jobs_of(nodes, t):
        return ["other" if int(n.rsplit("n", 1)[1]) < 4 else "" for n in nodes]

    placement = ring({f"g{i}": ("r1" if i % 2 else "r2") for i in range(8)})
    assert run_spread(placement, jobs_of=jobs_of) == []
    assert [a["state"] for a in run_spread(placement)] == ["firing"]  # with the racks free it fits one


def test_job_that_needs_two_racks_is_not_spread():
    # 12 nodes need two racks of 8: a ring over r1 and r2 is the placement it needs
    assert run_spread(ring({f"g{i}": ("r1" if i < 8 else "r2") for i in range(12)})) == []


def test_hosts_of_other_groups_in_a_rack_cannot_hold_ranks():
    # the mixed scenario's train-b: 4 GPU nodes in r1 and one in r2, where r1's other free hosts are a management
    # host and a load balancer. With groups the job needs two racks (quiet); counting every host it "fits" r1.
    racks = {"r1": ["a1", "a2", "a3", "a4", "mgmt", "lb"], "r2": ["b1", "stor", "ms"]}
    groups = {"a1": "gpu", "a2": "gpu", "a3": "gpu", "a4": "gpu", "b1": "gpu", "mgmt": "mgmt", "lb": "frontend",
              "stor": "storage", "ms": "model-store"}
    placement = ring({"a1": "r1", "a2": "r1", "a3": "r1", "a4": "r1", "b1": "r2"})

    def run(node_group):
        det = JobSpreadDetector(JobSpreadConfig(persist_windows=3), 10_000, racks, None, node_group)
        interner = Interner([""])
        return [a["state"] for w in range(5)
                for a in det.on_window(w * 10_000, (w + 1) * 10_000, spread_cells(interner, placement), interner)]

    assert run(groups) == []
    assert run(None) == ["firing"]
