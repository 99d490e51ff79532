"""Independent validation of our encoders with tshark's sFlow and NetFlow/IPFIX dissectors."""

import json
import shutil
import subprocess
from collections import Counter

import pytest

from devtools.simulator import Simulation
from devtools.simulator.exporters.pcap import write_pcap

from tests.support.simulator import small
from tests.support.wire import parse_sflow

pytestmark = pytest.mark.exporters
PORTS = {"sflow": 6343, "netflow9": 2055, "ipfix": 4739}


def values(obj, key, out=None):
    """Every value of ``key`` anywhere in a tshark JSON tree."""
    out = [] if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                out.extend(v if isinstance(v, list) else [v])
            else:
                values(v, key, out)
    elif isinstance(obj, list):
        for v in obj:
            values(v, key, out)
    return out


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    sim = Simulation(small(), duration_s=12)
    dgs = list(sim.run())
    pcap = tmp_path_factory.mktemp("sim") / "sim.pcap"
    write_pcap(pcap, dgs, ports=PORTS)
    cmd = ["tshark", "-n", "-r", str(pcap), "-T", "json", "--no-duplicate-keys",
           "-d", "udp.port==6343,sflow", "-d", "udp.port==2055,cflow", "-d", "udp.port==4739,cflow"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    packets = json.loads(proc.stdout)
    return sim, dgs, packets


def test_tshark_decodes_every_datagram_cleanly(decoded):
    _, dgs, packets = decoded
    assert len(packets) == len(dgs)
    assert not values(packets, "_ws.malformed")
    assert not values(packets, "_ws.expert.message"), Counter(values(packets, "_ws.expert.message"))
    kinds = Counter()
    for p in packets:
        layers = p["_source"]["layers"]
        kinds["sflow" if "sflow" in layers else "cflow" if "cflow" in layers else "other"] += 1
    assert kinds["other"] == 0 and kinds["cflow"] == sum(1 for d in dgs if d[1] != "sflow")


def test_tshark_sflow_matches_what_we_encoded(decoded):
    _, dgs, packets = decoded
    ours = [parse_sflow(d) for _, k, d in dgs if k == "sflow"]
    sflow = [p["_source"]["layers"]["sflow"] for p in packets if "sflow" in p["_source"]["layers"]]
    assert sorted(int(v) for v in values(sflow, "sflow_245.header.frame_length")) == sorted(
        f["ip_len"] + 18 for p in ours for f in p["flows"]
    )
    # the IP total length inside each sampled header is the real packet size
    inner_ip_len = sorted(int(v) for v in values(sflow, "ip.len"))
    assert inner_ip_len == sorted(f["ip_len"] for p in ours for f in p["flows"])
    assert set(values(sflow, "sflow.flow_sample.sampling_rate")) == {"512"}
    assert {int(v) for v in values(sflow, "sflow_245.ifspeed")} == {10**10, 25 * 10**9, 100 * 10**9}
    assert len(values(sflow, "sflow_245.ifinoct")) == sum(len(p["counters"]) for p in ours)
    assert {v for v in values(sflow, "sflow_245.agent")} == {"10.9.255.1", "10.9.255.2"}


@pytest.mark.parametrize("kind", ["netflow9", "ipfix"])
def test_tshark_flow_bytes_equal_truth(decoded, kind):
    sim, _, packets = decoded
    port = str(PORTS[kind])
    cflow = [p["_source"]["layers"]["cflow"] for p in packets if p["_source"]["layers"]["udp"]["udp.dstport"] == port]
    assert cflow
    octets = sum(int(v) for v in values(cflow, "cflow.octets"))
    assert octets == sim.truth.total_bytes  # every flow observed, unsampled
    assert set(values(cflow, "cflow.sampling_interval")) == {"1"}
    assert set(values(cflow, "cflow.flow_active_timeout")) == {"10"}
