"""devtools/simulator/marks.py and the scenario's changes: the training jobs' step and checkpoint marks in the
scenario's time model, the change lines, and where they go (a marks= target, a capture, nowhere else)."""

from __future__ import annotations

import json

import pytest
import yaml

from devtools.simulator.cli import run_simulate
from devtools.simulator.engine import Simulation
from devtools.simulator.marks import chunk_marks
from devtools.simulator.model import ScenarioError, load_scenario, scenario_from_dict
from ingest.pcapread import read_udp
from tests.support.fixtures_path import REPO
from tests.support.simulator import drain, udp_receiver


def test_steps_checkpoints_and_changes_in_scenario_time():
    scen = load_scenario(REPO / "scenarios" / "tuning.yaml")
    from devtools.simulator.faults import FaultEffects

    start = scen.start_ms
    marks = [(t - start, json.loads(d), node) for t0 in range(0, 400_000, 1000)
             for t, d, node in chunk_marks(scen, start, t0, t0 + 1000, FaultEffects(scen))]
    a = [(t, m) for t, m, _n in marks if m.get("job") == "train-a" and m.get("event", "").startswith("step")]
    assert a[:3] == [(0, {"job": "train-a", "node": "gpu01", "rank": 0, "event": "step_start", "step": 0}),
                     (2000, {"job": "train-a", "node": "gpu01", "rank": 0, "event": "step_end", "step": 0}),
                     (2000, {"job": "train-a", "node": "gpu01", "rank": 0, "event": "step_start", "step": 1})]
    b_starts = [t for t, m, _n in marks if m.get("job") == "train-b" and m.get("event") == "step_start"]
    assert b_starts[:2] == [300, 2800]  # train-b starts at 0.3 s, one step every 2.5 s
    ck = [(t, m["event"]) for t, m, _n in marks if m.get("job") == "train-a" and "checkpoint" in m.get("event", "")]
    assert ck[:2] == [(120_000, "checkpoint_start"), (135_000, "checkpoint_end")]
    changes = [(t, m, n) for t, m, n in marks if m.get("kind") == "change"]
    assert len(changes) == 1 and changes[0][0] == 200_000 and changes[0][1]["job"] == "train-b"
    assert changes[0][2] == "gpu05"  # sent from the job's first node


def test_no_send_writes_marks_into_the_capture_from_distinct_sources(tmp_path):
    out = []
    assert run_simulate("tuning", [], duration_s=20, pcap_out=str(tmp_path / "c.pcap"), echo=out.append) == 0
    pkts = list(read_udp(str(tmp_path / "c.pcap")))
    marks = [p for p in pkts if p.payload[:1] == b"{"]
    assert marks and {p.dst_port for p in marks} == {6344}
    assert len({p.src_ip for p in pkts}) >= 4  # two ToR agents, two flow exporters, the jobs' rank 0 nodes
    assert run_simulate("tuning", [], duration_s=5, echo=out.append) == 2
    assert "writes nothing" in out[-1]


def test_marks_go_only_to_a_marks_target():
    with udp_receiver(3) as (rx, port):
        rc = run_simulate("tuning", {"marks": f"127.0.0.1:{port}", "all": "127.0.0.1:9"}, speed=0, duration_s=6,
                          max_pps=100_000, echo=lambda *_: None)
        got = drain(rx, 4096)
    assert rc in (0, 1) and got and all(g[:1] == b"{" for g in got)  # port 9 (discard) may refuse: rc 1
    kinds = {"sflow", "netflow9", "ipfix"}
    assert not any(d[1] == "marks" for d in Simulation("tuning", duration_s=5, kinds=kinds).run())


@pytest.mark.parametrize("change,msg", [({"text": "x"}, "at_s"), ({"at_s": 1}, "text"),
                                        ({"at_s": 1, "text": "x", "job": "nope"}, "unknown job"),
                                        ({"at_s": 1, "text": "x", "bogus": 1}, "unknown keys")])
def test_bad_changes_are_scenario_errors(change, msg):
    doc = yaml.safe_load((REPO / "scenarios" / "healthy.yaml").read_text())
    doc["simulation"]["changes"] = [change]
    with pytest.raises(ScenarioError, match=msg):
        scenario_from_dict(doc)
