"""Smoke test of bench/ingest.py's pieces on a tiny bounded input, so the benchmark cannot rot.

Runs the fabricflow worker (null sink, no broker) for one short low-rate step;
nfacctd/nfcapd are never started here.
"""

from __future__ import annotations

import os
import socket
import struct
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and sched_setaffinity")

from bench import common  # noqa: E402
from bench import ingest as bi  # noqa: E402
from ingest.decode import TemplateCache, decode  # noqa: E402
from ingest.pipeline import concat_rows  # noqa: E402
from schemas.columns import empty_flows  # noqa: E402


@pytest.mark.parametrize("version", [9, 10])
def test_netflow_stream_decodes_to_requested_records(version):
    s = common.netflow_stream(version, records=25, pool=4)
    cache = TemplateCache()
    learned = sum(decode(t, "127.0.0.1", 0, cache).templates_learned for t in s.templates)
    assert learned >= 4  # softflowd's IPv4/IPv6 templates (+ options)
    for d in s.data:
        r = decode(d, "127.0.0.1", 0, cache)
        assert len(r.flows) == 25
        assert not r.problems
    assert s.records == [25] * 4
    assert len({bytes(f) for f in decode(s.data[0], "127.0.0.1", 0, cache).flows["src_addr"]}) > 1


def test_sflow_stream_has_flow_samples():
    s = common.sflow_stream(samples=7, pool=8)
    assert s.data and all(n > 0 for n in s.records)


def test_sender_paces_and_rewrites_sequence_numbers():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    s = common.netflow_stream(9, records=5, pool=3, v6_records=1)
    snd = common.Sender(s, rx.getsockname()[1])
    res = snd.blast(rate=2000, seconds=0.02)
    snd.close()
    got = [rx.recv(65535) for _ in range(res.datagrams)]
    rx.close()
    assert res.datagrams == 1 + 40 and res.records == 40 * 5
    seqs = [struct.unpack_from("!I", g, 12)[0] for g in got]
    assert seqs == list(range(len(got)))  # v9: one per export packet, templates included


def test_proc_helpers_see_this_process():
    assert common.cpu_seconds(os.getpid()) > 0
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    assert bi._udp_bound(port)
    assert common.udp_socket_stats(port) == (0, 0)
    rx.close()


def test_ladder_finds_the_threshold():
    def step(rate):
        clean = rate <= 10_000
        return bi.Step("netflow9", "fake", rate, rate, int(rate), int(rate) * 25, rate, rate * 25, 0,
                       0.0 if clean else 0.05, 1.0, clean)

    best, steps = bi.ladder(step, 4000, 1e6, 8, lambda s: None)
    assert 8000 <= best.target_rate <= 10_000
    assert len(steps) <= 8 and any(not s.clean for s in steps)


def test_concat_rows_matches_numpy_concatenate():
    parts = []
    for k in (3, 0, 5):
        f = empty_flows(k)
        f["bytes"] = np.arange(k) + 100 * k
        f["src_addr"][:, 15] = k
        parts.append(f)
    got = concat_rows(parts)
    want = np.concatenate(parts)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_peer_config_is_written_without_running_it(tmp_path):
    p = bi.PeerCollector("nfacctd", "netflow9", 39999, 0, tmp_path)
    argv = p._argv(tmp_path)
    assert argv[0] == "nfacctd"
    conf = (tmp_path / "pmacct.conf").read_text()
    assert "nfacctd_port: 39999" in conf and "nfacctd_ip: 127.0.0.1" in conf
    sf = bi.PeerCollector("nfacctd", "sflow", 39998, 0, tmp_path / "s")
    (tmp_path / "s").mkdir()
    assert sf._argv(tmp_path / "s")[0] == "sfacctd"


@pytest.mark.timeout(60)
def test_fabricflow_worker_one_step_null_sink(capsys):
    stream = common.netflow_stream(9, records=25, pool=8)
    coll = bi.FabricflowCollector(common.free_udp_port(), cpu=0, bootstrap=None, max_seconds=60)
    affinity = os.sched_getaffinity(0)
    coll.start()
    try:
        step = bi.run_step(coll, stream, bi.packets_per_datagram(stream), rate=1000, seconds=0.2, sender_cpu=0)
    finally:
        report = coll.stop()
        os.sched_setaffinity(0, affinity)  # run_step pins the caller (the sender)
    assert step.clean, step
    assert step.received_datagrams == step.sent_datagrams == 201
    assert step.received_records == step.sent_records == 200 * 25
    assert step.cpu_s > 0
    assert report["produced_records"] == 200 * 25
    bi.table({("netflow9", "fabricflow"): step, ("netflow9", "nfcapd"): step})
    out = capsys.readouterr().out
    assert "netflow9" in out and "1.00x" in out


@pytest.mark.parametrize("make", [lambda: common.netflow_stream(9, records=25, pool=4),
                                  lambda: common.netflow_stream(10, records=25, pool=4),
                                  lambda: common.sflow_stream(7, pool=8)], ids=["v9", "ipfix", "sflow"])
def test_sender_never_repeats_a_flow(make):
    """pmacct aggregates in memory: over several passes of the pool every flow must be new,
    with only the stamped source port and address bytes changed."""
    s = make()
    snd = common.Sender(s, 9)  # never sends here
    try:
        cache = TemplateCache()
        for t in s.templates:
            decode(t, "127.0.0.1", 0, cache)
        keys, total = set(), 0
        first = None
        n = len(snd.bufs)
        for _ in range(3):
            snd._stamp(0, n)
            flows = concat_rows([decode(bytes(b), "127.0.0.1", 0, cache).flows for b in snd.bufs])
            if first is None:
                first = flows
            else:
                for c in flows.dtype.names:
                    if c not in ("src_addr", "src_port"):
                        assert np.array_equal(flows[c], first[c]), c
            # VXLAN rows show the inner frame; the outer one (what pmacct aggregates on) is stamped
            flows = flows[flows["vxlan_vni"] < 0]
            keys |= {(bytes(a), int(p), bytes(d), int(q)) for a, p, d, q in
                     zip(flows["src_addr"], flows["src_port"], flows["dst_addr"], flows["dst_port"])}
            total += len(flows)
        assert total > 2 * sum(s.records) and len(keys) == total
    finally:
        snd.close()
