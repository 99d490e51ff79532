"""The separate-worker phase of ``bench/processors.py``: a ``fabricflow process`` subprocess on one CPU, fed from
the embedded broker, timed until its outputs are produced and its offsets committed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from devtools.loadgen import cpu_seconds, pin

REPO = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("FF_BENCH_CODE") or REPO).resolve()  # the code measured (see bench/processors.py)


def pin_tree(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` (threads already started keep their own affinity)."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            pin(int(tid), cpu)
    except OSError:
        pass


def produce_raw(p, raw: list, kw: dict, rate: float = 0.0, rows_of: dict | None = None) -> None:
    """Produce the raw ``(topic, key, value)`` messages with producer ``p``; at ``rate`` flow records/s when given
    (``rows_of``: records per message value by ``id()``), each message once the records before it are due."""
    f0, fed = time.perf_counter(), 0
    for topic, key, value in raw:
        if rate:
            time.sleep(max(0.0, f0 + fed / rate - time.perf_counter()))
            fed += (rows_of or {}).get(id(value), 0)
        while True:
            try:
                p.produce(topic, key=key, value=value, **kw)
                p.poll(0)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def _ready_wallclock(log: Path) -> float | None:
    m = re.search(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[\d+\] \[INFO\] \[\S*Recovery\]: Worker ready",
                  log.read_text(errors="replace"), re.M)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def run_worker(settings, cfg_path: str, workdir: Path, cpu: int, want_enriched: int, want_shuffle: int,
               timeout_s: float, legacy: bool = False, want_records: int = 0, feed=None) -> dict:
    """``feed``: called in a thread once the worker is ready (the raw messages produced at a paced rate; None: they
    were produced before the worker started)."""
    import threading

    from confluent_kafka import Consumer, KafkaError

    t = settings.kafka.topics
    changelog = f"{settings.processors.app_id}-core-state-changelog"
    log = workdir / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    env["PYTHONPATH"] = str(CODE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "--config", cfg_path, "process"],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=str(workdir),
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}) if cpu >= 0 else None,
    )
    c = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": "bench-" + uuid.uuid4().hex[:8],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.max.bytes": 64_000_000})
    subscribed = False  # the changelog topic exists once the worker is ready
    seen = {t.flows_enriched: 0, changelog: 0, t.matrix: 0}
    first_ms: dict[str, int] = {}
    last_ms: dict[str, int] = {}
    ready = None
    cpu_ready = cpu_done = 0.0
    detect_done = durable = None
    committed = None
    port = settings.processors.metrics_port
    next_scrape = 0.0
    period = SCRAPE_PERIOD_S  # seconds between scrapes of the worker's /metrics (and the longest consume wait)
    scrapes = 0
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}; see {log}")
            if ready is None:
                ready = _ready_wallclock(log)
                if ready is None:
                    time.sleep(0.1)
                    continue
                cpu_ready = cpu_seconds(proc.pid)
                if feed is not None:
                    threading.Thread(target=feed, daemon=True).start()
            if not subscribed:
                c.subscribe([t.flows_enriched, changelog, t.matrix])
                subscribed = True
            now = time.monotonic()
            if not legacy and now >= next_scrape and (detect_done is None or durable is None):
                next_scrape = now + period
                mt = _scrape(port, _PROGRESS)
                scrapes += 1
                if "fabricflow_processors_detect_records_total" in mt:  # every input flow record through the detectors
                    applied = mt["fabricflow_processors_detect_records_total"]
                    finished = applied >= want_records
                    # The end time is known to one scrape period (SCRAPE_PERIOD_S); the worker's CPU at "done" is
                    # not: it idles once done. Each scrape costs the worker CPU (~0.4 ms, and its GIL).
                else:  # code before that metric: one shuffle message count for a given input
                    finished = mt.get("fabricflow_processors_shuffle_messages_total", 0) >= want_shuffle
                if detect_done is None and finished:
                    detect_done, cpu_done = time.time(), cpu_seconds(proc.pid)
                    # how many shuffle messages the worker applied (prepare's grouping decides), for the commit check
                    want_shuffle = int(mt.get("fabricflow_processors_shuffle_messages_total", want_shuffle))
                if detect_done is not None and mt.get("fabricflow_processors_unsnapshotted_messages", 1) == 0:
                    durable = time.time()
            for m in c.consume(2000, period):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        print("consumer:", m.error())
                    continue
                topic = m.topic()
                seen[topic] += 1
                ts = m.timestamp()[1]
                first_ms[topic] = min(first_ms.get(topic, ts), ts)
                last_ms[topic] = max(last_ms.get(topic, 0), ts)
            if legacy and detect_done is None and seen[changelog] >= want_shuffle:  # one snapshot per shuffle message
                detect_done = durable = last_ms[changelog] / 1000.0
                cpu_done = cpu_seconds(proc.pid)
            if seen[t.flows_enriched] >= want_enriched and detect_done is not None and durable is not None:
                break
        if durable is not None and not legacy:
            committed = _wait_committed(settings, want_shuffle, until=time.monotonic() + 15)
    finally:
        c.close()
        metrics = _scrape(settings.processors.metrics_port) if settings.processors.metrics_port else {}
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
    done = seen[t.flows_enriched] >= want_enriched and detect_done is not None
    return {"done": done, "seen": seen, "first_ms": first_ms, "last_ms": last_ms, "ready": ready,
            "detect_done": detect_done, "durable": durable, "committed": committed,
            "cpu": (cpu_done - cpu_ready) if done else None, "changelog": changelog, "metrics": metrics, "log": str(log),
            "scrapes": scrapes}


def _wait_committed(settings, want: int, until: float) -> tuple[int, int]:
    """(committed offsets summed over the shuffle partitions for the worker's group, ``want``) once all ``want``
    shuffle messages are committed or at ``until``: the worker acknowledges shuffle messages only once a snapshot
    covers them, then Faust commits them. (Offsets start at 0, so the sum counts messages.)"""
    from confluent_kafka import Consumer, TopicPartition

    g = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": settings.processors.app_id,
                  "enable.auto.commit": False})
    try:
        tps = [TopicPartition(settings.kafka.topics.shuffle, p) for p in range(settings.kafka.partitions)]
        while True:
            done = sum(max(tp.offset, 0) for tp in g.committed(tps, timeout=5))
            if done >= want or time.monotonic() > until:
                return done, want
            time.sleep(0.5)
    finally:
        g.close()


#: Seconds between the end-of-run check's scrapes of the worker's /metrics. Until 2026-12-06 it was 0.1 s, and 10 ms
#: for the last 10 % of the records: ~400 scrapes per run at ~0.4 ms of the worker's CPU each (measured against
#: prometheus_client's handler, name[] filtered), ~3 % of the worker CPU the bench reported. 0.25 s: ~80 scrapes.
SCRAPE_PERIOD_S = 0.25

# the metrics the end-of-run check reads: rendering only these keeps a scrape's cost to the worker small
_PROGRESS = ("fabricflow_processors_detect_records_total", "fabricflow_processors_shuffle_messages_total",
             "fabricflow_processors_unsnapshotted_messages")


def _scrape(port: int, names: tuple[str, ...] = ()) -> dict[str, float]:
    import urllib.parse
    import urllib.request

    query = ("?" + urllib.parse.urlencode([("name[]", n) for n in names])) if names else ""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=3).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("fabricflow_processors_") and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
