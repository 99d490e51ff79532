"""fabricflow as a packager installs it and a container runs it (issue 26).

The wheel is built from this source, installed non-editable with Debian's Python into a fresh prefix from
the wheels ``make test`` downloaded (``scripts/wheelhouse.py``; no network here), and the prefix is made
read-only. Every command then runs as ``nobody`` (no home directory, no writable cache), with a minimal
environment (no HOME) in ``/`` (not writable for it), against the suite's broker and object store:

* each service says it is ready (its "<name> ready in N s" line, docs/operations.md "Start-up and readiness")
  having used at most 2 CPU-seconds: nothing is compiled or cached on the start path (a JIT compile costs
  15-40 s). The wall-clock figures are printed, and measured by bench/startup.py, not asserted here: the
  group members wait for the broker's join (Tansu: half of kafka.session_timeout_ms);
* a capture sent 1 s after ``fabricflow ingest`` starts arrives whole on Kafka;
* nothing is written outside the state directory each service is given;
* an unwritable state directory, a port in use and a missing broker are one line, not a traceback.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from devtools.installed import SYSTEM_PYTHON, Installed, Started, install, port_settings, set_writable
from devtools.stack import read_from_start

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"
WHEELHOUSE = Path(os.environ.get("FABRICFLOW_TEST_WHEELHOUSE", REPO / ".venv" / "wheelhouse"))
USER = "nobody"
CAPTURE = REPO / "tests/captures/pmacct_sfprobe_fabric/pmacct_sfprobe_fabric.pcap"  # 230 flow + 3 counter samples
CPU_BUDGET_S = 2.0
DEMO_PORTS = int(os.environ.get("FABRICFLOW_TEST_INSTALLED_PORT_BASE", "23300"))  # 22 ports for the demo
TIMINGS: list[tuple[str, float, float, float]] = []  # (what, wall s, cpu s, age the service logged)


def _unavailable(msg: str):
    if REQUIRE:
        pytest.fail(f"{msg} (FABRICFLOW_REQUIRE_BROKER=1)")
    pytest.skip(msg)


def _ready(started: Started, service: str | None = None) -> float:
    """Wait for the service's ready line; check the CPU it took; keep its figures for the summary."""
    wall, cpu, age = started.ready(service)
    TIMINGS.append((service or started.name, wall, cpu, age))
    assert cpu <= CPU_BUDGET_S, f"{started.name} used {cpu:.2f} CPU-s before it was ready (budget {CPU_BUDGET_S}):\n{started.output()}"
    return wall


@pytest.fixture(scope="module")
def installed() -> Installed:
    if os.geteuid() != 0:
        _unavailable("needs root to run the services as another user")
    for tool in ("setpriv", "git"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} not installed")
    if not Path(SYSTEM_PYTHON).exists():
        _unavailable(f"{SYSTEM_PYTHON} (Debian's python3) not installed")
    if not WHEELHOUSE.is_dir():
        _unavailable(f"no wheelhouse at {WHEELHOUSE}: run `make wheelhouse` (scripts/wheelhouse.py)")
    try:
        home = pwd.getpwnam(USER).pw_dir
    except KeyError:
        _unavailable(f"no user {USER}")
    assert not Path(home).exists(), f"{USER}'s home {home} exists"
    base = Path(tempfile.mkdtemp(prefix="fabricflow-installed-"))
    base.chmod(0o755)  # pytest's tmp_path is root's alone
    try:
        prefix, version = install(REPO, WHEELHOUSE, base)
        (base / "state").mkdir(mode=0o755)
        # what the services read comes from the scratch folder: the checkout may be a folder the user cannot
        # enter (a clone under a 0700 mktemp folder), as a container's config is mounted, not the source tree
        for src, name in ((CAPTURE, "capture.pcap"), (REPO / "deploy/fabricflow/inventory.yaml", "inventory.yaml")):
            shutil.copy2(src, base / name)
            os.chmod(base / name, 0o644)
        yield Installed(prefix, base, USER, version)
    finally:
        set_writable(base, True)
        shutil.rmtree(base, ignore_errors=True)
        if TIMINGS:
            print("\nstart-up from the installed wheel (wall s from exec / CPU s / the service's own figure):")
            for what, wall, cpu, age in TIMINGS:
                print(f"  {what:<16} {wall:6.2f} {cpu:6.2f} {age:6.2f}")


@pytest.fixture
def kafka_env(kafka_bootstrap) -> dict:
    """Settings for services on the suite's broker with topics and groups of their own."""
    from fabricflow.settings import load_settings

    tag = uuid.uuid4().hex[:8]
    env = {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap, "FABRICFLOW_KAFKA__PARTITIONS": "2",
           "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "20", "FABRICFLOW_PROCESSORS__APP_ID": f"proc-{tag}",
           "FABRICFLOW_METRICS__GROUP": f"metrics-{tag}", "FABRICFLOW_CONSOLE__GROUP_ID": f"console-{tag}"}
    for key, name in load_settings(None).kafka.topics.model_dump().items():
        if key != "replay_prefix":
            env[f"FABRICFLOW_KAFKA__TOPICS__{key.upper()}"] = f"{tag}.{name}"
    return env


def _free_port(kind=socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send_capture(port: int) -> int:
    from ingest.pcapread import read_udp

    datas = [p.payload for p in read_udp(CAPTURE)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for d in datas:
            s.sendto(d, ("127.0.0.1", port))
    return len(datas)


def _rows_on(bootstrap: str, topic: str, expect: str, want: int, timeout_s: float = 60) -> int:
    from confluent_kafka import Consumer

    from schemas import codec

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count-" + uuid.uuid4().hex[:8],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    read_from_start(c, topic)
    rows, deadline = 0, time.monotonic() + timeout_s
    try:
        while rows < want and time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                rows += len(codec.decode_batch(m.value(), expect=expect))
    finally:
        c.close()
    return rows


def _one_line_error(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    err = r.stderr.strip()
    assert r.returncode == code, f"exit {r.returncode}, not {code}:\n{r.stdout}\n{err}"
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    for n in needles:
        assert n in last, f"{n!r} not in the error line {last!r}"
    return last


def test_version_is_the_wheels(installed):
    r = installed.run(["--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"fabricflow {installed.version}", r


def test_services_start_as_a_user_without_home_and_a_capture_sent_one_second_after_ingest_starts_arrives(
        installed, kafka_env, kafka_bootstrap):
    state = {name: installed.state(name) for name in ("ingest", "processors", "archive")}
    udp, metrics_port, console_port = _free_port(socket.SOCK_DGRAM), _free_port(), _free_port()
    env = {**kafka_env,
           "FABRICFLOW_INGEST__LISTEN": f'["sflow://127.0.0.1:{udp}"]',
           "FABRICFLOW_INGEST__TEMPLATE_PATH": state["ingest"] / "templates.json",
           "FABRICFLOW_INGEST__METRICS_PORT": _free_port(), "FABRICFLOW_PROCESSORS__METRICS_PORT": _free_port(),
           "FABRICFLOW_PROCESSORS__WEB_PORT": _free_port(), "FABRICFLOW_ARCHIVE__METRICS_PORT": _free_port(),
           "FABRICFLOW_PROCESSORS__DATADIR": state["processors"] / "faust",
           "FABRICFLOW_PROCESSORS__INVENTORY": installed.base / "inventory.yaml",
           "FABRICFLOW_ARCHIVE__URL": f"file://{state['archive']}/archive", "FABRICFLOW_ARCHIVE__IDLE_FLUSH_S": "2",
           "FABRICFLOW_METRICS__PORT": metrics_port, "FABRICFLOW_CONSOLE__LISTEN": f"127.0.0.1:{console_port}",
           "FABRICFLOW_CONSOLE__METRICS_PORT": _free_port()}
    started: list[Started] = []
    since = time.time() - 1
    try:
        ingest = installed.start("ingest", ["ingest"], env)
        started.append(ingest)
        time.sleep(max(0.0, ingest.t0 + 1.0 - time.monotonic()))
        sent = _send_capture(udp)  # 1 s after ingest started: before its decoders and Kafka client are loaded
        _ready(ingest)
        group = env["FABRICFLOW_PROCESSORS__APP_ID"].replace("proc-", "archive-")
        for name, args in (("processors", ["process"]), ("archive sink", ["sink", "archive", "--group", group]),
                           ("metrics sink", ["sink", "metrics"]), ("console", ["console"])):
            started.append(installed.start(name, args, env))
        for svc in started[1:]:
            _ready(svc)
        _, line = ingest.wait_line(r"ingest worker 0 ready in .*\(\d+ datagrams kept while starting\)")
        # ready before the capture came (the receive loop has it), after (the start-up receiver kept it all) or
        # while it came (split between the two; on a loaded machine the capture's send takes longer): every row
        # arrives either way (below)
        kept = int(re.search(r"\((\d+) datagrams kept while starting\)", line).group(1))
        assert 0 <= kept <= sent, line
        t = {k.removeprefix("FABRICFLOW_KAFKA__TOPICS__").lower(): v for k, v in env.items() if "__TOPICS__" in k}
        assert _rows_on(kafka_bootstrap, t["flows_raw"], "flow_batch", 230) == 230, ingest.output()
        assert _rows_on(kafka_bootstrap, t["counters_raw"], "counter_batch", 3) == 3, ingest.output()
        for url in (f"http://127.0.0.1:{metrics_port}/readyz", f"http://127.0.0.1:{console_port}/api/status"):
            assert urllib.request.urlopen(url, timeout=10).status == 200
        # the archive sink wrote the raw flows under its state directory; query reads them as the user
        deadline = time.monotonic() + 60
        while not list(state["archive"].glob("archive/flows_raw/**/*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.5)
        q = installed.run(["query", "sql", "SELECT count(*) AS n FROM flows_raw", "--format", "csv"], env)
        assert q.returncode == 0 and q.stdout.strip().splitlines()[-1] == "230", q
    finally:
        codes = {svc.name: svc.stop() for svc in reversed(started)}
    outputs = "\n".join(svc.output() for svc in started)
    assert "Traceback" not in outputs, outputs
    assert all(rc == 0 for rc in codes.values()), (codes, outputs)
    mine = [p for root in (installed.base, Path(tempfile.gettempdir())) for p in _owned_by(root, installed.uid, since)]
    written = [p for p in mine if not any(p.is_relative_to(d) for d in state.values())]
    assert written == [], f"written outside the state directories: {sorted(map(str, written))}"


def _owned_by(root: Path, uid: int, since: float) -> list[Path]:
    """What ``uid`` created (or changed) under ``root`` since ``since``."""
    out = []
    for d, dirs, files in os.walk(root):
        for n in (*dirs, *files):
            p = Path(d) / n
            try:
                st = p.lstat()
                if st.st_uid == uid and st.st_ctime >= since:
                    out.append(p)
            except OSError:
                pass
    return out


def test_commands_run_as_a_user_without_home(installed, kafka_env):
    out = installed.state("commands")
    r = installed.run(["decode", installed.base / "capture.pcap", "--format", "jsonl"])
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 233, r.stderr
    r = installed.run(["simulate", "incast", "--duration", "20", "--no-send", "--pcap", out / "incast.pcap"])
    assert r.returncode == 0 and (out / "incast.pcap").stat().st_size > 0, r  # the shipped scenarios are installed
    arch = {**kafka_env, "FABRICFLOW_ARCHIVE__URL": f"file://{out}/archive"}
    r = installed.run(["decode", out / "incast.pcap", "--format", "jsonl"])
    assert r.returncode == 0 and r.stdout.count("\n") > 100, r.stderr
    r = installed.run(["query", "top-talkers"], arch)
    _one_line_error(r, 2, "no archive at")  # a reader creates nothing
    assert not (out / "archive").exists()


def test_the_demo_runs_from_the_installed_wheel(installed):
    from devtools.stack import port_free

    if not all(port_free(DEMO_PORTS + i) for i in range(22)):
        pytest.skip(f"demo ports {DEMO_PORTS}-{DEMO_PORTS + 21} in use")
    state = installed.state("demo")
    demo = installed.start("demo", ["demo", "--no-ui", "--scenario", "incast", "--duration", "20", "--state-dir",
                                    state / "run"], port_settings(DEMO_PORTS))
    try:
        at, line = demo.wait_line(r"pipeline up in [0-9.]+s", timeout=180)
        TIMINGS.append(("demo pipeline", at, demo.cpu_s(), float(re.search(r"up in ([0-9.]+)s", line).group(1))))
        assert demo.proc.wait(240) == 0, demo.output()
    finally:
        demo.stop()
    assert "summary:" in demo.output() and "Traceback" not in demo.output(), demo.output()


@pytest.mark.parametrize("args,setting", [
    (["process"], {"FABRICFLOW_PROCESSORS__DATADIR": "/var/lib/fabricflow-test/faust"}),
    (["sink", "archive"], {"FABRICFLOW_ARCHIVE__URL": "file:///var/lib/fabricflow-test/archive"}),
    (["ingest", "--listen", "sflow://127.0.0.1:0"], {"FABRICFLOW_INGEST__TEMPLATE_PATH": "/var/lib/fabricflow-test/t.json"}),
    (["stack", "up"], {"FABRICFLOW_STACK__STATE_DIR": "/var/lib/fabricflow-test/stack"}),
    (["demo", "--state-dir", "/var/lib/fabricflow-test/demo"], {}),
], ids=["process", "sink-archive", "ingest", "stack", "demo"])
def test_an_unwritable_state_directory_is_one_line(installed, args, setting):
    r = installed.run(args, {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{_free_port()}", **setting,
                             "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "1", "FABRICFLOW_INGEST__METRICS_PORT": "0"})
    _one_line_error(r, 2, "/var/lib/fabricflow-test", "Permission denied", f"user id {installed.uid}")
    assert not Path("/var/lib/fabricflow-test").exists()


def test_a_relative_default_in_an_unwritable_working_directory_is_one_line(installed):
    r = installed.run(["process"], {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{_free_port()}"})
    _one_line_error(r, 2, "processors.datadir: cannot create var/faust (= /var/faust)", "FABRICFLOW_PROCESSORS__DATADIR")


def test_a_missing_broker_is_one_line(installed):
    r = installed.run(["ingest", "--listen", "sflow://127.0.0.1:0"],
                      {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{_free_port()}",
                       "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "1", "FABRICFLOW_INGEST__METRICS_PORT": "0"})
    _one_line_error(r, 1, "not reachable after")
    r = installed.run(["sink", "metrics", "--port", "0"], {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": "no-such-host.invalid:9092",
                                                           "FABRICFLOW_KAFKA__WAIT_TIMEOUT_S": "1"})
    _one_line_error(r, 1, "cannot resolve no-such-host.invalid")


def test_a_port_in_use_is_one_line(installed):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, socket.socket() as tcp:
        udp.bind(("127.0.0.1", 0))
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(1)
        u, t = udp.getsockname()[1], tcp.getsockname()[1]
        r = installed.run(["ingest", "--stdout", "--listen", f"ipfix://127.0.0.1:{u}"])
        _one_line_error(r, 2, f"cannot listen on ipfix://127.0.0.1:{u}: Address already in use")
        r = installed.run(["console", "--no-live", "--no-archive", "--listen", f"127.0.0.1:{t}"],
                          {"FABRICFLOW_CONSOLE__METRICS_PORT": "0"})
        _one_line_error(r, 2, f"127.0.0.1:{t}", "in use")
        r = installed.run(["sink", "metrics", "--port", str(t)], {"FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"})
        _one_line_error(r, 2, f"127.0.0.1:{t}", "Address already in use")
