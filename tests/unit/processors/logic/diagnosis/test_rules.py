"""Each diagnosis class from its evidence, and its negative: the evidence missing or contradicted -> not that class."""

from __future__ import annotations

import math

import pytest

from processors.logic.diagnosis.catalog import (
    CC_NOT_REACTING, DCQCN_HANDLED, HOST, LINK_FAULT, MICROBURST, UNDETERMINED, VERDICTS, DiagnosisConfig,
)  # fmt: skip
from processors.logic.diagnosis.rules import diagnose_congestion, diagnose_incast, diagnose_link, diagnose_straggler
from processors.logic.diagnosis.signals import FlowSignals, PortFacts

CFG = DiagnosisConfig()
NOW = 1_000_000


def port(name="tor1/if5", discards=0.0, errors=0.0, event="", util=0.3, since=2, speed=25e9, conf=25e9, age_s=5,
         flaps=0, admin=True) -> PortFacts:
    return PortFacts(f"10.0.255.1|{name.split('if')[1]}", name, util, int(speed), conf, discards, errors, event,
                     NOW - age_s * 1000, 10_000, flaps, since, admin)


def tcp(samples=800, ect=0, ce=0) -> FlowSignals:
    return FlowSignals(samples=samples, ect=ect, ce=ce, sampling_rate=4096)


def roce(samples=2000, ce=300, cnp=40, bth=None) -> FlowSignals:
    return FlowSignals(samples=samples, ect=samples, ce=ce, cnp=cnp, roce=samples,
                       bth=samples if bth is None else bth, sampling_rate=4096)


def verdict(d: dict) -> str:
    assert d["verdict"] in VERDICTS
    assert (d["verdict"] == UNDETERMINED) == bool(d["missing"]), d
    assert d["next_step"] and d["cannot_tell"] and d["summary"]
    return d["verdict"]


def incast(flows, p):
    return verdict(diagnose_incast("gpu05", flows, p, CFG, NOW - 30_000))


# --------------------------------------------------------------------------- incast

def test_incast_with_drops_on_traffic_that_is_not_ecn_capable_is_a_microburst():
    d = diagnose_incast("gpu05", tcp(ect=0), port(discards=244_000), CFG, NOW - 30_000)
    assert verdict(d) == MICROBURST
    assert "tor1/if5" in d["next_step"] and "buffer" in d["next_step"]
    sig = {e["signal"]: e for e in d["evidence"]}
    assert sig["port_out_discards_per_s"]["value"] == 244_000 and sig["port_out_discards_per_s"]["source"] == "counters"
    assert sig["ecn_capable_share"]["value"] == 0 and sig["ecn_capable_share"]["high"] < 0.01  # Wilson bound, 800 samples
    assert "1:4096" in sig["ecn_capable_share"]["note"]
    assert "sub-millisecond" in d["cannot_tell"] and "10 s" in d["cannot_tell"]


def test_incast_with_drops_and_ce_marks_is_a_microburst_too():
    assert incast(tcp(ect=800, ce=40), port(discards=50_000)) == MICROBURST


def test_no_drops_is_not_a_microburst():
    assert incast(tcp(ect=0), port(discards=0.0)) == UNDETERMINED


def test_drops_not_yet_sampled_since_the_burst_began_are_not_guessed():
    d = diagnose_incast("gpu05", tcp(ect=0), port(discards=0.0, since=0), CFG, NOW - 30_000)
    assert verdict(d) == UNDETERMINED and "after the burst began" in d["missing"][0]


def test_a_port_never_sampled_is_undetermined():
    d = diagnose_incast("gpu05", tcp(), None, CFG, NOW - 30_000)
    assert verdict(d) == UNDETERMINED and "counter samples" in d["missing"][0]


def test_drops_of_ecn_capable_traffic_with_no_mark_is_congestion_control_not_reacting():
    d = diagnose_incast("gpu05", tcp(ect=800, ce=0), port(discards=80_000), CFG, NOW - 30_000)
    assert verdict(d) == CC_NOT_REACTING and "DCQCN" in d["next_step"]


@pytest.mark.parametrize("flows", [tcp(samples=50, ect=50), tcp(ect=400, ce=0)], ids=["too-few-samples", "half-ect"])
def test_drops_without_knowing_whether_ecn_was_in_play_is_undetermined(flows):
    assert incast(flows, port(discards=80_000)) == UNDETERMINED


def test_rocev2_marks_without_cnps_is_congestion_control_not_reacting():
    assert incast(roce(ce=300, cnp=0), port(discards=0.0)) == CC_NOT_REACTING  # 300 x 0.02 = 6 CNPs expected
    assert incast(roce(ce=300, cnp=0), port(discards=9_000)) == CC_NOT_REACTING
    assert incast(roce(ce=300, cnp=0), port(discards=0.0, since=0)) == CC_NOT_REACTING  # needs no counter sample


@pytest.mark.parametrize("flows, why", [
    (roce(ce=100, cnp=0), "more sampled CE marks"),        # 2 CNPs expected: absence not significant
    (roce(ce=300, cnp=0, bth=0), "BTH"),                   # RoCEv2 seen by NetFlow only: CNPs cannot show
])
def test_missing_cnps_that_could_not_have_been_seen_are_not_called_absent(flows, why):
    d = diagnose_incast("gpu05", flows, port(), CFG, NOW - 30_000)
    assert verdict(d) == UNDETERMINED and why in d["missing"][0]


def test_marks_answered_by_cnps_without_drops_is_handled_by_dcqcn():
    d = diagnose_incast("gpu05", roce(ce=300, cnp=40), port(discards=0.0), CFG, NOW - 30_000)
    assert verdict(d) == DCQCN_HANDLED
    sig = {e["signal"]: e for e in d["evidence"]}
    assert math.isclose(sig["cnp_per_ce"]["value"], 40 / 300) and sig["cnp_per_ce"]["low"] < 40 / 300 < sig["cnp_per_ce"]["high"]


def test_marks_and_cnps_with_drops_is_not_handled_by_dcqcn():
    assert incast(roce(ce=300, cnp=40), port(discards=5_000)) == MICROBURST


def test_marks_and_cnps_with_drops_unknown_is_not_handled_by_dcqcn():
    assert incast(roce(ce=300, cnp=40), port(since=0)) == UNDETERMINED


def test_incast_onto_a_port_with_a_link_fault_is_a_physical_fault():
    d = diagnose_incast("gpu05", tcp(), port(event="link_downgrade", speed=10e9, discards=9_000), CFG, NOW - 30_000)
    assert verdict(d) == LINK_FAULT and "cable or optic" in d["next_step"]


def test_discards_alone_are_not_a_physical_fault():
    assert incast(tcp(), port(event="discard_burst", discards=9_000)) == MICROBURST


def test_no_drops_no_marks_is_undetermined():
    d = diagnose_incast("gpu05", tcp(ect=0, ce=0), port(), CFG, NOW - 30_000)
    assert verdict(d) == UNDETERMINED and "congestion symptom" in d["missing"][0]


# --------------------------------------------------------------------------- congestion alert

def congestion(flows, ports):
    return verdict(diagnose_congestion("train-b", flows, ports, CFG))


def test_job_marks_with_cnps_and_receivers_not_dropping_is_handled_by_dcqcn():
    assert congestion(roce(), {"gpu07": port("tor1/if7")}) == DCQCN_HANDLED


def test_handled_needs_the_receivers_ports_sampled_and_not_dropping():
    assert congestion(roce(), {"gpu07": None}) == UNDETERMINED
    assert congestion(roce(), {"gpu07": port("tor1/if7", discards=900)}) == UNDETERMINED


def test_job_marks_without_cnps_on_rocev2_is_congestion_control_not_reacting():
    assert congestion(roce(cnp=0), {"gpu07": port("tor1/if7")}) == CC_NOT_REACTING
    assert congestion(roce(cnp=0), {"gpu07": None}) == CC_NOT_REACTING


def test_marks_on_tcp_or_rocev2_seen_without_bth_are_undetermined():
    tcp_job = FlowSignals(samples=2000, ce=300, sampling_rate=4096)
    d = diagnose_congestion("train-a", tcp_job, {"gpu03": port("tor1/if3")}, CFG)
    assert verdict(d) == UNDETERMINED and "not RoCEv2" in d["missing"][0]
    assert congestion(roce(cnp=0, bth=0), {"gpu07": port("tor1/if7")}) == UNDETERMINED


def test_marks_towards_a_downgraded_port_are_a_physical_fault():
    assert congestion(roce(), {"gpu07": port("tor1/if7", event="link_downgrade", speed=1e9)}) == LINK_FAULT


def test_cnps_without_visible_marks_are_undetermined():
    assert congestion(roce(ce=1, cnp=30), {"gpu07": port("tor1/if7")}) == UNDETERMINED


# --------------------------------------------------------------------------- straggler

def straggler(own, peer_port, flows=None, peer="gpu04", recv_ratio=1.0):
    d = diagnose_straggler("gpu03", "train-a", own, peer, peer_port, flows or tcp(samples=900), recv_ratio, NOW, CFG)
    return verdict(d), d


def test_a_node_sending_less_with_healthy_ports_and_no_marks_is_the_host():
    v, d = straggler(port("tor1/if3"), port("tor1/if4"))
    assert v == HOST and "nvidia-smi" in d["next_step"] and "NCCL" in d["next_step"]
    assert {"recv_ratio", "port_out_discards_per_s", "ecn_ce_share"} <= {e["signal"] for e in d["evidence"]}
    assert "not the GPU" in d["cannot_tell"]


@pytest.mark.parametrize("own, peer_port, peer, missing", [
    (None, port("tor1/if4"), "gpu04", "counter samples of gpu03's switch port"),
    (port("tor1/if3", age_s=600), port("tor1/if4"), "gpu04", "recent counter sample"),
    (port("tor1/if3"), None, "gpu04", "the port of gpu04"),
    (port("tor1/if3"), None, "", "the node gpu03 sends to"),
    (port("tor1/if3"), port("tor1/if4", discards=5_000), "gpu04", "dropped 5000 packets/s"),
    (port("tor1/if3", util=0.95), port("tor1/if4"), "gpu04", "runs at 95%"),
], ids=["own-unsampled", "own-stale", "peer-unsampled", "no-peer", "peer-drops", "own-full"])
def test_the_host_needs_its_port_and_peer_known_healthy(own, peer_port, peer, missing):
    v, d = straggler(own, peer_port, peer=peer)
    assert v == UNDETERMINED and missing in " ".join(d["missing"])


def test_a_node_whose_traffic_is_ce_marked_is_not_the_host():
    v, d = straggler(port("tor1/if3"), port("tor1/if4"), flows=FlowSignals(samples=900, ce=90, sampling_rate=4096))
    assert v == UNDETERMINED and "ECN-CE" in d["missing"][0]


@pytest.mark.parametrize("own_event, peer_event", [("link_downgrade", ""), ("", "error_burst"), ("oper_down", "")])
def test_a_straggler_behind_a_link_fault_is_a_physical_fault(own_event, peer_event):
    v, d = straggler(port("tor1/if3", event=own_event, speed=1e9 if own_event == "link_downgrade" else 25e9),
                     port("tor1/if4", event=peer_event, errors=150 if peer_event else 0))
    assert v == LINK_FAULT


def test_a_port_shut_down_by_the_operator_is_no_physical_fault():
    v, _d = straggler(port("tor1/if3", event="oper_down", admin=False), port("tor1/if4"))
    assert v != LINK_FAULT


# --------------------------------------------------------------------------- link events

def link(kind, errors=0.0, discards=0.0, speed=25_000_000_000, previous=25_000_000_000, p=None):
    rec = {"kind": kind, "switch": "tor2", "if_index": 2, "exporter": "10.0.255.2", "time_ms": NOW, "interval_ms": 10_000,
           "in_errors_per_s": errors, "out_errors_per_s": 0.0, "out_discards_per_s": discards, "if_speed": speed,
           "previous_if_speed": previous}
    return diagnose_link(rec, p, CFG)


@pytest.mark.parametrize("kind, kw", [("link_downgrade", {"speed": 1_000_000_000}), ("error_burst", {"errors": 150.0}),
                                      ("oper_down", {})])
def test_link_fault_events_are_physical_faults(kind, kw):
    d = link(kind, **kw)
    assert verdict(d) == LINK_FAULT and "tor2/if2" in d["next_step"]


def test_flapping_is_a_physical_fault_and_a_single_recovery_carries_none():
    assert verdict(link("oper_up", p=port("tor2/if2", flaps=3))) == LINK_FAULT
    assert link("oper_up", p=port("tor2/if2", flaps=1)) is None


def test_an_administratively_down_port_is_not_a_physical_fault():
    assert verdict(link("oper_down", p=port("tor2/if2", event="oper_down", admin=False))) == UNDETERMINED


def test_drops_without_errors_are_undetermined_and_with_errors_a_fault():
    d = link("discard_burst", discards=900.0)
    assert verdict(d) == UNDETERMINED and "no link errors" in d["missing"][0]
    assert verdict(link("discard_burst", discards=900.0, errors=50.0)) == LINK_FAULT


@pytest.mark.parametrize("kind", ["sample", "sustained_utilisation", "counter_reset", "speed_change"])
def test_other_link_records_carry_no_diagnosis(kind):
    assert link(kind) is None
