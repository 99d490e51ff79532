"""Ingest binds first and keeps what arrives while it starts: the start-up receiver, and the command itself."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingest.listener import ListenError, StartupReceiver, open_sockets, parse_listen
from ingest.pcapread import read_udp

REPO = Path(__file__).resolve().parents[3]
FABRICFLOW = str(Path(sys.executable).parent / "fabricflow")
CAPTURE = REPO / "tests/captures/pmacct_sfprobe_fabric/pmacct_sfprobe_fabric.pcap"


def _send(port: int, datas: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for d in datas:
            s.sendto(d, ("127.0.0.1", port))


def test_the_receiver_keeps_datagrams_with_source_and_receive_time_in_order():
    [[(sock, spec, granted)]] = open_sockets([parse_listen("sflow://127.0.0.1:0")], 1 << 20)
    try:
        rx = StartupReceiver([sock], 1 << 20, clock=lambda: 1234.5).start()
        sent = [bytes([i]) * (100 + i) for i in range(50)]
        _send(sock.getsockname()[1], sent)
        deadline = time.monotonic() + 5
        while len(rx.datas) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.01)
        datas, srcs, times = rx.take()
        assert datas == sent and set(srcs) == {"127.0.0.1"} and set(times) == {1234500}
        assert rx.take() == ([], [], [])  # handed over once
        assert spec.scheme == "sflow" and granted > 0
    finally:
        sock.close()


def test_beyond_its_cap_the_receiver_leaves_datagrams_to_the_socket_buffer():
    [[(sock, _, _)]] = open_sockets([parse_listen("sflow://127.0.0.1:0")], 1 << 20)
    try:
        rx = StartupReceiver([sock], 1000).start()
        _send(sock.getsockname()[1], [b"x" * 400] * 5)
        deadline = time.monotonic() + 5
        while not rx.full and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        datas, _, _ = rx.take()
        assert rx.full and len(datas) == 3  # 1200 bytes: it stopped reading once past 1000
        left = []
        sock.setblocking(False)
        while True:
            try:
                left.append(sock.recv(65535))
            except BlockingIOError:
                break
        assert len(left) == 2  # still in the kernel's buffer, for the receive loop
    finally:
        sock.close()


def test_a_port_in_use_fails_the_whole_bind_and_names_the_listener():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        specs = [parse_listen("netflow://127.0.0.1:0"), parse_listen(f"sflow://127.0.0.1:{port}")]
        with pytest.raises(ListenError, match=f"cannot listen on sflow://127.0.0.1:{port}: Address already in use"):
            open_sockets(specs, 1 << 16)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_capture_sent_one_second_after_start_arrives_whole(tmp_path):
    """``fabricflow ingest --stdout`` is started and the capture sent 1 s later, before the decoders are
    loaded: every record of it comes out (the same check runs on the installed wheel in tests/e2e)."""
    datas = [p.payload for p in read_udp(CAPTURE)]
    port = _free_udp_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    env["FABRICFLOW_INGEST__METRICS_PORT"] = "0"
    t0 = time.monotonic()
    proc = subprocess.Popen([FABRICFLOW, "ingest", "--stdout", "--listen", f"sflow://127.0.0.1:{port}"], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(max(0.0, t0 + 1.0 - time.monotonic()))
        _send(port, datas)
        deadline = time.monotonic() + 60
        err = []
        while time.monotonic() < deadline:  # the worker says how many it kept once it has handled them
            line = proc.stderr.readline()
            err.append(line)
            if "ingest worker 0 ready in" in line or not line:
                break
        time.sleep(1.0)  # batch_max_delay_ms (200 ms) and stdout
    finally:
        proc.terminate()
        out, rest = proc.communicate(timeout=30)
    err = "".join(err) + rest
    records = [ln for ln in out.splitlines() if ln.startswith("{")]
    kept = re.search(r"\((\d+) datagrams kept while starting\)", err)
    # the worker may be ready before the capture comes (then the receive loop has it), after (then the start-up
    # receiver kept it) or while it comes (split between the two on a loaded machine): every record comes out
    assert "ingest ready in" in err and kept and 0 <= int(kept.group(1)) <= len(datas), err
    assert len(records) == 233, err  # 230 flow samples and 3 counter samples (tests/captures/pmacct_sfprobe_fabric)
    assert list(tmp_path.iterdir()) == []  # nothing written in the working directory


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_while_waiting_for_kafka_ends_at_once(tmp_path, workers):
    """Also with ``ingest.workers: 2``, whose parent hands its sockets to the workers before it says it is ready."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
        env.update({"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{port}", "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "120",
                    "FABRICFLOW_INGEST__METRICS_PORT": "0", "FABRICFLOW_INGEST__WORKERS": str(workers)})
        proc = subprocess.Popen([FABRICFLOW, "ingest", "--listen", f"sflow://127.0.0.1:{_free_udp_port()}"], env=env,
                                cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        err = []
        for line in proc.stderr:  # ready once bound; then it waits for Kafka
            err.append(line)
            if "waiting for Kafka" in line:
                break
        proc.terminate()
        rc = proc.wait(timeout=30)  # not after kafka.wait_timeout_s (120 s)
        err = "".join(err) + proc.stderr.read()
    assert rc == 0 and "stopped while waiting for Kafka" in err and "Traceback" not in err, err
    assert "ingest ready in" in err and (workers == 1 or f"{workers} workers listening on sflow://127.0.0.1:" in err), err
