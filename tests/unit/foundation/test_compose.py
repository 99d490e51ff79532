"""docker-compose.yml cannot run here (no Docker engine): check its wiring against the code instead.

Validated with the real tools available offline: the compose-spec JSON schema (vendored by the
PyPI package check-jsonschema, a dev dependency) and `docker-compose config` (Debian's
docker-compose, installed by scripts/install-system-deps.sh; skipped where it is missing). On top
of the schema: every FABRICFLOW_* variable is a setting and the service's whole environment
validates, every command exists, every host path exists, every file a service is told to read
lies in one of its mounts and exists in the repository (and loads), no replicated service
shares a writable volume, every fabricflow service runs read-only as an unprivileged user and
writes only to named volumes and tmpfs mounts, and the Dockerfile compiles in a build stage
and runs without a compiler.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import typer.main
import yaml

from cli.main import app
from cli.pipeline import register
from fabricflow.settings import Settings, iter_fields, load_settings

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"
register(app)

# Settings whose value is a file a service reads at start, and those naming a place it writes.
READ_FILES = {
    "FABRICFLOW_PROCESSORS__INVENTORY", "FABRICFLOW_PROCESSORS__POLICY", "FABRICFLOW_PROCESSORS__CATEGORIES",
    "FABRICFLOW_KAFKA__SSL_CA_FILE", "FABRICFLOW_KAFKA__SSL_CERT_FILE", "FABRICFLOW_KAFKA__SSL_KEY_FILE",
}
WRITE_PATHS = {"FABRICFLOW_PROCESSORS__DATADIR", "FABRICFLOW_INGEST__TEMPLATE_PATH"}
IMAGE_DIRS = ("/var/lib/fabricflow/faust", "/var/lib/fabricflow/ingest")  # created (and owned by the user) in the Dockerfile


def _compose():
    return yaml.safe_load(COMPOSE.read_text())


def _ff_services(c):
    return {n: s for n, s in c["services"].items() if s.get("image", "").startswith("fabricflow")}


def _mounts(svc) -> list[tuple[str, str, bool]]:
    """(source, container path, writable) of a service's volumes (short syntax)."""
    out = []
    for v in svc.get("volumes", []):
        parts = v.split(":")
        source, target = parts[0], parts[1]
        mode = parts[2] if len(parts) > 2 else "rw"
        out.append((source, target, "ro" not in mode.split(",")))
    return out


def _host_path(svc, container_path: str) -> Path | None:
    """The repository file behind ``container_path`` through one of the service's bind mounts, else None."""
    p = PurePosixPath(container_path)
    for source, target, _w in _mounts(svc):
        if source.startswith(".") and (p == PurePosixPath(target) or PurePosixPath(target) in p.parents):
            return REPO / source / p.relative_to(target)
    return None


def _writable(svc, container_path: str) -> bool:
    """In a writable volume or a tmpfs of the service (the root file system is read-only)."""
    p = PurePosixPath(container_path)
    targets = [target for _s, target, writable in _mounts(svc) if writable] + list(svc.get("tmpfs", []))
    return any(p == PurePosixPath(t) or PurePosixPath(t) in p.parents for t in targets)


def test_compose_spec_schema():
    """The file validates against the compose-spec schema (what `docker compose config` checks first)."""
    import jsonschema
    from check_jsonschema.builtin_schemas import get_builtin_schema

    schema = get_builtin_schema("vendor.compose-spec")
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (Debian) not installed")
def test_docker_compose_config():
    """`docker-compose config` (Debian's docker-compose) parses, interpolates and resolves the file."""
    r = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr


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


def test_no_unresolved_interpolation():
    """Every ${VAR} has a default: `docker compose up` needs no variable the user must know to set."""
    for m in re.finditer(r"\$\{([^}]+)\}", COMPOSE.read_text()):
        assert ":-" in m.group(1) or "-" in m.group(1), f"${{{m.group(1)}}} has no default"


def test_compose_commands_exist():
    root = typer.main.get_command(app)
    for name, svc in _ff_services(_compose()).items():
        cmd = root
        for word in svc["command"]:
            assert word in cmd.commands, f"{name}: `fabricflow {' '.join(svc['command'])}` is not a command"
            cmd = cmd.commands[word]


def test_bind_mount_sources_exist():
    for name, svc in _compose()["services"].items():
        for source, _t, _w in _mounts(svc):
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: mounts {source}, which is not in the repository"
    assert (REPO / _compose()["services"]["topics"]["build"] / "Dockerfile").is_file()


def test_files_services_read_exist_and_load():
    """Each file setting points into a read-only bind mount and the file behind it exists and loads."""
    from processors.config_files import load_categories_file, load_inventory_file, load_policy_file

    loaders = {"FABRICFLOW_PROCESSORS__INVENTORY": load_inventory_file, "FABRICFLOW_PROCESSORS__POLICY": load_policy_file,
               "FABRICFLOW_PROCESSORS__CATEGORIES": load_categories_file}
    seen = set()
    for name, svc in _ff_services(_compose()).items():
        for var, value in svc["environment"].items():
            if var not in READ_FILES:
                continue
            host = _host_path(svc, value)
            assert host is not None, f"{name}: {var}={value} is not inside a bind mount of the service"
            assert host.is_file(), f"{name}: {var}={value} -> {host.relative_to(REPO)} does not exist"
            if var in loaders:
                loaders[var](host)  # raises ConfigFileError with the file, line and problem
            seen.add(var)
    assert {"FABRICFLOW_PROCESSORS__INVENTORY", "FABRICFLOW_PROCESSORS__POLICY", "FABRICFLOW_PROCESSORS__CATEGORIES"} <= seen


def test_paths_services_write_are_writable():
    for name, svc in _ff_services(_compose()).items():
        for var, value in svc["environment"].items():
            if var in WRITE_PATHS:
                target = value if var.endswith("DATADIR") else str(PurePosixPath(value).parent)
                assert _writable(svc, target), f"{name}: {var}={value} is neither in a writable volume nor a tmpfs"
    dockerfile = (REPO / "Dockerfile").read_text()
    for d in IMAGE_DIRS:  # a fresh named volume takes the owner of the image's directory
        assert d in dockerfile and "chown" in dockerfile


def test_fabricflow_services_run_read_only_as_an_unprivileged_user():
    for name, svc in _ff_services(_compose()).items():
        assert svc.get("read_only") is True, f"{name}: root file system not read-only"
        user = str(svc.get("user", ""))
        assert user and user.split(":")[0] not in ("0", "root"), f"{name}: runs as {user or 'the image default'}"
        assert "/tmp" in svc.get("tmpfs", []), f"{name}: no tmpfs for /tmp"
        for source, target, writable in _mounts(svc):
            assert not (writable and source.startswith((".", "/"))), f"{name}: writable bind mount {source}:{target}"
    assert "--uid 10001" in (REPO / "Dockerfile").read_text()  # the user compose names is the image's


def test_dockerfile_compiles_in_a_build_stage_and_runs_without_a_compiler():
    text = (REPO / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2 and stages[0].split()[2] == "build", "a build stage, then the runtime stage"
    build, runtime = stages
    assert "gcc" in build and "pip wheel" in build
    assert "gcc" not in runtime and "apt-get" not in runtime, "no compiler in the runtime image"
    assert "pip install --no-cache-dir --no-index --find-links /wheels" in runtime and "from=build" in runtime
    assert "--no-create-home" in runtime and re.search(r"^USER fabricflow$", runtime, re.M)
    assert runtime.index("pip install") < runtime.index("PYTHONDONTWRITEBYTECODE"), "pip byte-compiles at install"


def test_no_replicated_service_shares_a_writable_volume():
    c = _compose()
    owners: dict[str, list[str]] = {}
    for name, svc in c["services"].items():
        replicas = int(svc.get("deploy", {}).get("replicas", 1))
        for source, target, writable in _mounts(svc):
            if not writable:
                continue
            assert replicas == 1, f"{name}: {replicas} replicas share the writable volume {source}:{target}"
            owners.setdefault(source, []).append(name)
    shared = {v: s for v, s in owners.items() if len(s) > 1}
    assert not shared, f"writable volumes used by several services: {shared}"
    for source in owners:
        if not source.startswith((".", "/")):
            assert source in c.get("volumes", {}), f"named volume {source} is not declared"


def test_processors_run_two_workers_without_host_ports():
    svc = _compose()["services"]["processors"]
    assert svc["deploy"]["replicas"] == 2
    assert not svc.get("ports"), "replicas cannot publish the same host port"


def test_metrics_listen_on_all_interfaces_inside_containers():
    services = _ff_services(_compose())
    for name, prefix in (("ingest", "FABRICFLOW_INGEST__"), ("sink-archive", "FABRICFLOW_ARCHIVE__"),
                         ("processors", "FABRICFLOW_PROCESSORS__")):
        env = services[name]["environment"]
        bind = env.get(prefix + "METRICS_BIND", env.get(prefix + "WEB_BIND"))
        assert bind == "0.0.0.0", f"{name}: metrics bound to {bind} inside the container"


def test_depends_on_names_services():
    c = _compose()
    for name, svc in c["services"].items():
        for dep in svc.get("depends_on", {}):
            assert dep in c["services"], f"{name} depends on unknown service {dep}"


def test_compose_ports_match_settings():
    c = _compose()
    ingest = c["services"]["ingest"]
    env = ingest["environment"]
    listen = json.loads(env["FABRICFLOW_INGEST__LISTEN"])
    ports = {p.split(":")[-1] for p in ingest["ports"]}
    for url in listen:
        assert url.rsplit(":", 1)[1] + "/udp" in ports, url
    assert env["FABRICFLOW_INGEST__METRICS_PORT"] in ports
    sink = c["services"]["sink-archive"]
    assert sink["environment"]["FABRICFLOW_ARCHIVE__METRICS_PORT"] in {p.split(":")[-1] for p in sink["ports"]}
    bootstrap = c["services"]["ingest"]["environment"]["FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS"]
    host, port = bootstrap.split(":")
    assert host in c["services"] and f"{port}:{port}" in c["services"][host]["ports"]


def test_dockerfile_copies_every_package():
    """Every top-level package the wheel ships (pyproject's ``packages.find`` include) is copied into the image."""
    import tomllib

    text = (REPO / "Dockerfile").read_text()
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in include}
    assert {"fabricflow", "ingest", "processors", "schemas", "sinks", "query"} <= packages
    for pkg in packages:
        assert f"COPY {pkg} ./{pkg}" in text, f"{pkg} is packaged but not copied into the build stage"
    build_files = [f for f in ("pyproject.toml", "setup.py", "README.md") if (REPO / f).exists()]
    assert f"COPY {' '.join(build_files)} ./" in text, "the files the build reads are copied"


def test_readme_layout_names_every_package():
    """The README's layout table has a row for every top-level package the wheel ships, and every folder it
    names exists."""
    import tomllib

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `([\w.-]+)/` \|", readme, re.M)
    assert [p.rstrip("*") for p in include if p.rstrip("*") not in rows] == []
    assert [r for r in rows if not (REPO / r).is_dir()] == []


def test_prometheus_scrapes_the_compose_services_on_their_metrics_ports():
    """deploy/prometheus/prometheus.compose.yml names compose services and the ports they serve /metrics on."""
    c = _compose()
    services = _ff_services(c)
    prom = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.compose.yml").read_text())
    port_of = {"ingest": "FABRICFLOW_INGEST__METRICS_PORT", "processors": "FABRICFLOW_PROCESSORS__METRICS_PORT",
               "sink-archive": "FABRICFLOW_ARCHIVE__METRICS_PORT", "sink-metrics": "FABRICFLOW_METRICS__PORT"}
    seen = set()
    for job in prom["scrape_configs"]:
        targets = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        targets += [f"{n}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for n in sd["names"]]
        for t in targets:
            host, port = t.rsplit(":", 1)
            assert host in services, f"{job['job_name']} scrapes {host}, not a compose service"
            assert services[host]["environment"][port_of[host]] == port, t
            seen.add(host)
    assert seen == set(port_of)
    assert services["sink-metrics"]["environment"]["FABRICFLOW_METRICS__BIND"] == "0.0.0.0"
    assert "prometheus" in c["services"] and "grafana" in c["services"]


def test_console_is_opt_in_and_needs_a_token():
    """The console binds 0.0.0.0 in its container: only with --profile console, its token from the host."""
    svc = _compose()["services"]["console"]
    assert svc["profiles"] == ["console"]
    env = svc["environment"]
    assert env["FABRICFLOW_CONSOLE__LISTEN"].startswith("0.0.0.0:")
    assert env["FABRICFLOW_CONSOLE__TOKEN"] == "${FABRICFLOW_CONSOLE_TOKEN:-}"
    assert "FABRICFLOW_CONSOLE_TOKEN" in COMPOSE.read_text().split("console:", 1)[0]  # documented above the service
    from console.server import ConsoleConfigError, check_listen
    from pydantic import SecretStr

    with pytest.raises(ConsoleConfigError):
        check_listen(env["FABRICFLOW_CONSOLE__LISTEN"], SecretStr(""))  # variable unset: refuses to start
