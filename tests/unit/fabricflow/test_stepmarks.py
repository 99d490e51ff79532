"""fabricflow/stepmarks.py: the training loop's helper sends one JSON line per mark, never raises, and runs as a
single copied file with nothing of fabricflow around it."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from fabricflow.stepmarks import StepMarks
from schemas.marks import parse_mark
from tests.support.fixtures_path import REPO


@pytest.fixture
def udp():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    yield rx
    rx.close()


def test_a_step_and_a_checkpoint_are_four_lines_the_collector_accepts(udp, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    port = udp.getsockname()[1]
    marks = StepMarks("train-a", f"udp://127.0.0.1:{port}", node="gpu01")
    with marks.step(7):
        pass
    with marks.checkpoint(7):
        pass
    lines = [udp.recvfrom(4096)[0] for _ in range(4)]
    recs = [parse_mark(x, int(time.time() * 1000), "udp:127.0.0.1") for x in lines]
    assert [r["event"] for _k, r in recs] == ["step_start", "step_end", "checkpoint_start", "checkpoint_end"]
    assert all(k == "step" and r["step"] == 7 and r["job"] == "train-a" and r["node"] == "gpu01" for k, r in recs)
    assert marks.sent == 4 and marks.dropped == 0


def test_only_rank_zero_sends_and_no_target_is_a_no_op(udp, monkeypatch):
    port = udp.getsockname()[1]
    monkeypatch.setenv("RANK", "3")
    quiet = StepMarks("j", f"udp://127.0.0.1:{port}")
    with quiet.step(1):
        pass
    assert not quiet.enabled and quiet.sent == 0
    monkeypatch.delenv("FABRICFLOW_MARKS", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    off = StepMarks("j")
    off.send("step_start", 1)
    assert not off.enabled
    with pytest.raises(ValueError):
        off.send("started")  # a bug in the caller is still a bug


def test_a_closed_port_or_a_dead_console_never_raises(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    m = StepMarks("j", f"udp://127.0.0.1:{port}")
    for i in range(5):
        with m.step(i):
            pass
    assert m.sent + m.dropped == 10
    h = StepMarks("j", f"http://127.0.0.1:{port}", timeout_s=0.2)
    h.send("step_start", 1)
    h.flush(5)
    assert h.dropped == 1 and h.sent == 0


def test_http_posts_ndjson_with_the_token(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    got = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            got.append((self.path, self.headers.get("Content-Type"), self.headers.get("Authorization"),
                        self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        m = StepMarks("train-a", f"http://127.0.0.1:{srv.server_port}", token="s3cret")
        with m.phase("data_load", 3):
            pass
        m.flush(5)
    finally:
        srv.shutdown()
    assert [g[0] for g in got] == ["/api/marks/step"] * 2
    assert got[0][1] == "application/x-ndjson" and got[0][2] == "Bearer s3cret"
    assert json.loads(got[0][3])["phase"] == "data_load"


def test_it_works_as_a_single_copied_file(tmp_path, udp):
    shutil.copy(REPO / "fabricflow" / "stepmarks.py", tmp_path / "stepmarks.py")
    port = udp.getsockname()[1]
    code = ("import sys; sys.path.insert(0, '.'); import stepmarks\n"
            f"m = stepmarks.StepMarks('j', 'udp://127.0.0.1:{port}', node='n')\n"
            "with m.step(1): pass\n"
            "assert not any(k == 'fabricflow' or k.startswith(('fabricflow.', 'schemas', 'numpy')) for k in sys.modules)\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(udp.recvfrom(4096)[0])["event"] == "step_start"
