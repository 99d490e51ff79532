"""docker-compose.yml cannot run here (no Docker engine): check its wiring against the code instead."""

from pathlib import Path

import typer.main
import yaml

from cli.main import app
from cli.pipeline import register
from fabricflow.settings import Settings, iter_fields, load_settings

REPO = Path(__file__).resolve().parents[3]
register(app)


def _compose():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _ff_services(c):
    return {n: s for n, s in c["services"].items() if s.get("image", "").startswith("fabricflow")}


def test_compose_env_vars_are_real_settings(monkeypatch):
    envs = {env for _p, env, _d, _desc in iter_fields()}
    c = _compose()
    services = _ff_services(c)
    assert {"ingest", "processors", "sink-archive", "topics"} <= set(services)
    for name, svc in services.items():
        for var, value in svc["environment"].items():
            assert var in envs, f"{name}: {var} is not a fabricflow setting"
            monkeypatch.setenv(var, str(value))
        # The whole environment of the service must validate as settings.
        s = load_settings()
        assert isinstance(s, Settings)
        for var in svc["environment"]:
            monkeypatch.delenv(var)


def test_compose_commands_exist():
    root = typer.main.get_command(app)
    for name, svc in _ff_services(_compose()).items():
        cmd = root
        for word in svc["command"]:
            assert word in cmd.commands, f"{name}: `fabricflow {' '.join(svc['command'])}` is not a command"
            cmd = cmd.commands[word]


def test_compose_ports_match_settings():
    c = _compose()
    ingest = c["services"]["ingest"]
    env = ingest["environment"]
    import json

    listen = json.loads(env["FABRICFLOW_INGEST__LISTEN"])
    ports = {p.split(":")[-1] for p in ingest["ports"]}
    for url in listen:
        assert url.rsplit(":", 1)[1] + "/udp" in ports, url
    assert env["FABRICFLOW_INGEST__METRICS_PORT"] in ports
    bootstrap = c["services"]["ingest"]["environment"]["FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS"]
    host, port = bootstrap.split(":")
    assert host in c["services"] and f"{port}:{port}" in c["services"][host]["ports"]


def test_dockerfile_copies_every_package():
    text = (REPO / "Dockerfile").read_text()
    for pkg in ("fabricflow", "ingest", "processors", "schemas", "sinks"):
        assert f"COPY {pkg} ./{pkg}" in text
