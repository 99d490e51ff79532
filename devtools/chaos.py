"""Chaos harness: faults under steady load on the embedded stack, with the figures docs/reliability.md tabulates.

One scenario per run of the whole local pipeline (``devtools.runner.LocalPipeline``): a paced NetFlow v9
sender at ``--rate`` records/s for ``--seconds``, the fault (ingest-kill, processors-kill,
broker-restart, s3-stop, archive-kill, or none) injected at a third of the run, a supervisor restarting
services that exit by themselves. Reported: Kafka records against archived rows (lost, duplicated),
recovery time, live output windows against a replay of the same records, CPU per service and a
per-second timeline. What each figure means: docs/reliability.md, "The chaos suite".

The harness behind ``bench/chaos.py`` (its command line) and tests/e2e/test_chaos.py; the Kafka, archive and
replay accounting is :mod:`devtools.chaos_outputs`.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from devtools.chaos_outputs import (HOSTS, archive_counts, compare_outputs, count_topic, live_outputs, read_raw,
                                   replay_outputs, write_inventory)
from devtools.loadgen import Sender, netflow_stream
from devtools.runner import LocalPipeline, PipelinePorts

SCENARIOS = ("ingest-kill", "processors-kill", "broker-restart", "s3-stop", "archive-kill")
BASELINE = "none"  # the same run without a fault: the CPU budget and the uninterrupted outputs
CLK_TCK = os.sysconf("SC_CLK_TCK")
SINK_RAW_IN = 'fabricflow_sink_rows_received_total{dataset="flows_raw"}'
TOO_LATE_MAIN = 'fabricflow_processors_too_late_records{window="main"}'
TOO_LATE_INCAST = 'fabricflow_processors_too_late_records{window="incast"}'
CLOCK = 1_719_835_200  # export time (unix s) of the first datagram: flow times move one second per second of load
END_SPREAD_MS = 10_000  # flows end up to 10 s before their export (inside processors.allowed_lateness_s, 30 s)
HOSTS = 512  # the sender's host pool (devtools.loadgen.Hosts); write_inventory names every one of them


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            cols = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(cols[11]) + int(cols[12])) / CLK_TCK


class CpuMeter:
    """CPU seconds per service, summed over the processes it had (a killed and restarted service has two)."""

    def __init__(self, pids: dict):
        self.pids = pids  # service -> callable returning its current pid (or None)
        self.total: dict[str, float] = {}
        self._last: dict[int, float] = {}

    def sample(self) -> dict[str, float]:
        for name, get in self.pids.items():
            try:
                pid = get()
            except Exception:  # the service is between a kill and its restart
                pid = None
            if pid is None:
                continue
            c = _proc_cpu(pid)
            if c is None:
                continue
            self.total[name] = self.total.get(name, 0.0) + c - self._last.get(pid, 0.0)
            self._last[pid] = c
        return dict(self.total)


def scrape(port: int, names: tuple[str, ...] = (), timeout_s: float = 1.0) -> dict[str, float]:
    """Sum of every sample per metric name (labels folded) from a /metrics endpoint, and each labelled sample as
    ``name{labels}``; ``names``: only these samples (the endpoint renders only them); {} when down."""
    return read_metrics(port, names, timeout_s) or {}


def read_metrics(port: int, names: tuple[str, ...] = (), timeout_s: float = 1.0) -> dict[str, float] | None:
    """:func:`scrape`, but None when the endpoint did not answer (an empty dict: it answered with none of ``names``,
    e.g. labelled counters before their first sample)."""
    query = ("?" + urllib.parse.urlencode([("name[]", n) for n in names])) if names else ""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=timeout_s) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            if m.group(2):
                out[m.group(1) + m.group(2)] = float(m.group(3))
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
            "archive": ("fabricflow_sink_rows_received_total", "fabricflow_sink_rows_written_total",
                        "fabricflow_sink_errors_total", "fabricflow_sink_buffered_rows", SINK_RAW_IN),
            "processors": ("fabricflow_processors_shuffle_messages_total", "fabricflow_processors_errors_total",
                           TOO_LATE_MAIN, TOO_LATE_INCAST)}

    def __init__(self, ports: dict[str, int], cpu: CpuMeter | None = None):
        super().__init__(daemon=True)
        self.ports, self.rows, self.stop_evt = ports, [], threading.Event()
        self.cpu = cpu
        self.last_late: dict[tuple[str, str], float] = {}
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
                    if k in (TOO_LATE_MAIN, TOO_LATE_INCAST) and k in m:  # a gauge per worker process (since start)
                        self.last_late[(svc, k)] = m[k]
            if self.cpu is not None:
                row["cpu_s"] = {k: round(v, 1) for k, v in self.cpu.sample().items()}
            self.rows.append(row)


class Supervisor(threading.Thread):
    """Restarts a pipeline service that exited by itself, as compose's ``restart: unless-stopped`` would (the
    archive sink exits 1 when the object store fails while it reads the archive index: docs/reliability.md).
    ``skip``: services the fault itself kills and restarts."""

    SERVICES = {"ingest": ["ingest"], "processors": ["process"], "archive": ["sink", "archive"]}

    def __init__(self, pipe: LocalPipeline, skip: tuple[str, ...] = ()):
        super().__init__(daemon=True)
        self.pipe, self.skip = pipe, set(skip)
        self.restarted: list[str] = []
        self.stop_evt = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self.stop_evt.wait(0.5):
            for name, args in self.SERVICES.items():
                proc = self.pipe.procs.get(name)
                if self.stop_evt.is_set() or name in self.skip or proc is None or proc.poll() is None:
                    continue
                self.restarted.append(f"{name} exited with status {proc.returncode} at "
                                      f"{time.monotonic() - self.t0:.0f} s; restarted")
                self.pipe._spawn(name, args)


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


def run(scenario: str, rate: float, seconds: float, port_base: int, outage: float, drain: float, state: Path,
        compare: bool = True, overrides: dict | None = None) -> dict:
    ports = PipelinePorts(kafka=port_base, s3=port_base + 1, s3_base=port_base + 20, sflow=port_base + 2,
                          netflow=port_base + 3, ipfix=port_base + 4, ingest_metrics=port_base + 5,
                          processors_web=port_base + 6, archive_metrics=port_base + 7, processors_metrics=port_base + 8,
                          flow_metrics=port_base + 11, console=port_base + 12, marks=port_base + 9)
    # retention off: the sender's flow times start at CLOCK (in the past), and retention goes by event time
    extra = {"archive": {"idle_flush_s": 5, "retention_interval_s": 0}, "ingest": {"template_save_s": 5}}
    if scenario == "broker-restart":
        extra["stack"] = {"storage_engine": "s3"}
    for section, values in (overrides or {}).items():
        extra.setdefault(section, {}).update(values)
    Path(state).mkdir(parents=True, exist_ok=True)
    inventory = write_inventory(Path(state) / "inventory.yaml")
    pipe = LocalPipeline(state, inventory=str(inventory), ports=ports, extra=extra,
                         metrics=False)  # the flow-metrics sink plays no part in the faults measured here
    result: dict = {"scenario": scenario, "rate_records_s": rate, "seconds": seconds}
    with pipe:
        s = pipe.settings()
        metrics = {"ingest": ports.ingest_metrics, "archive": ports.archive_metrics, "processors": ports.processors_metrics}
        second = None
        if scenario == "processors-kill":  # a second worker in the same group, own datadir and ports
            second = _spawn_worker(pipe, 2, port_base + 9, port_base + 10)
            metrics["processors#2"] = port_base + 10
            # both workers own partitions before the load starts (the join's rebalance is not the fault)
            if wait_until(lambda: "Worker ready" in _read(pipe.state_dir / "processors2.log"), 90, 0.5) is None:
                raise RuntimeError("the second processors worker did not start; see processors2.log")
            time.sleep(s.kafka.session_timeout_ms / 1000 + 5)
        pids = {"ingest": lambda: pipe.procs["ingest"].pid, "processors": lambda: pipe.procs["processors"].pid,
                "archive": lambda: pipe.procs["archive"].pid, "tansu": pipe.stack.broker.pid,
                "seaweedfs": pipe.stack.s3.pid, "bench": os.getpid}
        if second is not None:
            pids["processors#2"] = lambda: second.pid
        cpu = CpuMeter(pids)
        cpu.sample()
        cpu.total.clear()  # start-up is not the load's cost
        tl = Timeline(metrics, cpu)
        tl.start()
        sup = Supervisor(pipe, skip={"ingest-kill": ("ingest",), "processors-kill": ("processors",),
                                     "archive-kill": ("archive",)}.get(scenario, ()))
        sup.start()
        stop_pipe = pipe.stop

        def stop_all():  # the supervisor first, or it would restart what the pipeline stops
            sup.stop_evt.set()
            sup.join(5)
            stop_pipe()

        pipe.stop = stop_all
        stream = netflow_stream(9, end_spread_ms=END_SPREAD_MS, hosts=HOSTS)
        per_dgram = stream.records_per_datagram
        sender = Sender(stream, ports.netflow, unique=False)  # every address is a node of the inventory
        sent = {}
        def send():
            sent.update(vars(sender.blast(rate / per_dgram, seconds, clock=CLOCK)))
            sent["end"] = time.monotonic()

        send_thread = threading.Thread(target=send, daemon=True)
        t_start = time.monotonic()
        send_thread.start()
        time.sleep(seconds / 3)
        fault_at = time.monotonic() - t_start
        recover = _fault(scenario, pipe, second, metrics, outage) if scenario != BASELINE else None
        result.update(fault_at_s=round(fault_at, 1), recover_s=None if recover is None else round(recover, 1))
        send_thread.join(seconds + 60)
        t_end = sent.get("end", time.monotonic())  # the load's end (the fault's recovery may come later)
        result["cpu_load_s"] = {k: round(v, 1) for k, v in cpu.sample().items()}  # the services' cost of the load
        result.update(_lags(tl.rows))
        result["metrics_during_load"] = metrics_summary(list(tl.rows), t_start - tl.t0, t_end - tl.t0)
        result["sent_records"] = int(sent.get("records", 0))
        result["sent_seconds"] = round(sent.get("seconds", 0.0), 1)
        # ingest publishes batches every ingest.batch_max_delay_ms: wait until its deliveries stop before counting
        def delivered() -> float:
            return scrape(ports.ingest_metrics).get("fabricflow_ingest_kafka_delivered_records_total", -1.0)

        snap, since, t_w = delivered(), time.monotonic(), time.monotonic()
        while time.monotonic() - since < 3 and time.monotonic() - t_w < 60:
            time.sleep(0.5)
            now = delivered()
            if now != snap:
                snap, since = now, time.monotonic()
        rep = None
        if compare:  # read flows.raw.v1 once: the count, and the replay (run now, while the sink catches up)
            t_c = time.monotonic()
            try:
                src = read_raw(s)
            except Exception as e:  # noqa: BLE001 - reported; the count still comes from a plain consumer
                result["replay_error"] = f"{type(e).__name__}: {e}"
                src = None
            if src is not None:
                result["kafka_records"] = len(src.flows)
                rep = replay_outputs(s, src)
                del src
            else:
                result["kafka_records"] = count_topic(s, s.kafka.topics.flows_raw)
            result["replay_s"] = round(time.monotonic() - t_c, 1)
        else:
            result["kafka_records"] = count_topic(s, s.kafka.topics.flows_raw)
        # The sink may still be catching up (on 2 shared cores it archives slower than the load comes in): poll the
        # archive until it holds every Kafka record, or stops growing for a minute, or --drain seconds passed.
        rows = dup = 0
        last, grew = -1, time.monotonic()
        while True:
            rows, dup = archive_counts(s)
            if rows - dup >= result["kafka_records"] or time.monotonic() - t_end >= drain:
                break
            if rows != last:
                last, grew = rows, time.monotonic()
            elif time.monotonic() - grew >= 60:  # a minute without a new file: the sink writes ~1M-row files in bursts
                break
            time.sleep(2)  # polled often: done as soon as the last file is there (a small run's is within seconds)
        result["archived_after_load_s"] = round(time.monotonic() - t_end, 1)
        result.update(archive_rows=rows, duplicated=dup, lost=max(0, result["kafka_records"] - (rows - dup)))
        # processors: done once no worker moved for idle_close_s + a margin (their last windows closed by the timer)
        procs = [p for k, p in metrics.items() if k.startswith("processors")]
        key = "fabricflow_processors_shuffle_messages_total"
        t_p = time.monotonic()
        quiet = s.processors.idle_close_s + 2 * s.processors.tick_s + 3
        snap, since = None, time.monotonic()
        while time.monotonic() - t_p < max(drain, 60):
            now = tuple(scrape(p).get(key, -1.0) for p in procs)
            if now != snap:
                snap, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
            time.sleep(1)
        result["processors_done_after_load_s"] = round(time.monotonic() - t_end, 1)
        time.sleep(1.5)  # the timeline's last scrape
        tl.stop_evt.set()
        tl.join(5)
        result["cpu_s"] = {k: round(v, 1) for k, v in cpu.sample().items()}
        too_late = {"main": 0, "incast": 0}
        for (svc, k), v in tl.last_late.items():
            too_late["main" if k == TOO_LATE_MAIN else "incast"] += int(v)
        result["too_late"] = too_late
        if rep is not None:
            live, repeats = live_outputs(s)
            cmp = compare_outputs(live, rep, too_late)
            cmp.update(live_repeated_messages=repeats, replayed_records=result["kafka_records"])
            result["windows"] = cmp
        result["timeline"] = tl.rows
        sup.stop_evt.set()
        result["restarted"] = sup.restarted
        if second is not None:
            kill9(second)
    return result


PROGRESS = {"ingest": "kafka_delivered_records_total", "archive": "rows_received_total",
            "processors": "shuffle_messages_total"}  # timeline names of each service's progress counter


def metrics_summary(rows: list[dict], t0: float, t1: float) -> dict:
    """What the dashboards showed during the load (timeline rows with t0 <= t <= t1): per service the seconds
    its /metrics did not answer, the longest stretch its progress counter stood still, and the peaks of
    ingest's producer queue and of the error counters."""
    rows = [r for r in rows if t0 <= r["t"] <= t1]
    out: dict = {}
    svcs = sorted({k[:-3] for r in rows for k in r if k.endswith("_up")})
    for svc in svcs:
        down = sum(1 for r in rows if not r.get(svc + "_up"))
        key = f"{svc}:{PROGRESS[svc.split('#')[0]]}"
        longest = run = 0
        prev = None
        for r in rows:
            v = r.get(key)
            if v is None or (prev is not None and v <= prev):  # down, or up and standing still
                run += 1
            else:
                run = 0
            longest = max(longest, run)
            if v is not None:
                prev = v
        out[svc] = {"metrics_down_s": down, "longest_stall_s": longest}
    peak = lambda k: max((r.get(k, 0) for r in rows), default=0)  # noqa: E731
    out["ingest_queue_peak_messages"] = int(peak("ingest:kafka_queue_messages"))
    out["sink_errors"] = int(peak("archive:errors_total"))
    out["sink_buffered_peak_rows"] = int(peak("archive:buffered_rows"))
    out["processors_errors"] = int(max(peak("processors:errors_total"), peak("processors#2:errors_total")))
    return out


def _lags(rows: list[dict]) -> dict:
    """From the timeline so far: ingest's drops, and how far the sink's flows_raw consumption trailed ingest's
    deliveries (records; the sink counts from its own start, so only while one sink process ran)."""
    d_key, s_key = "ingest:kafka_delivered_records_total", "archive:" + SINK_RAW_IN.split("_", 2)[2]
    lags = [r[d_key] - r[s_key] for r in rows if d_key in r and s_key in r]
    last = rows[-1] if rows else {}
    return {"sink_raw_lag_max": int(max(lags, default=0)), "sink_raw_lag_at_load_end": int(lags[-1]) if lags else None,
            "ingest_socket_drops": int(last.get("ingest:socket_drops_total", 0)),
            "ingest_producer_drops": int(last.get("ingest:kafka_dropped_records_total", 0))}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _spawn_worker(pipe: LocalPipeline, n: int, web_port: int, metrics_port: int):
    pipe._spawn(f"processors{n}", ["process"], {
        "FABRICFLOW_PROCESSORS__DATADIR": str(pipe.state_dir / f"faust{n}"),
        "FABRICFLOW_PROCESSORS__WEB_PORT": str(web_port), "FABRICFLOW_PROCESSORS__METRICS_PORT": str(metrics_port)})
    return pipe.procs.pop(f"processors{n}")  # stopped by the scenario, not with the pipeline


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
        from devtools.stack import terminate

        pid = pipe.stack.s3.pid()
        if pid is not None:
            terminate(pid, 15)
        pipe.stack.s3.pid_file.unlink(missing_ok=True)
        time.sleep(outage)
        pipe.stack._start_seaweedfs()  # the Supervisor restarts the sink if it exited (one line, status 1)
        r = _progress(metrics["archive"], "fabricflow_sink_rows_written_total")
    elif scenario == BASELINE:
        return None
    elif scenario == "archive-kill":
        wait_until(lambda: scrape(metrics["archive"]).get("fabricflow_sink_buffered_rows", 0) > 0, 60, 0.05)
        kill9(pipe.procs["archive"])
        pipe._spawn("archive", ["sink", "archive"])
        r = _progress(metrics["archive"], "fabricflow_sink_rows_written_total")
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    return None if r is None else time.monotonic() - t0
