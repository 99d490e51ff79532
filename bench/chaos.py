"""Chaos bench: faults under steady load on the embedded stack, with the figures docs/reliability.md tabulates.

One scenario per run of the whole local pipeline (``devtools.runner.LocalPipeline``: Tansu, SeaweedFS,
ingest, processors, archive sink as separate ``fabricflow`` processes on 127.0.0.1). A paced sender
plays NetFlow v9 (softflowd's templates, 25 records per datagram, ``bench.common``) at ``--rate``
records/s for ``--seconds``; at a third of the run the fault is injected:

=================  =============================================================================
scenario           fault
=================  =============================================================================
ingest-kill        SIGKILL the ingest process, start it again
processors-kill    SIGKILL one of two processors workers, start it again
broker-restart     stop Tansu (s3 storage engine: data and offsets persist), start it again
s3-stop            stop SeaweedFS for ``--outage`` seconds (30) while the sink writes, start it again
archive-kill       SIGKILL the archive sink while it holds buffered rows (mid-file), start it again
=================  =============================================================================

Figures per scenario (JSON with ``--json``):

* ``archived_after_load_s``: how long after the load the archive held every Kafka record (the sink catches up
  on a backlog; polled every 10 s, at most ``--drain``);
* ``kafka_records``: flow records in ``flows.raw.v1`` (counted by consuming the whole topic: what ingest
  had acknowledged, plus at most what was in flight when it died); ``archive_rows``: rows of the
  ``flows_raw`` dataset; ``lost`` = kafka - archive when positive, ``duplicated`` = rows in files whose
  Kafka offset ranges overlap another file of the same partition (the sink's exactly-once key);
* ``sent_records`` and ``ingest_dropped`` (socket drops + producer drops + records sent while ingest was
  down: UDP has no retransmission, so ingest-kill loses what arrives while it is down, by design);
* ``recover_s``: from the fault until the faulted service is healthy again and its progress counter moves;
* ``timeline``: the key metrics every second (ingest delivered/dropped, sink rows written/errors,
  processors shuffle messages/errors) to see what an operator would have seen.

Output windows against an uninterrupted run are not compared here (the sender's flow times are fixed, so
every record lands in one window): see docs/reliability.md for how to do that with ``fabricflow replay``.

Bounded: ``--seconds`` of load, ``--drain`` seconds to settle, every wait has a deadline; everything is
stopped on exit. Heavy on a 2-core machine: the sender, Tansu, SeaweedFS and four Python services share it.

    .venv/bin/python bench/chaos.py --scenario ingest-kill --rate 100000 --seconds 120 --port-base 31520 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

_BENCH = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
sys.path.insert(0, str(_BENCH.parent))

from bench.common import Sender, netflow_stream  # noqa: E402
from devtools.runner import LocalPipeline, PipelinePorts  # noqa: E402

SCENARIOS = ("ingest-kill", "processors-kill", "broker-restart", "s3-stop", "archive-kill")


def scrape(port: int) -> dict[str, float]:
    """Sum of every sample per metric name (labels folded) from a /metrics endpoint; {} when down."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


class Timeline(threading.Thread):
    """Scrapes the services' metrics once a second."""

    KEYS = {"ingest": ("fabricflow_ingest_kafka_delivered_records_total", "fabricflow_ingest_kafka_dropped_records_total",
                       "fabricflow_ingest_socket_drops_total", "fabricflow_ingest_kafka_queue_messages"),
            "archive": ("fabricflow_sink_rows_written_total", "fabricflow_sink_errors_total", "fabricflow_sink_buffered_rows"),
            "processors": ("fabricflow_processors_shuffle_messages_total", "fabricflow_processors_errors_total")}

    def __init__(self, ports: dict[str, int]):
        super().__init__(daemon=True)
        self.ports, self.rows, self.stop_evt = ports, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self.stop_evt.wait(1.0):
            row = {"t": round(time.monotonic() - self.t0, 1)}
            for svc, port in self.ports.items():
                m = scrape(port)
                row[svc + "_up"] = bool(m)
                for k in self.KEYS.get(svc.split("#")[0], ()):
                    if k in m:
                        row[f"{svc}:{k.split('_', 2)[2]}"] = m[k]
            self.rows.append(row)


def wait_until(pred, timeout_s: float, step: float = 0.2) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(step)
    return None


def kill9(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def count_topic(settings, topic: str, idle_s: float = 5.0, deadline_s: float = 300.0) -> int:
    """Flow records in ``topic``, read from the beginning with a fresh group until idle (Tansu's high
    watermark cannot be trusted: count what is read)."""
    from confluent_kafka import Consumer

    from schemas import codec

    c = Consumer({**settings.kafka.client_config(), "group.id": "chaos-count-" + uuid.uuid4().hex[:8],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    n, last, t0 = 0, time.monotonic(), time.monotonic()
    while time.monotonic() - last < idle_s and time.monotonic() - t0 < deadline_s:
        msgs = c.consume(500, 0.5)
        for m in msgs:
            if m.error() is None:
                n += len(codec.decode_batch(m.value()))
                last = time.monotonic()
    c.close()
    return n


def archive_counts(settings) -> tuple[int, int]:
    """(rows of flows_raw, rows in files whose offset range overlaps another file of the same partition)."""
    import pyarrow.parquet as pq

    from sinks.fs import archive_filesystem
    from sinks.layout import parse_key

    fs, root = archive_filesystem(settings.archive)
    fs.invalidate_cache()
    files = [f for f in fs.find(f"{root}/flows_raw") if f.endswith(".parquet")]
    rows, ranges = 0, {}
    for f in files:
        n = pq.ParquetFile(fs.open(f, "rb")).metadata.num_rows
        rows += n
        k = parse_key(f)
        if k is not None:
            ranges.setdefault(k.partition, []).append((k.first_offset, k.last_offset, n))
    dup = 0
    for spans in ranges.values():
        spans.sort()
        for (a0, a1, _na), (b0, _b1, nb) in zip(spans, spans[1:]):
            if b0 <= a1:
                dup += nb
    return rows, dup


def run(scenario: str, rate: float, seconds: float, port_base: int, outage: float, drain: float, state: Path) -> dict:
    ports = PipelinePorts(kafka=port_base, s3=port_base + 1, s3_base=port_base + 20, sflow=port_base + 2,
                          netflow=port_base + 3, ipfix=port_base + 4, ingest_metrics=port_base + 5,
                          processors_web=port_base + 6, archive_metrics=port_base + 7, processors_metrics=port_base + 8,
                          flow_metrics=port_base + 11, console=port_base + 12)
    # retention off: the sender's flow times are fixed in the past, and retention goes by event time
    extra = {"archive": {"idle_flush_s": 5, "retention_interval_s": 0}, "ingest": {"template_save_s": 5}}
    if scenario == "broker-restart":
        extra["stack"] = {"storage_engine": "s3"}
    pipe = LocalPipeline(state, inventory=str(_BENCH.parent / "scenarios" / "inventory.example.yaml"), ports=ports, extra=extra,
                         metrics=False)  # the flow-metrics sink plays no part in the faults measured here
    result: dict = {"scenario": scenario, "rate_records_s": rate, "seconds": seconds}
    with pipe:
        s = pipe.settings()
        metrics = {"ingest": ports.ingest_metrics, "archive": ports.archive_metrics, "processors": ports.processors_metrics}
        second = None
        if scenario == "processors-kill":  # a second worker in the same group, own datadir and ports
            second = _spawn_worker(pipe, 2, port_base + 9, port_base + 10)
            metrics["processors#2"] = port_base + 10
        tl = Timeline(metrics)
        tl.start()
        stream = netflow_stream(9)
        per_dgram = stream.records_per_datagram
        sender = Sender(stream, ports.netflow)
        sent = {}
        send_thread = threading.Thread(target=lambda: sent.update(vars(sender.blast(rate / per_dgram, seconds))), daemon=True)
        t_start = time.monotonic()
        send_thread.start()
        time.sleep(seconds / 3)
        fault_at = time.monotonic() - t_start
        recover = _fault(scenario, pipe, second, metrics, outage)
        result.update(fault_at_s=round(fault_at, 1), recover_s=None if recover is None else round(recover, 1))
        send_thread.join(seconds + 60)
        t_end = time.monotonic()
        result["sent_records"] = int(sent.get("records", 0))
        result["kafka_records"] = count_topic(s, s.kafka.topics.flows_raw)
        # The sink may still be catching up (on 2 shared cores it archives slower than the load comes in): poll the
        # archive until it holds every Kafka record, or stops growing for 6 polls, or --drain seconds passed.
        rows = dup = 0
        stalled, last = 0, -1
        while time.monotonic() - t_end < drain:
            rows, dup = archive_counts(s)
            if rows - dup >= result["kafka_records"]:
                break
            stalled = stalled + 1 if rows == last else 0
            if stalled >= 6:  # a minute without a new file: the sink writes ~1M-row files in bursts
                break
            last = rows
            time.sleep(10)
        tl.stop_evt.set()
        result["archived_after_load_s"] = round(time.monotonic() - t_end, 1)
        result.update(archive_rows=rows, duplicated=dup, lost=max(0, result["kafka_records"] - (rows - dup)))
        result["timeline"] = tl.rows
        result["restarted"] = getattr(pipe, "restarted", [])
        if second is not None:
            kill9(second)
    return result


def _spawn_worker(pipe: LocalPipeline, n: int, web_port: int, metrics_port: int):
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    env.update({"FABRICFLOW_PROCESSORS__DATADIR": str(pipe.state_dir / f"faust{n}"),
                "FABRICFLOW_PROCESSORS__WEB_PORT": str(web_port), "FABRICFLOW_PROCESSORS__METRICS_PORT": str(metrics_port)})
    log = open(pipe.state_dir / f"processors{n}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "cli", "--config", str(pipe.config_path), "process"], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=pipe.state_dir,
                            start_new_session=True)


def _progress(port: int, key: str, timeout_s: float = 180) -> float | None:
    """Seconds until the service answers /healthz and ``key`` grows."""
    t0 = time.monotonic()
    if wait_until(lambda: healthy(port), timeout_s) is None:
        return None
    base = scrape(port).get(key, 0.0)
    if wait_until(lambda: scrape(port).get(key, 0.0) > base, timeout_s) is None:
        return None
    return time.monotonic() - t0


def _fault(scenario: str, pipe: LocalPipeline, second, metrics: dict, outage: float) -> float | None:
    t0 = time.monotonic()
    if scenario == "ingest-kill":
        kill9(pipe.procs["ingest"])
        pipe._spawn("ingest", ["ingest"])
        r = _progress(metrics["ingest"], "fabricflow_ingest_kafka_delivered_records_total")
    elif scenario == "processors-kill":
        kill9(pipe.procs["processors"])
        pipe._spawn("processors", ["process"])
        r = _progress(metrics["processors"], "fabricflow_processors_shuffle_messages_total")
    elif scenario == "broker-restart":
        pipe.stack.stop_broker()
        pipe.stack.start_broker()
        r = _progress(metrics["ingest"], "fabricflow_ingest_kafka_delivered_records_total")
    elif scenario == "s3-stop":
        from devtools.stack import _terminate

        pid = pipe.stack.s3.pid()
        if pid is not None:
            _terminate(pid, 15)
        pipe.stack.s3.pid_file.unlink(missing_ok=True)
        time.sleep(outage)
        pipe.stack._start_seaweedfs()
        if pipe.procs["archive"].poll() is not None:  # it exited (one line, status 1): restart it as a supervisor would
            pipe.restarted = getattr(pipe, "restarted", []) + [f"archive exited with status {pipe.procs['archive'].returncode}"]
            pipe._spawn("archive", ["sink", "archive"])
        r = _progress(metrics["archive"], "fabricflow_sink_rows_written_total")
    elif scenario == "archive-kill":
        wait_until(lambda: scrape(metrics["archive"]).get("fabricflow_sink_buffered_rows", 0) > 0, 60, 0.05)
        kill9(pipe.procs["archive"])
        pipe._spawn("archive", ["sink", "archive"])
        r = _progress(metrics["archive"], "fabricflow_sink_rows_written_total")
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    return None if r is None else time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="ingest-kill", help=f"one of {', '.join(SCENARIOS)}, or all")
    ap.add_argument("--rate", type=float, default=100_000, help="flow records per second sent")
    ap.add_argument("--seconds", type=float, default=120, help="seconds of load")
    ap.add_argument("--outage", type=float, default=30, help="s3-stop: seconds the object store is down")
    ap.add_argument("--drain", type=float, default=300, help="at most this many seconds after the load for the archive to catch up")
    ap.add_argument("--port-base", type=int, default=31520, help="first of ~30 loopback ports")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="keep logs and state in this directory (default: a temporary one, removed)")
    a = ap.parse_args()
    names = SCENARIOS if a.scenario == "all" else (a.scenario,)
    results = []
    for name in names:
        if a.keep:
            d = Path(a.keep) / name
            d.mkdir(parents=True, exist_ok=True)
            r = run(name, a.rate, a.seconds, a.port_base, a.outage, a.drain, d)
        else:
            with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as d:
                r = run(name, a.rate, a.seconds, a.port_base, a.outage, a.drain, Path(d))
        results.append(r)
        print(f"{name}: sent {r['sent_records']} kafka {r['kafka_records']} archive {r['archive_rows']} "
              f"lost {r['lost']} duplicated {r['duplicated']} recover {r['recover_s']} s (fault at {r['fault_at_s']} s), "
              f"archive complete {r['archived_after_load_s']} s after the load",
              flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
