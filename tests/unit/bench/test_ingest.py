"""Smoke test of bench/ingest.py's pieces on a tiny bounded input, so the benchmark cannot rot.

Runs the fabricflow worker (null sink, no broker) for one short low-rate step;
nfacctd/nfcapd/goflow2 are never started here (tests/integration/test_ingest_bench_peers.py reads
topics back and runs goflow2 when it is there).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and sched_setaffinity")

from devtools import loadgen as common  # noqa: E402
from bench import ingest as bi  # noqa: E402
from bench import ingest_peers as peers  # noqa: E402
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
    assert bi.udp_bound(port)
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


def test_port_range_hands_out_free_ports_in_turn():
    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind(("127.0.0.1", 0))
    lo = busy.getsockname()[1]
    try:
        common.use_port_range(f"{lo}-{lo + 3}")
        got = [common.free_udp_port() for _ in range(3)]
        assert lo not in got and all(lo < p <= lo + 3 for p in got)
        assert len(set(got)) == 3  # in turn, not the same free port again
        assert lo <= common.free_tcp_port() <= lo + 3
    finally:
        common._PORTS["range"] = None
        busy.close()
    for bad in ("43500", "9-10", "43999-43500", "a-b"):
        with pytest.raises(ValueError):
            common.use_port_range(bad)


def test_goflow2_argv_binds_loopback_and_publishes_protobuf():
    argv = peers.goflow2_argv("/x/goflow2", "ipfix", 43501, 43502, "127.0.0.1:43510", "topic-a")
    opts = dict(zip(argv[1::2], argv[2::2]))
    assert opts["-listen"] == "netflow://127.0.0.1:43501"
    assert opts["-addr"] == "127.0.0.1:43502"  # its default is :8080 on every address
    assert (opts["-transport"], opts["-format"]) == ("kafka", "bin")
    assert opts["-transport.kafka.brokers"] == "127.0.0.1:43510" and opts["-transport.kafka.topic"] == "topic-a"
    sflow = dict(zip(*[iter(peers.goflow2_argv("g", "sflow", 1, 2, "b", "t")[1:])] * 2))
    assert sflow["-listen"] == "sflow://127.0.0.1:1"


def test_goflow2_binary_from_flag_then_env(tmp_path, monkeypatch):
    exe = tmp_path / "goflow2"
    exe.write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FF_GOFLOW2", raising=False)
    assert peers.goflow2_binary(None) is None
    assert peers.goflow2_binary(str(exe)) is None  # not executable
    exe.chmod(0o755)
    assert peers.goflow2_binary(str(exe)) == str(exe)
    monkeypatch.setenv("FF_GOFLOW2", str(exe))
    assert peers.goflow2_binary(None) == str(exe)
    assert peers.goflow2_binary(str(tmp_path / "missing")) is None


def test_one_delimited_checks_the_length_prefix():
    body = bytes(range(200))
    msg = bytes([0xC8, 0x01]) + body  # varint 200
    assert peers.one_delimited(msg)
    assert not peers.one_delimited(msg + b"\x00")  # two messages or trailing bytes
    assert not peers.one_delimited(msg[:-1])
    assert not peers.one_delimited(b"") and not peers.one_delimited(b"\x80")
    assert peers.one_delimited(b"\x00")


def test_set_rcvbuf_reaches_another_process_socket():
    code = ("import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True); "
            "sys.stdin.readline(); print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), flush=True)")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port, before = map(int, child.stdout.readline().split())
        want = 2 * before  # more than the default; within rmem_max when not root
        granted = peers.set_rcvbuf(child.pid, port, want)
        child.stdin.write("\n")
        child.stdin.flush()
        after = int(child.stdout.readline())
    finally:
        child.kill()
        child.wait(5)
    assert granted == [after // 2] and after > before
    with pytest.raises(RuntimeError, match="no UDP socket"):
        peers.set_rcvbuf(os.getpid(), port, want)
