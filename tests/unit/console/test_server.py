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
