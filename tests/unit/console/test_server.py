"""``fabricflow console`` wiring: the command refuses a non-loopback address without a token, and the
in-process server starts, answers and stops (no broker, no archive)."""

from __future__ import annotations

import json
import urllib.request

import typer
from typer.testing import CliRunner

from cli.console import register
from console.server import ConsoleServer
from fabricflow.settings import load_settings


def test_command_refuses_public_address_without_token(monkeypatch):
    monkeypatch.delenv("FABRICFLOW_CONSOLE__TOKEN", raising=False)
    app = typer.Typer()

    @app.callback()
    def cb(ctx: typer.Context):
        from cli.context import State  # the CLI's settings holder, as `fabricflow --config` builds it

        ctx.obj = State(None)

    register(app)
    r = CliRunner().invoke(app, ["console", "--listen", "0.0.0.0:31339", "--no-live", "--no-archive"])
    assert r.exit_code == 2
    assert "console.token" in r.output
    r = CliRunner().invoke(app, ["console", "--help"])
    assert r.exit_code == 0 and "--listen" in r.output


def test_server_starts_answers_and_stops():
    s = load_settings(console={"listen": "127.0.0.1:0"})
    svc = ConsoleServer(s, live=False, archive=False).start()
    try:
        assert svc.port > 0 and svc.url == f"http://127.0.0.1:{svc.port}/"
        with urllib.request.urlopen(svc.url + "api/status", timeout=5) as r:
            st = json.loads(r.read())
        assert st["broker"]["ok"] is None and st["live"]["windows"] == 0
    finally:
        svc.stop()
    try:
        urllib.request.urlopen(svc.url + "api/status", timeout=2)
        raise AssertionError("still serving after stop()")
    except OSError:
        pass


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_console_runs_on_the_shared_service_lifecycle():
    """/metrics and /healthz on console.metrics_port, stops in reverse order, a stalled loop clears the flag."""
    port = _free_port()
    s = load_settings(console={"listen": "127.0.0.1:0", "metrics_port": port})
    svc = ConsoleServer(s, live=False, archive=False).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "fabricflow_console_live_reader_up 0.0" in text
        assert 'fabricflow_console_live_messages_total{result="undecodable"} 0.0' in text
        svc.service.stall_s, svc.service.last_beat = 30.0, svc.service.clock() - 60  # as if the loop stalled
        assert svc.service.health() == (False, "console loop stalled for 60 s")
    finally:
        svc.stop()
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
        raise AssertionError("/healthz still served after stop()")
    except OSError:
        pass


def test_the_live_reader_beats_and_stops_in_reverse_order(monkeypatch):
    s = load_settings(console={"listen": "127.0.0.1:0", "metrics_port": 0})
    svc = ConsoleServer(s, live=True, archive=False)
    order = []
    monkeypatch.setattr(svc.feed, "start", lambda: order.append("feed start"))
    monkeypatch.setattr(svc.feed, "stop", lambda: order.append("feed stop"))
    svc.start()
    assert svc.feed.beat == svc.service.beat
    svc.service.on_stop(lambda: order.append("registered last"))
    svc.stop()
    assert order == ["feed start", "registered last", "feed stop"]
