"""FlowSignals and PortFacts: what the diagnosis rules read, with the sampling judged before a share counts."""

from __future__ import annotations

import numpy as np

from processors.logic.diagnosis.catalog import DiagnosisConfig
from processors.logic.diagnosis.signals import FlowSignals, PortFacts, cell_signals

CFG = DiagnosisConfig()


def test_ecn_capable_is_judged_only_with_enough_samples_and_clear_bounds():
    assert FlowSignals(samples=50, ect=50).ecn_capable(CFG) is None
    assert FlowSignals(samples=500, ect=480).ecn_capable(CFG) is True
    assert FlowSignals(samples=500, ect=10).ecn_capable(CFG) is False
    assert FlowSignals(samples=500, ect=250).ecn_capable(CFG) is None  # the bounds straddle 50 %
    assert FlowSignals(samples=500).ecn_capable(CFG) is None  # not counted (window cells)


def test_marks_and_cnps_present_absent_or_unknown():
    assert FlowSignals(samples=500, ce=3).marks(CFG) is True
    assert FlowSignals(samples=500, ce=0).marks(CFG) is False
    assert FlowSignals(samples=50, ce=0).marks(CFG) is None
    roce = dict(samples=5000, roce=5000, bth=5000)
    assert FlowSignals(ce=10, cnp=1, **roce).cnps(CFG) is True
    assert FlowSignals(ce=150, cnp=0, **roce).cnps(CFG) is False  # 3 sampled CNPs expected at 0.02 per mark
    assert FlowSignals(ce=100, cnp=0, **roce).cnps(CFG) is None
    assert FlowSignals(ce=150, cnp=0, samples=5000, roce=5000, bth=0).cnps(CFG) is None  # no BTH seen: cannot tell


def test_adding_keeps_the_unknown_ect_unknown_and_the_highest_rate():
    a = FlowSignals(samples=10, ect=5, sampling_rate=1000)
    a.add(FlowSignals(samples=10, sampling_rate=4096))
    assert a.samples == 20 and a.ect == -1 and a.sampling_rate == 4096
    assert FlowSignals.from_list(a.as_list()) == a


def test_cell_signals_turn_estimates_into_sampled_packets():
    cells = {"packets_est": np.array([40960, 4096]), "samples": np.array([10, 1]),
             "ecn_ce_packets_est": np.array([8192, 0]), "cnp_packets_est": np.array([0, 4096]),
             "bth_packets_est": np.array([40960, 4096]), "cat": np.array([7, 7])}
    s = cell_signals(cells, np.array([True, True]), rocev2=7)
    assert (s.samples, s.ce, s.cnp, s.roce, s.bth, s.sampling_rate) == (11, 2, 1, 11, 11, 4096)


def test_port_facts_from_node_state():
    st = {"port": "10.0.255.1|5", "switch": "tor1", "if_index": 5, "util": 0.2, "if_speed": 10**9,
          "configured_bps": 25e9, "out_discards_per_s": 0.0, "event": "oper_down", "errors_per_s": 0.0,
          "sampled_ms": 5, "interval_ms": 10_000, "flaps": 2, "samples_since": 1, "admin_up": False}
    p = PortFacts.of(st)
    assert p.name == "tor1/if5" and not p.physical  # shut down by an operator
    assert PortFacts.of(st | {"admin_up": True}).physical
    assert PortFacts.of(None) is None
