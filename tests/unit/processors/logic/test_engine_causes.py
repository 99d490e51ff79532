"""Link evidence and cause links: ports named by node and job, a port slow from the start, discard bursts,
straggler explained_by, incast discards and the live incast capacity."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.detectors.linkhealth import LinkHealthConfig, LinkHealthDetector
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import EXPORTER, G25, NODES, PORTS, counters, flows, port_info


def detector(**cfg):
    return LinkHealthDetector(LinkHealthConfig(**cfg), switch_name=lambda e: "tor-1", port_info=port_info,
                              node_job=lambda node, t: "j" if t < 100_000 else "")


def test_link_records_name_the_node_and_its_job():
    out = detector().process(counters([dict(if_index=2, t=0), dict(if_index=2, t=10_000, seq=2),
                                       dict(if_index=9, t=0), dict(if_index=9, t=10_000, seq=2)]))
    assert [(d["if_index"], d["node"], d["job"]) for d in out] == [(2, "n1", "j"), (9, "", "")]


def test_a_port_already_slow_at_the_first_sample_is_a_downgrade():
    det = detector()
    out = det.process(counters([dict(if_index=3, t=5_000, speed=1_000_000_000),
                                dict(if_index=4, t=5_000, speed=G25)]))
    assert out == [{
        "time_ms": 5_000, "interval_ms": 0, "kind": "link_downgrade", "exporter": EXPORTER, "switch": "tor-1",
        "if_index": 3, "if_speed": 1_000_000_000, "previous_if_speed": G25, "util_in": 0.0, "util_out": 0.0,
        "in_errors_per_s": 0.0, "out_errors_per_s": 0.0, "in_discards_per_s": 0.0, "out_discards_per_s": 0.0,
        "oper_up": True, "detail": f"if_speed 1000000000 bps below the configured {G25} bps at the first sample",
        "node": "n2", "job": "j", "diagnosis": None,  # the detector alone: the engine adds the diagnosis
    }]  # fmt: skip
    # still slow later: no second event, but the port stays faulty for the other detectors
    later = det.process(counters([dict(if_index=3, t=15_000, seq=2, speed=1_000_000_000)]))
    assert [d["kind"] for d in later] == ["sample"]
    assert det.node_state("n2", 900_000)["event"] == "link_downgrade"
    assert det.node_state("n3", 15_000)["event"] == ""


def test_a_named_port_already_down_at_the_first_sample_is_oper_down():
    """A link broken before telemetry began is flagged at its first sample, as a later oper_down is; a port the
    inventory does not name (admin up, no cable) and an admin-down port are not judged."""
    det = detector(emit_samples=False)
    out = det.process(counters([dict(if_index=3, t=5_000, oper=False), dict(if_index=9, t=5_000, oper=False),
                                dict(if_index=4, t=5_000, oper=False, admin=False), dict(if_index=2, t=5_000)]))
    assert out == [{
        "time_ms": 5_000, "interval_ms": 0, "kind": "oper_down", "exporter": EXPORTER, "switch": "tor-1",
        "if_index": 3, "if_speed": G25, "previous_if_speed": G25, "util_in": 0.0, "util_out": 0.0,
        "in_errors_per_s": 0.0, "out_errors_per_s": 0.0, "in_discards_per_s": 0.0, "out_discards_per_s": 0.0,
        "oper_up": False, "detail": "oper status down at the first sample (admin up)",
        "node": "n2", "job": "j", "diagnosis": None,
    }]  # fmt: skip
    assert det.node_state("n2", 6_000)["event"] == "oper_down"
    # still down at the next sample: no second event; back up: oper_up
    assert det.process(counters([dict(if_index=3, t=15_000, seq=2, oper=False)])) == []
    assert [d["kind"] for d in det.process(counters([dict(if_index=3, t=25_000, seq=3)]))] == ["oper_up"]


def test_discard_burst_once_per_burst_and_the_hold_after_it():
    det = detector(discard_burst_per_s=100)
    out = det.process(counters([
        dict(if_index=1, t=0, out_discards=0),
        dict(if_index=1, t=10_000, seq=2, out_discards=5_000),  # 500/s: burst starts
        dict(if_index=1, t=20_000, seq=3, out_discards=10_000),  # still 500/s: same burst
        dict(if_index=1, t=30_000, seq=4, out_discards=10_000),  # 0/s: over
    ]))
    assert [(d["time_ms"], d["kind"]) for d in out if d["kind"] != "sample"] == [(10_000, "discard_burst")]
    burst = [d for d in out if d["kind"] == "discard_burst"][0]
    assert (burst["detail"], burst["out_discards_per_s"], burst["node"]) == ("500.0 discards/s", 500.0, "n0")
    st = det.node_state("n0", 30_000)
    assert (st["port"], st["event"], st["out_discards_per_s"]) == (f"{EXPORTER}|1", "discard_burst", 0.0)
    assert det.node_state("n0", 20_000 + 60_000)["event"] == "discard_burst"  # last seen bursting at 20 s + hold
    assert det.node_state("n0", 20_000 + 60_001)["event"] == ""
    assert det.node_state("nobody", 0) is None


def test_snapshot_keeps_the_port_state():
    det = detector()
    det.process(counters([dict(if_index=3, t=5_000, speed=1_000_000_000)]))
    again = detector()
    again.restore(det.snapshot())
    assert again.node_state("n2", 5_000) == det.node_state("n2", 5_000)
    assert again.node_state("n2", 5_000)["event"] == "link_downgrade"


def straggler_engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("straggler", "link")),
                  port_info=port_info)


def ring(windows, slow=()):
    recs = []
    for w in range(windows):
        for i, n in enumerate(NODES):
            recs.append(dict(src=n, dst=NODES[(i + 1) % 5], t=w * 10_000 + 100,
                             bytes=100_000 if n in slow else 1_000_000, job="j"))
    return flows(recs)


def flagged(out):
    return {(o.value["node"], o.value["explained_by"]) for o in out if o.kind == "straggler" and o.value["straggler"]}


def test_straggler_carries_the_link_event_of_its_own_port_or_its_successors():
    e = straggler_engine()
    # n3's port runs at 1G (configured 25G): n3 itself and its ring predecessor n2 (which sends into it) are slow
    e.process_counters(counters([dict(if_index=i, t=0, speed=1_000_000_000 if i == 4 else G25) for i in PORTS]))
    out = e.process_flows(ring(4, slow={"n2", "n3"})) + e.flush()
    assert flagged(out) == {("n2", f"{EXPORTER}|4"), ("n3", f"{EXPORTER}|4")}


def test_straggler_without_a_link_event_has_no_explanation():
    e = straggler_engine()
    e.process_counters(counters([dict(if_index=i, t=0) for i in PORTS]))
    out = e.process_flows(ring(4, slow={"n2"})) + e.flush()
    assert flagged(out) == {("n2", "")}


def test_incast_carries_the_destination_port_discards_and_uses_its_live_speed():
    e = Engine(EngineConfig(enabled=("incast", "link")), capacity_bps={"n0": 100e9}, port_info=port_info)
    e.process_counters(counters([dict(if_index=1, t=0, speed=10_000_000_000),
                                 dict(if_index=1, t=1_000, seq=2, speed=10_000_000_000, out_discards=2_000)]))
    recs = [dict(src=f"s{k}", dst="n0", t=2_000 + 100, bytes=250_000_000, packets=1000) for k in range(4)]
    out = [o.value for o in e.process_flows(flows(recs)) + e.flush() if o.kind == "incast"]
    assert out[0]["state"] == "open"
    # 4 x 2 Gb/s against the port's live 10G (the inventory said 100G: 8 % would not open)
    assert (out[0]["capacity_bps"], out[0]["fraction"]) == (10e9, 0.8)
    assert (out[0]["dst_port"], out[0]["dst_out_discards_per_s"]) == (f"{EXPORTER}|1", 2000.0)


def test_incast_discards_are_the_worst_sampled_since_the_event_opened():
    from processors.logic.detectors.incast import IncastConfig

    e = Engine(EngineConfig(incast=IncastConfig(lateness_ms=0), enabled=("incast", "link")),
               capacity_bps={"n0": 10e9}, port_info=port_info)
    e.process_counters(counters([dict(if_index=1, t=0, speed=10_000_000_000)]))

    def burst(t):
        return [dict(src=f"s{k}", dst="n0", t=t + 100, bytes=250_000_000, packets=1000) for k in range(4)]

    out = e.process_flows(flows(burst(1_000) + [dict(src="x", dst="y", t=2_050, bytes=1)]))  # closes [1 s, 2 s)
    # the port's next samples cover the burst: 6000 drops in 2 s, then 1000 in 1 s
    e.process_counters(counters([dict(if_index=1, t=2_000, seq=2, speed=10_000_000_000, out_discards=6_000)]))
    e.process_counters(counters([dict(if_index=1, t=3_000, seq=3, speed=10_000_000_000, out_discards=7_000)]))
    out += e.process_flows(flows(burst(2_000) + [dict(src="x", dst="y", t=3_050, bytes=1)])) + e.flush()
    got = [(o.value["state"], o.value["dst_out_discards_per_s"]) for o in out if o.kind == "incast"]
    assert got == [("open", 0.0), ("update", 3000.0), ("close", 3000.0)]
    assert e.incast_starts == {}
