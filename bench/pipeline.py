"""Whole-pipeline benchmark: the highest flow rate the real services sustain with nothing lost, and CPU-s per 1 M flows.

Runs ``fabricflow ingest``, ``fabricflow process``, ``fabricflow sink archive`` (Parquet on the embedded S3),
``fabricflow sink metrics`` (and with ``--console`` the console) as subprocesses on the embedded broker, feeds them
NetFlow v9 from a fleet of loopback exporters, and raises the offered rate step by step until a step loses flows,
its lag grows, or the archive is not complete 60 s after the load. Every step counts flows sent against flows in
flows.raw, flows.enriched and both archive datasets, and reads the CPU of every service from /proc. With
``FF_BENCH_CODE=/path/to/checkout`` (which has its own ``.venv``) that checkout's pipeline runs beside this one and
gets the same steps, alternated, and the last line compares the two:

    pipeline: <F> flows/s sustained, <X> CPU-s per 1 M flows; baseline <F0> flows/s, <Y> CPU-s per 1 M flows; ratio <X/Y>

``--workers N`` runs the ramp with 1, 2, 4, ... N ingest workers, processors workers and archive sinks ("max" = the
machine's CPUs) and checks that the first step's outputs (archive totals, output topic digests) equal those with one.
How it works and what it measured: bench/README.md and docs/performance.md ("Whole pipeline").

    .venv/bin/python -m bench.pipeline [--start-rate 20000 --factor 1.4 --step-seconds 40] [--workers max] [--json F]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    # Run as a file, bench/ would come first on sys.path and bench/ingest.py, bench/processors.py would shadow the
    # packages: run as the module bench.pipeline of this checkout instead (-P: the working directory is not added).
    import os
    import sys
    from pathlib import Path

    _root = str(Path(__file__).resolve().parents[1])
    _env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (_root, os.environ.get("PYTHONPATH")) if p)}
    os.execve(sys.executable, [sys.executable, "-P", "-m", "bench.pipeline", *sys.argv[1:]], _env)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from devtools.chaos import scrape  # noqa: E402
from devtools.chaos_outputs import write_inventory  # noqa: E402
from bench.pipeline_load import Fleet, Sent  # noqa: E402
from bench.pipeline_run import BenchPipeline, Code, TopicCounter, archive_rows, archive_totals, output_digests  # noqa: E402
from devtools.runner import PipelineError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
H0 = 1_796_083_200  # 2026-12-01T00:00Z: step k's flows lie in hour H0 + k h (from 2 min past it)
SERVICES = ("ingest", "processors", "archive", "metrics", "console")  # the pipeline's services: their CPU is the total
APART = ("broker", "s3", "bench")  # shown apart: the embedded broker and object store, the bench (sender, probes)
CATCH_UP_S = 60.0  # the archive must hold every flow this long after the load's end
D = 'fabricflow_ingest_kafka_delivered_records_total'
ENR, DET = "fabricflow_processors_records_total", "fabricflow_processors_detect_records_total"
RAW_IN = 'fabricflow_sink_rows_received_total{dataset="flows_raw"}'
ENR_IN = 'fabricflow_sink_rows_received_total{dataset="flows_enriched"}'
RAW_W = 'fabricflow_sink_rows_written_total{dataset="flows_raw"}'
ENR_W = 'fabricflow_sink_rows_written_total{dataset="flows_enriched"}'


@dataclass
class Step:
    code: str
    workers: int
    index: int
    rate: float
    seconds: float
    sent: int = 0
    send_rate: float = 0.0
    sender_dropped: int = 0
    kafka_raw: int = 0
    kafka_enriched: int = 0
    archive_raw: int = 0
    archive_enriched: int = 0
    archive_dup: int = 0
    caught_up_s: float | None = None
    done_s: float | None = None  # when ingest, processors and archive had every flow, after the load's end
    lags: dict = field(default_factory=dict)  # stage -> {"end": records, "max": records, "grew": bool}
    cpu: dict = field(default_factory=dict)  # service -> CPU seconds over the step (load + catch-up)
    metrics_sink_messages: int = 0
    problems: list = field(default_factory=list)
    digests: dict = field(default_factory=dict)
    wall_s: float = 0.0  # the whole step: load, catch-up, counting
    pure_core: dict = field(default_factory=dict)  # --profile: the processors' pure core on the same records
    timeline: list = field(default_factory=list)  # (seconds into the load, {stage: lag in records}), one a second

    @property
    def ok(self) -> bool:
        return not self.problems

    def per_m(self, name: str) -> float:
        return self.cpu.get(name, 0.0) / self.sent * 1e6 if self.sent else float("nan")

    @property
    def total_per_m(self) -> float:
        return sum(self.per_m(s) for s in SERVICES)

    def line(self) -> str:
        lag = ", ".join(f"{k} {v['end']:,.0f}{' GREW' if v['grew'] else ''}" for k, v in self.lags.items())
        cpu = " ".join(f"{s} {self.per_m(s):.2f}" for s in SERVICES if s in self.cpu)
        apart = " ".join(f"{s} {self.per_m(s):.2f}" for s in APART if s in self.cpu)
        up = f"{self.caught_up_s:.1f} s" if self.caught_up_s is not None else f"not within {CATCH_UP_S:.0f} s"
        return (f"[{self.code} N={self.workers}] step {self.index}: {self.rate:,.0f} flows/s offered ({self.send_rate:,.0f} "
                f"sent) x {self.seconds:.0f} s: sent {self.sent:,}, flows.raw {self.kafka_raw:,}, flows.enriched "
                f"{self.kafka_enriched:,}, archive raw {self.archive_raw:,} enriched {self.archive_enriched:,} (dup "
                f"{self.archive_dup}), archive complete {up} after the load; step took {self.wall_s:.0f} s\n"
                f"    lag at the load's end (records): {lag}\n"
                f"    CPU-s per 1 M flows: {cpu} = {self.total_per_m:.2f} (apart: {apart})\n"
                f"    -> {'ok' if self.ok else 'NOT sustained: ' + '; '.join(self.problems)}")


def lag_of(p: dict, base: dict, sent: int) -> dict[str, float]:
    """Records behind, per stage, from the services' counters (deltas since the step began)."""
    d = {k: p.get(k, 0.0) - base.get(k, 0.0) for k in (D, ENR, DET, RAW_IN, ENR_IN)}
    return {"ingest": sent - d[D], "processors": d[D] - d[ENR], "detect": d[ENR] - d[DET],
            "archive raw": d[D] - d[RAW_IN], "archive enriched": d[ENR] - d[ENR_IN]}


def grew(samples: list[tuple[float, float]], seconds: float, rate: float) -> bool:
    """A lag grows when even its lowest value in the load's last quarter exceeds its highest in the first half by
    more than half a second of input: a steady pipeline's lag saw-tooths (batches, Parquet files), a slow one climbs."""
    first = [v for t, v in samples if t <= seconds / 2]
    last = [v for t, v in samples if t >= seconds * 3 / 4]
    return bool(first and last) and min(last) - max(first) > 0.5 * rate


class Ramp:
    """The rates one pipeline is offered: up the ladder while sustained; a rate that was not is offered again
    (``retries``: the CPUs are shared), then one between the last good and the failed one (``bisect``); then done.
    A step whose pipeline did not drain ends it (later steps would measure the backlog)."""

    def __init__(self, rates: list[float], retries: int, bisect: int, max_steps: int):
        self.rates, self.retries, self.bisect, self.left = list(rates), retries, bisect, max_steps
        self.good: float | None = None
        self.tries = 0

    def next(self) -> float | None:
        return self.rates[0] if self.rates and self.left > 0 else None

    def record(self, st: Step) -> None:
        self.left -= 1
        rate = self.rates.pop(0)
        if st.ok:
            self.good, self.tries = rate, 0
        elif st.done_s is None:
            self.rates = []
        elif self.tries < self.retries:
            self.tries += 1
            self.rates.insert(0, rate)
        elif self.good and self.bisect and rate / self.good > 1.1:
            self.bisect -= 1
            self.rates, self.tries = [round((self.good * rate) ** 0.5, -2)], 0
        else:
            self.rates = []


@dataclass
class Run:
    """One checkout's pipeline with N workers per service, its load and what was measured on it."""

    code: Code
    workers: int
    pipe: BenchPipeline
    ramp: Ramp
    fleet: Fleet | None = None
    counter: TopicCounter | None = None
    steps: list = field(default_factory=list)
    hour: int = 0  # the next step's event hour (0: the warm-up)

    @property
    def label(self) -> str:
        return f"{self.code.label} N={self.workers}"


class Bench:
    def __init__(self, args, state: Path):
        self.a, self.state = args, state
        self.inventory = str(write_inventory(state / "inventory.yaml"))
        self.idle_cpu: dict[str, dict[str, float]] = {}

    def extra(self) -> dict:
        # The idle flush decides when the last rows of a step are written (the default 60 s would be the whole catch-up
        # budget); retention and compaction run every hour / 10 min in production, not per flow: off here.
        return {"archive": {"idle_flush_s": 5, "grace_s": 60, "retention_interval_s": 0, "compaction_interval_s": 0},
                "processors": {"idle_close_s": 5.0}}

    def run(self, group: list[tuple[Code, int]], compare_rounds: int = 0) -> list[Run]:
        """Start a pipeline per (checkout, N) side by side (each on its own ports; the idle ones cost ~0.06 cores),
        then ramp them interleaved, one step each in turn, and with ``compare_rounds`` offer the highest rate they
        all sustained that many more times, in turn: one pipeline under load at a time, drift shared."""
        a = self.a
        span = 20 + 4 * max(n for _, n in group)
        runs = []
        with contextlib.ExitStack() as stack:
            for i, (code, n) in enumerate(group):
                pipe = BenchPipeline(self.state / f"{code.label}-n{n}", code, n, a.partitions, self.inventory,
                                     a.port_base + i * span, console=a.console, extra=self.extra())
                stack.enter_context(pipe)
                r = Run(code, n, pipe, Ramp([a.rate] if a.rate else ladder(a.start_rate, a.factor, a.max_rate),
                                            a.retries, a.bisect, a.max_steps))
                r.fleet = Fleet(("127.0.0.1", pipe.ports.netflow), a.exporters, a.partitions, version=a.version)
                stack.callback(r.fleet.close)
                r.counter = TopicCounter(pipe.settings(), [pipe.topic("flows_raw"), pipe.topic("flows_enriched")],
                                         a.partitions)
                stack.callback(r.counter.close)
                runs.append(r)
            for r in runs:
                self.idle(r)
                # warm up at the start rate (first fetches, group joins' aftermath, first files, caches): not reported
                w = self.step(r, a.start_rate, a.warm_up, warm=True)
                print(f"[{r.label}] warm-up: {w.sent:,} flows in {a.warm_up:.0f} s, complete {w.done_s} s after; "
                      f"{'; '.join(w.problems) or 'nothing lost'}", flush=True)
            t_end = time.monotonic() + a.deadline_min * 60
            while time.monotonic() < t_end and any(r.ramp.next() for r in runs):
                for r in runs:
                    rate = r.ramp.next()
                    if rate:
                        st = self.step(r, rate, a.step_seconds, digests=not r.steps and not a.profile,
                                       profile=a.profile)
                        r.ramp.record(st)
            common = max(set.intersection(*({s.rate for s in r.steps if s.ok} for r in runs)), default=0.0)
            for _ in range(compare_rounds if common and len(runs) > 1 else 0):
                for r in runs:
                    self.step(r, common, a.step_seconds)
        return runs

    def idle(self, r: Run, seconds: float = 20.0) -> None:
        """CPU the services use with no load (timers, polls, the broker): what a slow step's catch-up adds."""
        time.sleep(5)
        c0 = r.pipe.cpu()
        time.sleep(seconds)
        c1 = r.pipe.cpu()
        self.idle_cpu[r.label] = idle = {k: (c1[k] - c0.get(k, 0.0)) / seconds for k in c1}
        print(f"[{r.label}] idle CPU (cores): " + ", ".join(f"{k} {v:.3f}" for k, v in idle.items()), flush=True)

    def step(self, r: Run, rate: float, seconds: float, warm: bool = False, digests: bool = False,
             profile: str | None = None) -> Step:
        """``seconds`` of load at ``rate`` on run ``r``'s pipeline in the next event hour, then its catch-up, counts
        and verdict (printed and kept unless ``warm``)."""
        pipe, fleet, counter, code, workers = r.pipe, r.fleet, r.counter, r.code, r.workers
        st = Step(code.label, workers, r.hour, rate, seconds)
        hour = H0 // 3600 + r.hour
        clock = H0 + r.hour * 3600 + 120
        r.hour += 1
        settings = pipe.settings()
        base, cpu0 = probe(pipe), pipe.cpu()
        m0 = scrape(pipe.ports.flow_metrics, timeout_s=10).get("fabricflow_metrics_messages_total", 0.0)
        sent: list[Sent] = []
        t0 = time.monotonic()
        th = threading.Thread(target=lambda: sent.append(fleet.blast(rate, seconds, clock, deadline_s=t0 + seconds + 30)),
                              daemon=True)
        th.start()
        prof = None
        if profile and not warm:
            from bench.pipeline_profile import Profiler

            prof = Profiler(pipe, Path(profile) / f"{code.label}-n{workers}", seconds)
        samples: dict[str, list] = {}
        next_prom = t0 + 15
        while th.is_alive():  # one probe a second; the flow-metrics sink scraped every 15 s, as Prometheus would
            time.sleep(1.0)
            pipe.check()
            t = time.monotonic() - t0
            p = pipe.progress()
            if p is None:  # a service did not answer within 10 s: no sample this second
                continue
            lags = lag_of(p, base, fleet.progress)
            st.timeline.append((round(t, 1), lags))
            for k, v in lags.items():
                samples.setdefault(k, []).append((t, v))
            if time.monotonic() >= next_prom:
                scrape(pipe.ports.flow_metrics, timeout_s=10)
                next_prom += 15
        th.join()
        t_load = time.monotonic()
        s = sent[0]
        st.sent, st.send_rate, st.sender_dropped = s.records, s.records / max(s.seconds, 1e-9), s.dropped
        for k, series in samples.items():
            st.lags[k] = {"end": series[-1][1], "max": max(v for _, v in series), "grew": grew(series, seconds, rate)}
        done_at, p = self.drain(pipe, base, t_load, next_prom)
        if prof is not None:
            prof.finish()
        cpu1 = pipe.cpu()
        st.cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
        st.done_s = None if done_at is None else round(done_at - t_load, 1)
        st.caught_up_s = st.done_s if st.done_s is not None and st.done_s <= CATCH_UP_S else None
        st.metrics_sink_messages = int(scrape(pipe.ports.flow_metrics, timeout_s=10).get("fabricflow_metrics_messages_total",
                                                                                          0) - m0)
        counter.read()
        st.kafka_raw = counter.rows[pipe.topic("flows_raw")].get(hour, 0)
        st.kafka_enriched = counter.rows[pipe.topic("flows_enriched")].get(hour, 0)
        (st.archive_raw, dr), (st.archive_enriched, de) = (archive_rows(settings, ds, hour)
                                                           for ds in ("flows_raw", "flows_enriched"))
        st.archive_dup = dr + de
        self.judge(st, p, base)
        if digests:
            st.digests = self.digests(pipe, settings, hour)
        st.wall_s = round(time.monotonic() - t0, 1)
        if warm:
            return st
        r.steps.append(st)
        print(st.line(), flush=True)
        if prof is not None and code.root == REPO:
            from bench.pipeline_profile import pure_core

            pc = pure_core(settings)
            st.pure_core = {**pc, "worker_cpu_s_per_m": st.per_m("processors")}
            print(f"    processors' pure core on every flows.raw record ({pc['records']:,}): {pc['cpu_s_per_m']:.2f} CPU-s "
                  f"per 1 M; the workers in this step {st.per_m('processors'):.2f} "
                  f"({pc['cpu_s_per_m'] / st.per_m('processors'):.2f}x the pure core's records per CPU-s)", flush=True)
        return st

    def drain(self, pipe: BenchPipeline, base: dict, t_load: float, next_prom: float) -> tuple[float | None, dict]:
        """Wait until ingest stopped delivering, the processors enriched and detected every delivered flow and the
        archive wrote them all (by the services' counters). Returns (when, last counters); (None, ...) after
        ``--drain`` seconds."""
        stable, last, since = False, None, time.monotonic()
        p = probe(pipe)
        while time.monotonic() - t_load < self.a.drain:
            d = {k: p.get(k, 0.0) - base.get(k, 0.0) for k in (D, ENR, DET, RAW_W, ENR_W)}
            if d[D] != last:
                last, since = d[D], time.monotonic()
            stable = time.monotonic() - since >= 2.0
            if stable and d[ENR] >= d[D] and d[DET] >= d[ENR] and d[RAW_W] >= d[D] and d[ENR_W] >= d[ENR]:
                return time.monotonic(), p
            if time.monotonic() >= next_prom:
                scrape(pipe.ports.flow_metrics, timeout_s=10)
                next_prom += 15
            time.sleep(0.5)
            pipe.check()
            p = pipe.progress() or p
        return None, p

    def judge(self, st: Step, p: dict, base: dict) -> None:
        for name, n in (("flows.raw", st.kafka_raw), ("flows.enriched", st.kafka_enriched),
                        ("archive flows_raw", st.archive_raw), ("archive flows_enriched", st.archive_enriched)):
            if n != st.sent:
                st.problems.append(f"{name} {n - st.sent:+,} against sent")
        if st.archive_dup:
            st.problems.append(f"{st.archive_dup:,} archive rows written twice")
        if st.sender_dropped:
            st.problems.append(f"the sender's socket refused {st.sender_dropped:,} datagrams")
        grown = [k for k, v in st.lags.items() if v["grew"]]
        if grown:
            st.problems.append("lag grew: " + ", ".join(grown))
        if st.done_s is None:
            st.problems.append(f"still behind {self.a.drain:.0f} s after the load")
        elif st.caught_up_s is None:
            st.problems.append(f"archive complete only {st.done_s:.0f} s after the load (> {CATCH_UP_S:.0f} s)")
        errors = p.get("fabricflow_processors_errors_total", 0) - base.get("fabricflow_processors_errors_total", 0) + \
            p.get("fabricflow_sink_errors_total", 0) - base.get("fabricflow_sink_errors_total", 0)
        if errors:
            st.problems.append(f"{errors:.0f} processing errors counted by the services")

    def digests(self, pipe: BenchPipeline, settings, hour: int) -> dict:
        """Digests of the step's outputs once the processors went quiet (their last windows close on the idle timer)."""
        from fabricflow.streams import OUTPUTS

        key, snap, since, t0 = "fabricflow_processors_shuffle_messages_total", None, time.monotonic(), time.monotonic()
        quiet = settings.processors.idle_close_s + 2 * settings.processors.tick_s + 3
        while time.monotonic() - t0 < 120:
            now = (pipe.progress() or {}).get(key)
            if now != snap:
                snap, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
            time.sleep(1)
        topics = {kind: pipe.topic(s.name) for kind, s in OUTPUTS.items() if s.name in pipe.dump["kafka"]["topics"]}
        out = output_digests(settings, topics, self.a.partitions)
        out["archive flows_enriched per (src, dst, category)"] = archive_totals(settings, hour)
        return out


def probe(pipe: BenchPipeline, tries: int = 6) -> dict:
    """The services' progress counters, asked again when one did not answer."""
    for _ in range(tries):
        p = pipe.progress()
        if p is not None:
            return p
        pipe.check()
    raise RuntimeError(f"the services' /metrics did not answer {tries} times in a row")


def ladder(start: float, factor: float, top: float) -> list[float]:
    out, r = [], start
    while r <= top and len(out) < 64:
        out.append(round(r, -3) if r >= 10_000 else round(r, -2))
        r *= factor
    return out


def sustained(steps: list[Step]) -> float:
    return max((s.rate for s in steps if s.ok), default=0.0)


def worker_counts(spec: str | None) -> list[int]:
    """``--workers``: N -> 1, 2, 4, ... N; "max" -> up to the machine's CPUs; none -> [1]."""
    if not spec:
        return [1]
    top = (os.cpu_count() or 1) if spec == "max" else int(spec)
    out, n = [], 1
    while n < top:
        out.append(n)
        n *= 2
    return out + [top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start-rate", type=float, default=20_000, help="flows/s of the first step")
    ap.add_argument("--factor", type=float, default=1.4, help="each step offers this much more than the last")
    ap.add_argument("--max-rate", type=float, default=5_000_000, help="never offer more than this")
    ap.add_argument("--rate", type=float, help="one step at this rate (after the warm-up) instead of a ramp")
    ap.add_argument("--step-seconds", type=float, default=40, help="seconds of load per step")
    ap.add_argument("--warm-up", type=float, default=10, help="seconds of load at --start-rate before the steps")
    ap.add_argument("--retries", type=int, default=1, help="repeat a step that was not sustained this often")
    ap.add_argument("--bisect", type=int, default=1, help="after the ramp fails, try this many rates in between")
    ap.add_argument("--compare-rounds", type=int, default=2, help="with a baseline: after the ramps, offer the highest "
                    "rate both sustained this many more times to each, alternated")
    ap.add_argument("--max-steps", type=int, default=16, help="at most this many steps per ramp")
    ap.add_argument("--drain", type=float, default=240, help="wait at most this long after a step for the backlog")
    ap.add_argument("--deadline-min", type=float, default=60, help="no new step after this many minutes per ramp")
    ap.add_argument("--workers", help="N (or max = os.cpu_count()): ramps with 1, 2, 4, ... N workers per service")
    ap.add_argument("--partitions", type=int, help="partitions per topic (default: max(4, 2 x the largest N))")
    ap.add_argument("--exporters", type=int, help="loopback exporters (default: 4 per partition)")
    ap.add_argument("--version", type=int, choices=(9, 10), default=9, help="NetFlow v9 (9) or IPFIX (10)")
    ap.add_argument("--console", action="store_true", help="also run the web console (its CPU counts)")
    ap.add_argument("--profile", metavar="DIR", help="with --rate: py-spy every service during the step, and the CPU "
                    "of each thread from /proc; summaries in DIR (needs py-spy: pip install py-spy)")
    ap.add_argument("--port-base", type=int, help="first of the ports used (default: the start of $FF_MY_PORT_RANGE, "
                    "else 33000); 20 + 4 x N per pipeline, two pipelines with a baseline")
    ap.add_argument("--json", help="write every step here")
    ap.add_argument("--sizing-from", metavar="JSON", help="run nothing: print the sizing table (cores and partitions "
                    "per service for 1 k, 4 k and 16 k GPU fabrics) from the figures of an earlier run's --json")
    ap.add_argument("--keep", help="keep configs, logs and state here (default: a temporary directory, removed)")
    a = ap.parse_args()
    if a.sizing_from:
        steps = [Step(**s) for s in json.loads(Path(a.sizing_from).read_text())["steps"]["this N=1"]]
        print_sizing(mean_cpu(steps, sustained(steps)))
        return 0
    ns = worker_counts(a.workers)
    a.partitions = a.partitions or max(4, 2 * max(ns))
    a.exporters = a.exporters or 4 * a.partitions
    if a.port_base is None:
        a.port_base = int(os.environ.get("FF_MY_PORT_RANGE", "33000-").split("-")[0])
    if a.profile and not a.rate:
        ap.error("--profile needs --rate (one step at a fixed rate)")
    this = Code.of("this", REPO)
    base = Code.of("baseline", os.environ["FF_BENCH_CODE"]) if os.environ.get("FF_BENCH_CODE") else None
    print(f"pipeline bench: this checkout {this.root}, baseline {base.root if base else '(none: set FF_BENCH_CODE)'}; "
          f"workers {ns}, {a.partitions} partitions, {a.exporters} exporters, NetFlow v{a.version}, "
          f"{a.step_seconds:.0f} s steps, CPUs {os.cpu_count()}", flush=True)
    results: dict[str, list[Step]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        state = Path(a.keep or tmp)
        state.mkdir(parents=True, exist_ok=True)
        b = Bench(a, state)
        # this checkout and the baseline side by side with one worker each, then the other worker counts
        for r in b.run([(this, 1)] + ([(base, 1)] if base else []), compare_rounds=a.compare_rounds):
            results[r.label] = r.steps
        for n in ns[1:]:
            try:
                for r in b.run([(this, n)]):
                    results[r.label] = r.steps
            except PipelineError as e:  # the figures so far still count; the report fails this N
                print(f"[this N={n}] the pipeline did not start: {e}", flush=True)
                results[f"this N={n}"] = []
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "idle_cpu_cores": b.idle_cpu,
                                            "steps": {k: [asdict(s) for s in v] for k, v in results.items()}}, indent=1))
    return report(results, ns, outputs=not a.profile)


def mean_cpu(steps: list[Step], rate: float) -> dict[str, float]:
    """Per service and in total, the mean CPU-s per 1 M flows of the sustained steps at ``rate`` ({} if none)."""
    at = [s for s in steps if s.ok and s.rate == rate]
    if not at:
        return {}
    out = {k: sum(s.per_m(k) for s in at) / len(at) for k in SERVICES + APART if k in at[0].cpu}
    out.update(total=sum(s.total_per_m for s in at) / len(at), n=len(at), lo=min(s.total_per_m for s in at),
               hi=max(s.total_per_m for s in at))
    return out


def print_sizing(m: dict[str, float]) -> None:
    """The sizing table from one worker's CPU-s per 1 M flows per service (bench/pipeline_sizing.py)."""
    from bench.pipeline_sizing import assumptions_line, table

    per = {s: m[s] for s in SERVICES if s in m}
    if not per:
        print("sizing: no sustained step to derive it from")
        return
    print(f"\nsizing ({assumptions_line(per)}):")
    print("\n".join(table(per)))


def breakdown(label: str, rate: float, m: dict[str, float]) -> str:
    if not m:
        return f"  {label}: no sustained step at {rate:,.0f} flows/s"
    parts = ", ".join(f"{s} {m[s]:.2f}" for s in SERVICES if s in m)
    apart = ", ".join(f"{s} {m[s]:.2f}" for s in APART if s in m)
    return (f"  {label} at {rate:,.0f} flows/s ({m['n']} steps): {parts}; total {m['total']:.2f} ({m['lo']:.2f} - "
            f"{m['hi']:.2f}) (apart: {apart})")


def first_digests(steps: list[Step]) -> dict[str, str]:
    """The output digests of a ramp (taken on its first step), {} when it has none."""
    return next((s.digests for s in steps if s.digests), {})


def outputs_differ(ref: dict[str, str], got: dict[str, str]) -> list[str]:
    """The outputs in which ``got`` differs from ``ref`` (digests by output name); [] when they are equal. Digests
    missing on either side prove nothing: then every output either names, or "no digests", is a difference."""
    if not ref or not got:
        return sorted(set(ref) | set(got)) or ["no digests"]
    return sorted(k for k in set(ref) | set(got) if ref.get(k) != got.get(k))


def report(results: dict[str, list[Step]], ns: list[int], outputs: bool = True) -> int:
    """Print the summary and the ``pipeline:`` line; 1 when outputs with N workers differ from those with one
    (``outputs``: their digests were taken, i.e. not with --profile)."""
    ones, status = results["this N=1"], 0
    for label, steps in results.items():
        for k, v in first_digests(steps).items():
            print(f"  digest {label}: {k} {v}")
    if len(ns) > 1:
        print("\nscale-out (this checkout): N ingest workers, N processors workers, N archive sinks")
        ref = first_digests(ones)
        for n in ns:
            steps = results[f"this N={n}"]
            if not steps:
                status = 1
                print(f"  N={n}: did not run (see above)")
                continue
            f = sustained(steps)
            differ = outputs_differ(ref, first_digests(steps)) if outputs else []
            status = status or int(bool(differ))
            same = ("OUTPUTS DIFFER from N=1: " + ", ".join(differ) if differ else "outputs equal N=1") if outputs \
                else "outputs not compared (--profile)"
            print(f"  N={n}: {f:,.0f} flows/s sustained; {same}")
            print("  " + breakdown("CPU-s per 1 M flows", f, mean_cpu(steps, f)))
    base = results.get("baseline N=1")
    f = sustained(ones)
    if base is None:
        m = mean_cpu(ones, f)
        print(breakdown("this", f, m))
        print_sizing(m)
        print(f"pipeline: {f:.0f} flows/s sustained, {m.get('total', float('nan')):.2f} CPU-s per 1 M flows; "
              f"baseline - flows/s, - CPU-s per 1 M flows; ratio -")
        return status
    f0 = sustained(base)
    differ = outputs_differ(first_digests(base), first_digests(ones))
    print("  outputs of the first step: " + ("differ from the baseline's in " + ", ".join(differ) + " (expected only "
          "where the outputs changed by design)" if differ else "equal to the baseline's"))
    # CPU per flow compared at the highest rate both sustained (it falls as the rate grows: batches get larger)
    common = max({s.rate for s in ones if s.ok} & {s.rate for s in base if s.ok}, default=0.0)
    m, m0 = mean_cpu(ones, common), mean_cpu(base, common)
    print(f"\nCPU-s per 1 M flows at {common:,.0f} flows/s (the highest rate both sustained; mean of the sustained "
          f"steps at that rate, alternated):")
    print(breakdown("this", common, m))
    print(breakdown("baseline", common, m0))
    print_sizing(m)
    x, y = m.get("total", float("nan")), m0.get("total", float("nan"))
    print(f"pipeline: {f:.0f} flows/s sustained, {x:.2f} CPU-s per 1 M flows; baseline {f0:.0f} flows/s, {y:.2f} CPU-s "
          f"per 1 M flows; ratio {x / y if y else float('nan'):.2f}")
    return status


if __name__ == "__main__":
    sys.exit(main())
