"""Targets (loopback only), pacing and rate bounds, real loopback UDP, run_simulate."""


import pytest
import yaml

from devtools.simulator.cli import run_simulate
from devtools.simulator.sender import TargetError, UdpSender, pace_and_send, parse_targets

from tests.support.clock import FakeClock
from tests.support.simulator import small_doc, udp_receiver


def test_targets_default_and_forms():
    t = parse_targets(None)
    assert t == {"sflow": ("127.0.0.1", 6343), "netflow9": ("127.0.0.1", 2055), "ipfix": ("127.0.0.1", 4739)}
    t = parse_targets(["127.0.0.1:9999", "ipfix=[::1]:4740"])
    assert t["sflow"] == ("127.0.0.1", 9999) and t["ipfix"] == ("::1", 4740)
    assert parse_targets({"all": "localhost:1234"})["netflow9"] == ("localhost", 1234)


@pytest.mark.parametrize("target", ["10.0.0.1:6343", "192.168.1.1:2055", "example.org:6343"])
def test_non_loopback_refused_unless_allowed(target):
    with pytest.raises(TargetError, match="loopback"):
        parse_targets([target])
    assert parse_targets([target], allow_remote=True)["sflow"][1] in (6343, 2055)


def test_bad_target_forms():
    for bad in (["nohost"], ["flow=127.0.0.1:1"], ["127.0.0.1:99999"]):
        with pytest.raises(TargetError):
            parse_targets(bad)




def test_pacing_follows_event_time_over_speed():
    fc = FakeClock(100.0)
    sent_at = []
    dgs = [(1_000_000 + 1000 * i, "sflow", b"x") for i in range(10)]
    st = pace_and_send(dgs, lambda k, d, e: sent_at.append(fc.t), speed=10, max_pps=0, clock=fc.clock, sleep=fc.sleep)
    assert st.sent == 10
    gaps = [b - a for a, b in zip(sent_at, sent_at[1:])]
    assert all(g == pytest.approx(0.1, abs=0.002) for g in gaps)


def test_max_pps_and_total_bounds():
    fc = FakeClock(100.0)
    sent_at = []
    dgs = [(0, "sflow", b"x")] * 50  # all due at once
    st = pace_and_send(dgs, lambda k, d, e: sent_at.append(fc.t), speed=1, max_pps=100, max_datagrams=40,
                       clock=fc.clock, sleep=fc.sleep)  # fmt: skip
    assert st.sent == 40
    span = sent_at[-1] - sent_at[0]
    assert span >= 39 / 100 - 0.002 * 39


def test_real_loopback_udp_roundtrip():
    with udp_receiver(5) as (rx, port):
        sender = UdpSender(parse_targets([f"127.0.0.1:{port}"]))
        payloads = [bytes([i]) * (10 + i) for i in range(5)]
        st = pace_and_send([(i, "sflow", p) for i, p in enumerate(payloads)], sender.send, speed=0, max_pps=1000)
        sender.close()
        got = [rx.recvfrom(2048)[0] for _ in payloads]
    assert st.sent == 5 and got == payloads


def test_run_simulate_sends_to_loopback_and_writes_truth(tmp_path):
    scen = tmp_path / "small.yaml"
    scen.write_text(yaml.safe_dump(small_doc()))
    out = []
    with udp_receiver(5) as (rx, port):
        rc = run_simulate(str(scen), [f"127.0.0.1:{port}"], speed=0, duration_s=3, seed=1,
                          truth_out=str(tmp_path / "t.jsonl"), start_ms=None, max_datagrams=20, echo=out.append)  # fmt: skip
        got = [rx.recvfrom(4096)[0] for _ in range(20)]
    assert rc == 0 and len(got) == 20
    assert (tmp_path / "t.jsonl").read_text().count('"type": "window"') == 1


def test_run_simulate_refuses_remote_and_bad_scenario(tmp_path):
    out = []
    assert run_simulate("healthy", ["10.1.2.3:6343"], 1.0, 1, None, None, None, echo=out.append) == 2
    assert "loopback" in out[-1]
    assert run_simulate(str(tmp_path / "missing.yaml"), None, 1.0, 1, None, None, None, echo=out.append) == 2


def test_run_simulate_pcap_only(tmp_path):
    out = []
    rc = run_simulate("healthy", [], 0, 2, 1, str(tmp_path / "t.jsonl"), None, pcap_out=str(tmp_path / "h.pcap"), echo=out.append)
    assert rc == 0 and (tmp_path / "h.pcap").stat().st_size > 1000
