"""The engine hands each incast, straggler, link and congestion output its diagnosis (processors/logic/diagnosis/feed.py
and the detectors' hooks), from the same counters and flows the detectors saw."""

from __future__ import annotations

from processors.logic.diagnosis.catalog import DCQCN_HANDLED, HOST, LINK_FAULT, MICROBURST, UNDETERMINED
from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.tumbling import WindowConfig
from tests.support import flows as support
from tests.support.flows import G25, NODES, PORTS, counters, flows


def port_info(exporter, if_index):
    return support.port_info(exporter, if_index, {1: 10e9})  # n0 is a 10G node


def healthy_ports(t, seq, over=None):
    """One counter sample per port at time t (``over``: if_index -> extra fields); n0's port runs at 10G."""
    over = over or {}
    return counters([dict(if_index=i, t=t, seq=seq, speed=10_000_000_000 if i == 1 else G25, **over.get(i, {}))
                     for i in PORTS])


def test_incast_close_names_the_microburst_from_the_ports_drops():
    e = Engine(EngineConfig(enabled=("incast", "link", "diagnosis")), capacity_bps={"n0": 10e9}, port_info=port_info)
    e.process_counters(healthy_ports(0, 1))
    out = []
    for w in range(3):  # bursts of 4 sources at 3 Gb/s into n0 (1 s windows), TCP, not ECN-capable
        t = 2_000 + w * 1_000
        out += e.process_flows(flows([dict(src=f"s{k}", dst="n0", t=t + k, bytes=375_000, packets=250, rate=1000,
                                           ip_protocol=6, dst_port=5000, category="other") for k in range(4)]))
    out += e.process_flows(flows([dict(src="x", dst="y", t=7_500, bytes=1, category="other")]))  # closes the bursts
    # the port's next counter sample counts the drops of the burst
    e.process_counters(healthy_ports(10_000, 2, {1: dict(out_discards=2_000_000)}))
    out += e.flush()
    inc = [o.value for o in out if o.kind == "incast"]
    assert inc[0]["state"] == "open" and inc[0]["diagnosis"]["verdict"] == UNDETERMINED  # drops not sampled yet
    assert inc[-1]["state"] == "close" and inc[-1]["diagnosis"]["verdict"] == MICROBURST
    assert "_signals" not in inc[-1]


def test_incast_with_marks_and_cnps_back_and_no_drops_is_handled_by_dcqcn():
    e = Engine(EngineConfig(enabled=("incast", "link", "diagnosis")), capacity_bps={"n0": 10e9}, port_info=port_info)
    e.process_counters(healthy_ports(0, 1))
    e.process_counters(healthy_ports(2_500, 2))  # sampled after the burst began: no drops
    recs = []
    for k in range(4):
        common = dict(job="j", rate=1000, ip_protocol=17, dst_port=4791, category="rocev2", roce_opcode=0x0A)
        recs.append(dict(src=f"n{k + 1}", dst="n0", t=2_000 + k, bytes=300_000, packets=160, tos=0x6A, **common))
        recs.append(dict(src=f"n{k + 1}", dst="n0", t=2_000 + k, bytes=75_000, packets=40, tos=0x6B, **common))  # CE
        recs.append(dict(src="n0", dst=f"n{k + 1}", t=2_100 + k, bytes=600, packets=10, tos=0xC0,
                         **(common | {"roce_opcode": 0x81})))  # CNPs back, inside the job
    out = e.process_flows(flows(recs)) + e.flush()
    inc = [o.value for o in out if o.kind == "incast"]
    assert inc[0]["diagnosis"]["verdict"] == DCQCN_HANDLED, inc[0]["diagnosis"]


def test_link_events_carry_their_diagnosis_and_samples_none():
    e = Engine(EngineConfig(enabled=("link", "diagnosis")), port_info=port_info)
    out = e.process_counters(counters([dict(if_index=2, t=0), dict(if_index=2, t=10_000, seq=2, speed=1_000_000_000,
                                                                    in_errors=2_000)]))
    by_kind = {o.value["kind"]: o.value["diagnosis"] for o in out}
    assert by_kind["sample"] is None
    assert by_kind["link_downgrade"]["verdict"] == LINK_FAULT and by_kind["error_burst"]["verdict"] == LINK_FAULT


def test_link_diagnosis_is_the_same_however_counter_messages_are_batched():
    samples = [dict(if_index=2, t=t, seq=i + 1, oper=(i % 2 == 0)) for i, t in enumerate(range(0, 80_000, 10_000))]
    one = Engine(EngineConfig(enabled=("link", "diagnosis")), port_info=port_info)
    together = [o.value for o in one.process_counters(counters(samples), message=list(range(len(samples))))]
    apart = Engine(EngineConfig(enabled=("link", "diagnosis")), port_info=port_info)
    alone = [o.value for s in samples for o in apart.process_counters(counters([s]))]
    assert together == alone
    ups = [d["diagnosis"] for d in alone if d["kind"] == "oper_up"]
    assert ups[0] is None and ups[-1]["verdict"] == LINK_FAULT  # the first recovery ends one outage; then it flaps


def ring(windows, slow=(), start=0):
    return flows([dict(src=n, dst=NODES[(i + 1) % 5], t=start + w * 10_000 + 100,
                       bytes=100_000 if n in slow else 1_000_000, job="j") for w in range(windows)
                  for i, n in enumerate(NODES)])


def straggler_engine(**kw):
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0),
                               enabled=("straggler", "link", "diagnosis"), **kw), port_info=port_info)


def flagged(out):
    return {o.value["node"]: o.value["diagnosis"] for o in out if o.kind == "straggler" and o.value["straggler"]}


def test_a_straggler_with_healthy_ports_is_the_host_and_others_carry_no_diagnosis():
    e = straggler_engine()
    e.process_counters(healthy_ports(0, 1))
    e.process_counters(healthy_ports(20_000, 2))
    out = e.process_flows(ring(4, slow={"n2"})) + e.flush()
    got = flagged(out)
    assert set(got) == {"n2"} and got["n2"]["verdict"] == HOST
    assert all(o.value["diagnosis"] is None for o in out if o.kind == "straggler" and not o.value["straggler"])


def test_a_straggler_behind_a_downgraded_successor_port_is_a_physical_fault():
    e = straggler_engine()
    e.process_counters(counters([dict(if_index=i, t=0, speed=1_000_000_000 if i == 4 else G25) for i in PORTS]))
    got = flagged(e.process_flows(ring(4, slow={"n2", "n3"})) + e.flush())
    assert got["n2"]["verdict"] == LINK_FAULT and got["n3"]["verdict"] == LINK_FAULT


def test_without_diagnosis_enabled_outputs_carry_none():
    e = Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=0), enabled=("straggler", "link")),
               port_info=port_info)
    e.process_counters(healthy_ports(0, 1))
    assert flagged(e.process_flows(ring(4, slow={"n2"})) + e.flush()) == {"n2": None}


def test_the_snapshot_keeps_what_the_diagnosis_reads():
    e = straggler_engine()
    e.process_counters(counters([dict(if_index=2, t=t, seq=i + 1, oper=(i % 2 == 0)) for i, t in
                                 enumerate(range(0, 50_000, 10_000))]))
    again = straggler_engine()
    again.restore_bytes(e.snapshot_bytes())
    assert again.link.node_state("n1", 50_000) == e.link.node_state("n1", 50_000)
    assert again.link.node_state("n1", 50_000)["flaps"] == 2
