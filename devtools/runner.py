"""Run the whole pipeline locally: embedded stack + ingest + processors + archive sink.

Used by ``fabricflow demo``, the end-to-end tests and ``bench/detection.py``.
Every service runs as its own ``fabricflow`` subprocess with one generated
config file (``<state_dir>/pipeline.yaml``) and a log file, exactly as an
operator would run them; :class:`LocalPipeline` starts the embedded stack (the
object store only for an ``s3://`` archive), then every service at once, waits
until each is ready and stops them all (SIGTERM, then SIGKILL) on exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fabricflow.settings import Settings, load_settings
from .stack import SESSION_TIMEOUT_MS, EmbeddedStack, StackError, port_free, tail


DRAIN_AFTER_INGEST_S = 2.0  # stop(): time the consumers get to read what ingest published as it stopped


class PipelineError(Exception):
    """A pipeline service failed to start; the message names it and shows its log tail."""


@dataclass
class PipelinePorts:
    kafka: int = 9092
    s3: int = 8333
    s3_base: int = 19330
    sflow: int = 6343
    netflow: int = 2055
    ipfix: int = 4739
    marks: int = 6344
    ingest_metrics: int = 9180
    processors_web: int = 6066
    archive_metrics: int = 9182
    processors_metrics: int = 9181
    flow_metrics: int = 9183
    console: int = 8090
    console_metrics: int = 9184

    @classmethod
    def offset(cls, delta: int) -> "PipelinePorts":
        d = cls()
        return cls(**{k: v + delta for k, v in d.__dict__.items()})

    @classmethod
    def from_settings(cls, s: Settings) -> "PipelinePorts":
        """The ports of ``s`` (``fabricflow demo --config FILE`` / ``FABRICFLOW_...``): the embedded stack's
        ``stack.*_port``, the ``ingest.listen`` ports by scheme, every service's metrics port and the console's
        ``console.listen`` port; the defaults give the defaults above. A metrics port of 0 (off) keeps the
        default: the demo waits on the services' /healthz."""
        from ingest.listener import parse_listen

        d = cls()
        udp = {spec.scheme: spec.port for spec in map(parse_listen, s.ingest.listen)}
        return cls(
            kafka=s.stack.kafka_port, s3=s.stack.s3_port, s3_base=s.stack.s3_base_port,
            sflow=udp.get("sflow", d.sflow), netflow=udp.get("netflow", d.netflow), ipfix=udp.get("ipfix", d.ipfix),
            marks=udp.get("marks", d.marks),
            ingest_metrics=s.ingest.metrics_port or d.ingest_metrics, processors_web=s.processors.web_port,
            archive_metrics=s.archive.metrics_port or d.archive_metrics,
            processors_metrics=s.processors.metrics_port or d.processors_metrics,
            flow_metrics=s.metrics.port or d.flow_metrics,
            console=int(s.console.listen.rpartition(":")[2]),
            console_metrics=s.console.metrics_port or d.console_metrics,
        )

    def required_tcp(self) -> dict[str, int]:
        """The TCP ports without which the pipeline does not start: the ones it waits on and the Faust web server
        (the stack checks its own; a service whose own /metrics port is taken runs without it, with a warning)."""
        return {name: getattr(self, name) for name in ("ingest_metrics", "processors_web", "flow_metrics", "console")}


@dataclass
class LocalPipeline:
    state_dir: Path
    inventory: str | None = None
    policy: str | None = None
    ports: PipelinePorts = field(default_factory=PipelinePorts)
    archive: bool = True
    metrics: bool = True  # the flow-metrics sink (fabricflow sink metrics)
    console: bool = False  # the web console (fabricflow console)
    extra: dict = field(default_factory=dict)  # settings overrides, by section
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    python: str = sys.executable  # the interpreter the services run with (``python -m cli``)
    move_ports: str = ""  # appended to a port-in-use error: how the caller moves the ports

    def __post_init__(self):
        self.state_dir = Path(self.state_dir).resolve()
        self.stack: EmbeddedStack | None = None
        self.config_path = self.state_dir / "pipeline.yaml"

    # ------------------------------------------------------------------ config

    def settings_dict(self) -> dict:
        p = self.ports
        d = {
            # the embedded broker's shortest group join (devtools.stack.SESSION_TIMEOUT_MS)
            "kafka": {"bootstrap_servers": f"127.0.0.1:{p.kafka}", "partitions": 4, "session_timeout_ms": SESSION_TIMEOUT_MS},
            "ingest": {
                "listen": [f"sflow://127.0.0.1:{p.sflow}", f"netflow://127.0.0.1:{p.netflow}", f"ipfix://127.0.0.1:{p.ipfix}",
                           f"marks://127.0.0.1:{p.marks}"],
                "metrics_port": p.ingest_metrics,
                "allowlist": ["127.0.0.0/8", "::1/128"],
                "batch_max_delay_ms": 200,
            },
            "processors": {
                "datadir": str(self.state_dir / "faust"),
                "web_port": p.processors_web,
                "metrics_port": p.processors_metrics,
                "tick_s": 1.0,
                "idle_close_s": 5.0,
            },
            "archive": {
                "url": f"s3://fabricflow/archive",
                "s3_endpoint": f"http://127.0.0.1:{p.s3}",
                "s3_access_key": "fabricflow",
                "s3_secret_key": "fabricflow-secret",
                "grace_s": 60,
                "metrics_port": p.archive_metrics,
                "idle_flush_s": 10,
            },
            "metrics": {"bind": "127.0.0.1", "port": p.flow_metrics},
            "console": {"listen": f"127.0.0.1:{p.console}", "metrics_port": p.console_metrics},
            "stack": {
                "state_dir": str(self.state_dir / "stack"),
                "kafka_port": p.kafka,
                "s3_port": p.s3,
                "s3_base_port": p.s3_base,
            },
        }
        if self.inventory:
            d["processors"]["inventory"] = str(Path(self.inventory).resolve())
        if self.policy:
            d["processors"]["policy"] = str(Path(self.policy).resolve())
        if self.extra.get("stack", {}).get("storage_engine") == "s3":
            # After a restart Tansu's s3 engine answers a fetch that needs longer than its wait to read storage
            # with nothing: at 100 ms some raw partitions resumed late and records came too late for their
            # windows (docs/reliability.md, broker-restart); 500 ms read them in step.
            d["processors"]["fetch_max_wait_ms"] = 500
        for section, values in self.extra.items():
            d.setdefault(section, {}).update({k: v for k, v in values.items()})
            for k in [k for k, v in d[section].items() if v is None]:
                del d[section][k]
        return d

    def settings(self) -> Settings:
        return load_settings(self.config_path)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "LocalPipeline":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = self.settings_dict()
        self.config_path.write_text(yaml.safe_dump(data, sort_keys=False))
        s = self.settings()
        for name, port in (("sflow", self.ports.sflow), ("netflow", self.ports.netflow), ("ipfix", self.ports.ipfix),
                           ("marks", self.ports.marks)):
            if not udp_free(port):
                raise PipelineError(f"ingest: UDP port 127.0.0.1:{port} ({name}) is in use; stop whatever listens there"
                                    f"{self.move_ports}")
        for name, port in self.ports.required_tcp().items():
            if not port_free(port):
                raise PipelineError(f"port 127.0.0.1:{port} ({name.replace('_', ' ')}) is in use; stop whatever listens "
                                    f"there{self.move_ports}")
        # the object store only when something uses it (an s3:// archive, Tansu's s3 engine): ~1 s less at start
        self.stack = EmbeddedStack(s, with_s3=s.archive.url.startswith("s3://"))
        try:
            self.stack.up()
        except StackError as e:
            self.stack.down()
            raise PipelineError(str(e)) from None
        from fabricflow.kafka import ensure_topics

        ensure_topics(s.kafka)
        # All at once: each waits for what it needs itself (Kafka, the group join), so their starts overlap.
        self._spawn("ingest", ["ingest"])
        self._spawn("processors", ["process"])
        if self.archive:
            self._spawn("archive", ["sink", "archive"])
        if self.metrics:
            self._spawn("metrics", ["sink", "metrics"])
        if self.console:
            self._spawn("console", ["console"])
        self._wait_http("ingest", f"http://127.0.0.1:{self.ports.ingest_metrics}/healthz")
        self._wait_log("processors", "processors ready in", 90)
        if self.metrics:
            self._wait_http("metrics", f"{self.metrics_url.rsplit('/', 1)[0]}/healthz")
        if self.console:
            self._wait_http("console", self.console_url + "api/status")
        return self

    @property
    def metrics_url(self) -> str:
        """Prometheus scrape URL of the flow-metrics sink."""
        return f"http://127.0.0.1:{self.ports.flow_metrics}/metrics"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.console}/"

    def stop(self) -> None:
        """Ingest first: at exit it publishes its last batches and quality windows; then, after
        ``DRAIN_AFTER_INGEST_S`` for the consumers to read them, every other service at once."""
        ingest = self.procs.get("ingest")
        if ingest is not None and ingest.poll() is None:
            self._term(ingest)
            self._reap(ingest)
            time.sleep(DRAIN_AFTER_INGEST_S)
        for name in ("processors", "archive", "metrics", "console"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                self._term(proc)
        for proc in self.procs.values():
            self._reap(proc)
        self.procs.clear()
        if self.stack is not None:
            self.stack.down()

    @staticmethod
    def _term(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    @staticmethod
    def _reap(proc: subprocess.Popen) -> None:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def __enter__(self) -> "LocalPipeline":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers

    def log_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def service_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A service's environment: the caller's without ``FABRICFLOW_*`` (the config file says everything), plus
        ``extra`` (e.g. per-instance ports of a second worker)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
        env.update(extra or {})
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.log_path(name), "ab")
        try:
            self.procs[name] = subprocess.Popen(
                [self.python, "-m", "cli", "--config", str(self.config_path), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.service_env(env),
                cwd=self.state_dir,
                start_new_session=True,
            )
        finally:
            log.close()

    def _check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise PipelineError(f"{name} exited with status {proc.returncode}; last lines of {self.log_path(name)}:\n{tail(self.log_path(name))}")

    def _wait_http(self, name: str, url: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive(name)
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise PipelineError(f"{name} not ready after {timeout_s:.0f}s; last lines of its log:\n{tail(self.log_path(name))}")

    def _wait_log(self, name: str, needle: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive(name)
            try:
                if needle in self.log_path(name).read_text(errors="replace"):
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise PipelineError(f"{name} not ready after {timeout_s:.0f}s; last lines of its log:\n{tail(self.log_path(name))}")

    def check(self) -> None:
        """Raise if any service died."""
        for name in self.procs:
            self._check_alive(name)

    def targets(self) -> dict[str, str]:
        p = self.ports
        return {"sflow": f"127.0.0.1:{p.sflow}", "netflow9": f"127.0.0.1:{p.netflow}", "ipfix": f"127.0.0.1:{p.ipfix}",
                "marks": f"127.0.0.1:{p.marks}"}


def udp_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


__all__ = ["LocalPipeline", "PipelinePorts", "PipelineError", "port_free"]
