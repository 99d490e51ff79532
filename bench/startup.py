"""Start-up to ready of every fabricflow service and command, from a fresh install (cold) and again (warm).

The wheel is built from this checkout and installed into a fresh read-only prefix (devtools/installed.py);
every command runs from it as ``--user`` (default ``nobody`` when run as root: no home directory, no cache)
against an embedded broker and object store started here on ``--ports-from`` (docs/performance.md,
"Start-up"). For each: wall seconds from exec to ready, CPU seconds used by then, and the figure the
service logged itself. Ready: services log "<name> ready in N s" (docs/operations.md); commands are timed
to their result (exit). The broker's share of a group member's start is printed beside: a plain consumer's
join on the same broker, at the members' session timeout (default the embedded stack's,
``devtools.stack.SESSION_TIMEOUT_MS``) and at Apache Kafka's smallest default (6000 ms). Printed figures only, no
pass/fail; the 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.installed import Installed, install, port_settings, set_writable  # noqa: E402
from devtools.stack import SESSION_TIMEOUT_MS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests/captures/pmacct_sfprobe_fabric/pmacct_sfprobe_fabric.pcap"
SERVICES = [("ingest", ["ingest"]), ("processors", ["process"]), ("archive sink", ["sink", "archive"]),
            ("metrics sink", ["sink", "metrics"]), ("console", ["console"])]


def _free_udp() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stack(base: Path, first: int):
    from devtools.stack import EmbeddedStack
    from fabricflow.settings import load_settings

    s = load_settings(None, stack={"state_dir": str(base / "stack"), "kafka_port": first, "s3_port": first + 1,
                                   "s3_base_port": first + 2})
    st = EmbeddedStack(s)
    st.up()
    return st


def _join_s(bootstrap: str, session_ms: int) -> float:
    """Seconds a plain consumer takes from subscribe to its first assignment (the broker's part of a join)."""
    from confluent_kafka import Consumer

    from fabricflow.kafka import ensure_topics
    from fabricflow.settings import load_settings

    ensure_topics(load_settings(None, kafka={"bootstrap_servers": bootstrap}).kafka)
    got: list[float] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "join-" + uuid.uuid4().hex[:6],
                  "session.timeout.ms": session_ms})
    t0 = time.monotonic()
    c.subscribe(["flows.raw.v1"], on_assign=lambda *_: got.append(time.monotonic() - t0))
    while not got and time.monotonic() - t0 < 60:
        c.poll(0.02)
    c.close()
    return got[0] if got else float("nan")


def _settings(inst: Installed, bootstrap: str, first: int, s3: str, session_ms: int) -> dict:
    ports = iter(range(first + 11, first + 40))
    return {
        "FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS": bootstrap, "FABRICFLOW_KAFKA__SESSION_TIMEOUT_MS": session_ms,
        "FABRICFLOW_INGEST__LISTEN": f'["sflow://127.0.0.1:{_free_udp()}"]',
        "FABRICFLOW_INGEST__METRICS_PORT": next(ports), "FABRICFLOW_PROCESSORS__METRICS_PORT": next(ports),
        "FABRICFLOW_PROCESSORS__WEB_PORT": next(ports), "FABRICFLOW_ARCHIVE__METRICS_PORT": next(ports),
        "FABRICFLOW_METRICS__PORT": next(ports), "FABRICFLOW_CONSOLE__LISTEN": f"127.0.0.1:{next(ports)}",
        "FABRICFLOW_CONSOLE__METRICS_PORT": next(ports),
        "FABRICFLOW_PROCESSORS__DATADIR": inst.state("processors") / "faust",
        "FABRICFLOW_PROCESSORS__INVENTORY": REPO / "deploy/fabricflow/inventory.yaml",
        "FABRICFLOW_ARCHIVE__URL": "s3://fabricflow/archive", "FABRICFLOW_ARCHIVE__S3_ENDPOINT": s3,
        "FABRICFLOW_ARCHIVE__S3_ACCESS_KEY": "fabricflow", "FABRICFLOW_ARCHIVE__S3_SECRET_KEY": "fabricflow-secret",
        "FABRICFLOW_ARCHIVE__IDLE_FLUSH_S": 2,
    }


def _service_once(inst: Installed, name: str, args: list[str], env: dict) -> tuple[float, float]:
    started = inst.start(name, args, env)
    try:
        wall, cpu, _age = started.ready()
        if name == "ingest":  # stopped once it publishes (a stop while it starts is fine too, but not measured)
            started.wait_line(r"ingest worker 0 ready in")
    finally:
        rc = started.stop()
    if rc != 0:
        raise RuntimeError(f"{name} exited {rc}:\n{started.output()}")
    return wall, cpu


def _command_once(inst: Installed, name: str, args: list, env: dict) -> tuple[float, float]:
    t0 = time.monotonic()
    before = os.times()
    r = inst.run(args, env, timeout=300)
    after = os.times()
    if r.returncode != 0:
        raise RuntimeError(f"{name} exited {r.returncode}:\n{r.stderr[-2000:]}")
    return time.monotonic() - t0, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _archive_for_queries(inst: Installed, env: dict, stack) -> None:
    """Ingest the capture and archive it, so query and replay have data (not timed)."""
    import s3fs

    from ingest.pcapread import read_udp

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **stack.s3_storage_options())
    ingest = inst.start("ingest", ["ingest"], env)
    sink = inst.start("archive sink", ["sink", "archive"], env)
    try:
        ingest.ready()
        sink.ready()
        port = int(env["FABRICFLOW_INGEST__LISTEN"].rsplit(":", 1)[1].rstrip('"]'))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for p in read_udp(CAPTURE):
                s.sendto(p.payload, ("127.0.0.1", port))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not fs.glob("fabricflow/archive/flows_raw/**/*.parquet"):
            time.sleep(0.5)
            fs.invalidate_cache()
    finally:
        ingest.stop()
        sink.stop()


def _demo_ready(state_dir: Path) -> str:
    """Each demo service's own "ready in N s" figure, from its log (``<state_dir>/<name>.log``)."""
    figures = []
    for log in sorted(state_dir.glob("*.log")):
        m = re.search(r"\b([a-z ]+?) ready in ([0-9.]+) s", log.read_text(errors="replace"))
        if m:
            figures.append(f"{m.group(1)} {m.group(2)} s")
    return "services ready in: " + (", ".join(figures) or "(no ready line found)")


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def _row(name: str, cold: tuple[float, float], warm: list[tuple[float, float]]) -> str:
    ww = statistics.median(w for w, _ in warm) if warm else float("nan")
    wc = statistics.median(c for _, c in warm) if warm else float("nan")
    return f"{name:<22} {cold[0]:7.2f} {cold[1]:7.2f}    {ww:7.2f} {wc:7.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--user", default="nobody" if os.geteuid() == 0 else None, help="run the commands as this user")
    ap.add_argument("--runs", type=int, default=3, help="warm starts per command (median printed)")
    ap.add_argument("--ports-from", type=int, default=41300, help="first of ~40 ports on 127.0.0.1 (broker, S3, services)")
    ap.add_argument("--wheelhouse", default=str(REPO / ".venv" / "wheelhouse"), help="wheels to install from (make wheelhouse)")
    ap.add_argument("--session-ms", type=int, default=SESSION_TIMEOUT_MS,
                    help="kafka.session_timeout_ms of the group members (default: the embedded stack's)")
    ap.add_argument("--demo", action="store_true", help="also time `fabricflow demo` to its 'pipeline up' line")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="fabricflow-startup-"))
    base.chmod(0o755)
    stack = None
    try:
        t0 = time.monotonic()
        prefix, version = install(REPO, Path(args.wheelhouse), base)
        print(f"fabricflow {version}: wheel built and installed (read-only prefix) in {time.monotonic() - t0:.1f} s; "
              f"commands run as {args.user or 'this user'}; load average {os.getloadavg()[0]:.2f}")
        (base / "state").mkdir(mode=0o755)
        inst = Installed(prefix, base, args.user, version)
        stack = _stack(base, args.ports_from)
        env = _settings(inst, stack.bootstrap, args.ports_from, stack.s3_endpoint, args.session_ms)
        joins = ", ".join(f"{_join_s(stack.bootstrap, ms):.2f} s at session.timeout.ms {ms}"
                          for ms in dict.fromkeys((args.session_ms, 6000)))
        print(f"broker {stack.bootstrap}: a plain consumer joins a new group in {joins}; the members run with "
              f"{args.session_ms}")
        print(f"{'':<22} {'cold':>7} {'':>7}    {'warm':>7}\n{'ready (s from exec)':<22} {'wall':>7} {'cpu':>7}    "
              f"{'wall':>7} {'cpu':>7}")
        for name, argv in SERVICES:
            cold = _service_once(inst, name, argv, env)
            warm = [_service_once(inst, name, argv, env) for _ in range(args.runs)]
            print(_row(name, cold, warm), flush=True)
        _archive_for_queries(inst, env, stack)
        shutil.copy2(CAPTURE, base / "capture.pcap")
        out = inst.state("commands")
        commands = [
            ("decode (capture)", ["decode", base / "capture.pcap"]),
            ("simulate (10 s, pcap)", ["simulate", "healthy", "--duration", "10", "--no-send", "--pcap", out / "s.pcap"]),
            ("query sql", ["query", "sql", "SELECT count(*) FROM flows_raw"]),
            ("replay (last hour)", ["replay", "--quiet", "--from", _iso(time.time() - 3600), "--to", _iso(time.time() + 60),
                                    "--report", out / "replay.json"]),
            ("--version", ["--version"]),
        ]
        for name, argv in commands:
            try:
                cold = _command_once(inst, name, argv, env)
                warm = [_command_once(inst, name, argv, env) for _ in range(args.runs)]
            except RuntimeError as e:
                print(f"{name:<22} failed: {e}", flush=True)
                continue
            print(_row(name, cold, warm), flush=True)
        if args.demo:
            stack.down()
            stack = None
            for run in ("cold", "warm"):
                demo = inst.start("demo", ["demo", "--no-ui", "--scenario", "incast", "--duration", "15", "--state-dir",
                                           out / f"demo-{run}"], port_settings(args.ports_from))
                at, line = demo.wait_line(r"pipeline up in [0-9.]+s", timeout=300)
                first = demo.wait_line(r"first detection \d+s", timeout=300)[1] if demo.proc.wait(300) == 0 else "failed"
                print(f"demo {run}: '{line.strip()}' (seen after {at:.1f} s); {first}; {_demo_ready(out / f'demo-{run}')}")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        if stack is not None:
            stack.down()
        set_writable(base, True)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
