"""The pipeline under test for bench/pipeline.py: one checkout's services with N workers each, and what the bench
reads from them (CPU per service from /proc, progress from their /metrics, rows in Kafka and in the archive, output
digests).

:class:`BenchPipeline` extends ``devtools.runner.LocalPipeline`` (the embedded stack, one generated config file,
one ``fabricflow`` subprocess per service, as an operator runs them) with: the interpreter of the checkout under
test (``<checkout>/.venv/bin/python``; the baseline's services never import this tree), ``ingest.workers: N``
(SO_REUSEPORT), N processors workers in one group (each with its own datadir and ports) and N archive sinks in one
group (each with its own metrics port), the flow-metrics sink and optionally the console.

Not a benchmark: imported by bench/pipeline.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.chaos import read_metrics
from bench.common import cpu_seconds
from devtools.runner import LocalPipeline, PipelineError, PipelinePorts, udp_free
from devtools.stack import EmbeddedStack, StackError, port_free, tail

HOUR_MS = 3_600_000
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: what the bench reads from each service's /metrics (a scrape renders only these)
PROGRESS = {
    "ingest": ("fabricflow_ingest_kafka_delivered_records_total", "fabricflow_ingest_kafka_dropped_records_total",
               "fabricflow_ingest_kafka_failed_records_total", "fabricflow_ingest_socket_drops_total",
               "fabricflow_ingest_records_total"),
    "processors": ("fabricflow_processors_records_total", "fabricflow_processors_detect_records_total",
                   "fabricflow_processors_shuffle_messages_total", "fabricflow_processors_errors_total",
                   "fabricflow_processors_too_late_records", "fabricflow_processors_shards"),
    "archive": ("fabricflow_sink_rows_received_total", "fabricflow_sink_rows_written_total",
                "fabricflow_sink_errors_total", "fabricflow_sink_buffered_rows"),
}


def ports_from(base: int, workers: int) -> tuple[PipelinePorts, dict[str, int]]:
    """The pipeline's ports from ``base``: 20 fixed ones, then a block of ``workers`` ports per kind."""
    p = PipelinePorts(kafka=base, s3=base + 1, sflow=base + 2, netflow=base + 3, ipfix=base + 4, flow_metrics=base + 5,
                      console=base + 6, console_metrics=base + 7, marks=base + 8, s3_base=base + 10, ingest_metrics=base + 20,
                      processors_web=base + 20 + workers, processors_metrics=base + 20 + 2 * workers,
                      archive_metrics=base + 20 + 3 * workers)
    return p, {"first": base, "last": base + 20 + 4 * workers - 1}


def service_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a service: no FABRICFLOW_* of the caller (the config file says everything) and no
    PYTHONPATH (a baseline's services must import the baseline, not this tree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_") and k != "PYTHONPATH"}
    env.update(extra or {})
    return env


@dataclass
class Code:
    """A checkout under test and the interpreter of its own virtualenv."""

    label: str
    root: Path
    python: str

    @classmethod
    def of(cls, label: str, root: str | Path) -> "Code":
        root = Path(root).resolve()
        py = root / ".venv" / "bin" / "python"
        if not py.exists():
            raise SystemExit(f"{label}: {py} not found (run `make venv` in {root})")
        return cls(label, root, str(py))

    def config_dump(self, config: Path) -> dict:
        """``fabricflow config dump`` of this checkout for ``config``: its effective settings (topic names...)."""
        r = subprocess.run([self.python, "-m", "cli", "--config", str(config), "config", "dump"], capture_output=True,
                           text=True, env=service_env(), cwd=config.parent, timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"{self.label}: `fabricflow config dump` failed:\n{r.stderr[-2000:]}")
        return yaml.safe_load(r.stdout)


class BenchPipeline(LocalPipeline):
    """LocalPipeline with the checkout's interpreter, N workers per scaled service, and per-service pids."""

    def __init__(self, state_dir: Path, code: Code, workers: int, partitions: int, inventory: str, base_port: int,
                 console: bool = False, extra: dict | None = None):
        ports, self.port_span = ports_from(base_port, workers)
        extra = {k: dict(v) for k, v in (extra or {}).items()}
        extra.setdefault("kafka", {})["partitions"] = partitions
        extra.setdefault("ingest", {})["workers"] = workers
        super().__init__(state_dir, inventory=inventory, ports=ports, archive=True, metrics=True, console=console,
                         extra=extra, python=code.python)
        self.code, self.workers, self.partitions = code, workers, partitions
        self.dump: dict = {}

    # ------------------------------------------------------------------ ports of the scaled services

    def metrics_ports(self, kind: str) -> list[int]:
        p = self.ports
        first = {"ingest": p.ingest_metrics, "processors": p.processors_metrics, "archive": p.archive_metrics}[kind]
        return [first + i for i in range(self.workers)]

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "BenchPipeline":
        busy = [q for q in range(self.port_span["first"], self.port_span["last"] + 1) if not port_free(q)]
        if busy:
            raise PipelineError(f"ports in use: {busy[:10]}; choose another --port-base")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.settings_dict(), sort_keys=False))
        s = self.settings()
        for port in (self.ports.sflow, self.ports.netflow, self.ports.ipfix):
            if not udp_free(port):
                raise PipelineError(f"UDP port 127.0.0.1:{port} is in use; choose another --port-base")
        self.dump = self.code.config_dump(self.config_path)
        self.stack = EmbeddedStack(s, with_s3=True)
        try:
            self.stack.up()
        except StackError as e:
            self.stack.down()
            raise PipelineError(str(e)) from None
        from fabricflow.kafka import ensure_topics

        ensure_topics(s.kafka)  # the final partition count, before any service starts (Tansu cannot add any)
        self._spawn("ingest", ["ingest"])
        for port in self.metrics_ports("ingest"):
            self._wait_ready("ingest", port, 60)
        p = self.ports
        for i in range(self.workers):
            self._spawn(f"processors{i}", ["process"], {
                "FABRICFLOW_PROCESSORS__DATADIR": str(self.state_dir / f"faust{i}"),
                "FABRICFLOW_PROCESSORS__WEB_PORT": str(p.processors_web + i),
                "FABRICFLOW_PROCESSORS__METRICS_PORT": str(p.processors_metrics + i)})
            self._spawn(f"archive{i}", ["sink", "archive"], {"FABRICFLOW_ARCHIVE__METRICS_PORT": str(p.archive_metrics + i)})
        self._spawn("metrics", ["sink", "metrics"])
        if self.console:
            self._spawn("console", ["console"])
        for i in range(self.workers):
            self._wait_log(f"processors{i}", "Worker ready", 180)
            self._wait_ready(f"archive{i}", p.archive_metrics + i, 120)
        self._wait_ready("metrics", p.flow_metrics, 60)
        if self.console:
            self._wait_http("console", self.console_url + "api/status", 60)
        self._wait_assigned(s.kafka.session_timeout_ms / 1000 * 3 + 30)
        return self

    def settings_dict(self) -> dict:
        """LocalPipeline's settings without the ``marks://`` listener: the bench sends no marks, and a baseline from
        before marks existed rejects the scheme."""
        d = super().settings_dict()
        d["ingest"]["listen"] = [u for u in d["ingest"]["listen"] if not u.startswith("marks://")]
        return d

    def _wait_ready(self, name: str, port: int, timeout_s: float) -> None:
        """Until the service's ``/readyz`` answers 200; a checkout from before ``/readyz`` (404) by its ``/healthz``.
        (Ingest binds its sockets and answers ``/healthz`` before it can decode: its readiness is ``/readyz``.)"""
        deadline = time.monotonic() + timeout_s
        path = "/readyz"
        while time.monotonic() < deadline:
            self._check_alive(name)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    path = "/healthz"
            except OSError:
                pass
            time.sleep(0.2)
        raise PipelineError(f"{name} not ready after {timeout_s:.0f} s; last lines of {self.log_path(name)}:\n"
                            f"{tail(self.log_path(name))}")

    def _wait_assigned(self, timeout_s: float) -> None:
        """Until the processors group settled: every worker got an assignment and none came for 8 s (a joining worker
        makes the others rebalance; the archive sinks' group settles in the same time, same session timeout)."""
        deadline = time.monotonic() + timeout_s
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            self.check()
            counts = [self.log_path(f"processors{i}").read_text(errors="replace").count("Setting newly assigned partitions")
                      for i in range(self.workers)]
            if counts != last:
                last, since = counts, time.monotonic()
            elif all(counts) and time.monotonic() - since >= 8:
                return
            time.sleep(1)
        raise PipelineError(f"the processors group did not settle within {timeout_s:.0f} s (assignments per worker: {last})")

    def service_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return service_env(extra)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()
        if self.stack is not None:
            self.stack.down()

    # ------------------------------------------------------------------ what the bench reads

    def pids(self) -> dict[str, list[int]]:
        """Service -> its process ids (each counted with its descendants); broker and object store apart."""
        out: dict[str, list[int]] = {}
        for name, proc in self.procs.items():
            out.setdefault(re.sub(r"\d+$", "", name), []).append(proc.pid)
        if self.stack is not None:
            for name, svc in (("broker", self.stack.broker), ("s3", self.stack.s3)):
                pid = svc.pid()
                if pid is not None:
                    out[name] = [pid]
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system, all threads, live and reaped children) per service so far, and the bench's."""
        out = {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in self.pids().items()}
        t = os.times()
        out["bench"] = t.user + t.system
        return out

    def progress(self) -> dict[str, float] | None:
        """The progress counters of the scaled services, summed over their instances; None when one did not answer
        (a busy service can take seconds: the caller skips that probe rather than read a missing counter as 0)."""
        out: dict[str, float] = {}
        for kind, names in PROGRESS.items():
            for port in self.metrics_ports(kind):
                got = read_metrics(port, names, timeout_s=10)
                if got is None:
                    return None
                for k, v in got.items():
                    out[k] = out.get(k, 0.0) + v
        return out

    def topic(self, name: str) -> str:
        """Topic ``kafka.topics.<name>`` as the checkout under test configures it (``fabricflow config dump``)."""
        return self.dump["kafka"]["topics"][name]


class TopicCounter:
    """Rows per event hour in batch topics, read incrementally from the start (Tansu's high watermark is wrong:
    count what is read, until nothing new comes for ``idle_s``)."""

    def __init__(self, settings, topics: list[str], partitions: int):
        from confluent_kafka import Consumer, TopicPartition

        from fabricflow.kafka import client_config

        self.c = Consumer({**client_config(settings.kafka), "group.id": "bench-pipeline-" + uuid.uuid4().hex[:8],
                           "enable.auto.commit": False, "fetch.max.bytes": 64_000_000})
        self.c.assign([TopicPartition(t, p, -2) for t in topics for p in range(partitions)])  # -2: the beginning
        self.rows: dict[str, dict[int, int]] = {t: {} for t in topics}  # topic -> hour index -> rows

    def read(self, idle_s: float = 3.0, deadline_s: float = 600.0) -> None:
        import numpy as np

        from schemas import codec

        last = t0 = time.monotonic()
        while time.monotonic() - last < idle_s and time.monotonic() - t0 < deadline_s:
            for m in self.c.consume(2000, 0.5):
                if m.error() is not None:
                    continue
                arr = codec.decode_batch(m.value())
                hours, n = np.unique(np.asarray(arr["time_end_ms"]) // HOUR_MS, return_counts=True)
                per = self.rows[m.topic()]
                for h, k in zip(hours.tolist(), n.tolist()):
                    per[h] = per.get(h, 0) + k
                last = time.monotonic()

    def close(self) -> None:
        self.c.close()


def archive_rows(settings, dataset: str, hour: int) -> tuple[int, int]:
    """(rows in ``dataset``'s files of event hour ``hour`` (index since the epoch), rows in files whose Kafka
    offset range overlaps another file's of the same partition: written twice)."""
    import pyarrow.parquet as pq

    from sinks.archive.fs import archive_filesystem
    from sinks.archive.layout import parse_key

    fs, root = archive_filesystem(settings.archive)
    fs.invalidate_cache()
    day = time.strftime("%Y-%m-%d", time.gmtime(hour * 3600))
    d = f"{root}/{dataset}/dt={day}/hour={time.gmtime(hour * 3600).tm_hour:02d}"
    try:
        files = [f for f in fs.find(d) if f.endswith(".parquet")]
    except FileNotFoundError:
        return 0, 0
    rows, spans = 0, {}
    for f in files:
        with fs.open(f, "rb") as fh:
            n = pq.ParquetFile(fh).metadata.num_rows
        rows += n
        k = parse_key(f)
        if k is not None:
            spans.setdefault(k.partition, []).append((k.first_offset, k.last_offset, n))
    dup = 0
    for s in spans.values():
        s.sort()
        dup += sum(nb for (_a0, a1, _na), (b0, _b1, nb) in zip(s, s[1:]) if b0 <= a1)
    return rows, dup


def archive_totals(settings, hour: int) -> str:
    """Digest of ``flows_enriched`` totals (records, bytes, estimated bytes) per (src_node, dst_node, category) for
    event hour ``hour``: equal archives give equal digests, whatever files and row order they have."""
    import duckdb
    import pyarrow.dataset as ds

    from sinks.archive.fs import archive_filesystem

    fs, root = archive_filesystem(settings.archive)
    fs.invalidate_cache()
    day = time.strftime("%Y-%m-%d", time.gmtime(hour * 3600))
    d = f"{root}/flows_enriched/dt={day}/hour={time.gmtime(hour * 3600).tm_hour:02d}"
    t = ds.dataset([f for f in fs.find(d) if f.endswith(".parquet")], filesystem=fs, format="parquet")
    con = duckdb.connect()
    con.register("t", t.to_table(columns=["src_node", "dst_node", "category", "bytes", "bytes_est"]))
    rows = con.execute("select src_node, dst_node, category, count(*), sum(bytes), sum(bytes_est) from t "
                       "group by all order by all").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16] + f" ({len(rows)} cells)"


def output_digests(settings, topics: dict[str, str], partitions: int, idle_s: float = 3.0) -> dict[str, str]:
    """Per output topic (kind -> topic), a digest of its (key, value) messages as a set (order and repeats aside:
    workers interleave differently, and delivery is at least once). Alerts by key only: an alert carries the flows
    of the batch that raised it, and batches are cut differently with more workers."""
    from confluent_kafka import Consumer, TopicPartition

    from fabricflow.kafka import client_config

    c = Consumer({**client_config(settings.kafka), "group.id": "bench-outputs-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False})
    c.assign([TopicPartition(t, p, -2) for t in topics.values() for p in range(partitions)])
    seen: dict[str, set] = {t: set() for t in topics.values()}
    last = t0 = time.monotonic()
    while time.monotonic() - last < idle_s and time.monotonic() - t0 < 300:
        for m in c.consume(2000, 0.5):
            if m.error() is None:
                seen[m.topic()].add((m.key() or b"", b"" if m.topic() == topics.get("alert") else m.value()))
                last = time.monotonic()
    c.close()
    out = {}
    for kind, topic in sorted(topics.items()):
        h = hashlib.sha256()
        for key, value in sorted(seen[topic]):
            h.update(len(key).to_bytes(4, "little") + key + len(value).to_bytes(4, "little") + value)
        out[kind] = f"{h.hexdigest()[:16]} ({len(seen[topic])})"
    return out
