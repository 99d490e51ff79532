"""Detection quality harness: a shipped scenario through the whole local pipeline (or offline), scored against
the simulator's ground truth. ``bench/detection.py`` is its command line; the end-to-end tests call
:func:`run_scenario` and :func:`score_run`.

How it works: bench/README.md, "bench/detection.py"; results: docs/detection-quality.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path

import yaml

from devtools.detections import Detection, DetectionFeed, pair_bytes
from devtools.runner import LocalPipeline, PipelinePorts
from devtools.offline import offline_settings, run_offline
from devtools.scenario_variants import born_broken_file
from devtools.scenario_report import pct, detector_table, matrix_line, print_run, report_json
from devtools.scoring import (
    MatrixReport,
    Observed,
    ScoreReport,
    matrix_error,
    merge_scores,
    score_detections,
)
from devtools.scoring_diagnosis import DiagnosisScore, diagnosis_table, merge_diagnoses, score_diagnoses
from devtools.scoring_compare import CompareOutcome, compare_scenario
from devtools.simulator.engine import Simulation
from devtools.simulator.sender import UdpSender, pace_and_send, parse_targets
from devtools.simulator.truth import read_truth

REPO = Path(__file__).resolve().parents[1]

SCENARIOS = ("healthy", "straggler", "link_downgrade", "incast", "segmentation", "lb_skew", "storage_slowdown",
             "storage_link", "congestion", "syn_storm", "incast_ecn", "incast_dcqcn", "congestion_nocnp", "link_flap",
             "mixed", "fabric_healthy", "ecmp_polarised", "rail_degraded", "job_spread", "collectives_invisible")
# scored by compare only (offline; docs/detection-quality.md, "Compare around a change")
COMPARE_SCENARIOS = ("tuning",)
SCENARIO_DIR = REPO / "scenarios"
# PipelinePorts.offset: kafka 20392, s3 19633, SeaweedFS 30630-30638, UDP 17643/13355/16039. Disjoint from
# the default ports (incl. SeaweedFS 19330-19338), the test stack (29092, 28333, 28400-28408) and e2e (12000),
# and below Linux's ephemeral range (32768-60999), where a client connection can hold a port at any moment.
BENCH_PORTS = 11300

# business hours of the bench policy, in the scenario's own local time (see policy_for)
BUSINESS_START, BUSINESS_END = "07:00", "20:00"


# --------------------------------------------------------------------------- settings


def pipeline_extra(speed: float) -> dict:
    """Settings overrides the bench gives the pipeline at ``speed`` x real time.

    - sFlow event time from agent uptime, traffic detectors on the sFlow layer only
      (ToR sFlow sees every packet once; core NetFlow/IPFIX would count some twice),
      as ``fabricflow demo`` does.
    - Wall-clock delays become ``speed`` times longer in event time. Ingest batching
      (``batch_max_delay_ms``) is cut to 50 ms, and the incast short windows' lateness
      (default 2 s of event time) is raised to 0.5 s of wall time (5 s at 10x), so a
      batch flushed a few hundred ms of wall time after another agent's is not "too
      late"; the main windows keep 30 s of lateness up to 5x and 6 s of wall time above.
    """
    speed = max(1.0, float(speed))
    return {
        "ingest": {"sflow_event_time": "uptime", "batch_max_delay_ms": 50},
        "processors": {
            "detector_protocols": ["sflow5"],
            "allowed_lateness_s": max(30.0, 6.0 * speed),
            "detectors": {"incast": {"lateness_ms": int(max(2000, 500 * speed))}},
        },
    }


def _tz_for(designed_ms: int, epoch_ms: int) -> str:
    """An Etc/GMT zone in which wall time ``epoch_ms`` shows the same hour of day as ``designed_ms`` (UTC)."""
    want = datetime.fromtimestamp(designed_ms / 1000, timezone.utc)
    now = datetime.fromtimestamp(epoch_ms / 1000, timezone.utc)
    h = (want.hour - now.hour) % 24
    if h > 12:
        h -= 24
    return "UTC" if h == 0 else f"Etc/GMT{-h:+d}"  # POSIX sign: Etc/GMT-2 is UTC+2


def policy_for(scenario: dict, epoch_ms: int) -> dict:
    """The bench's policy for one run.

    Segmentation: the groups of the shipped cluster and the directions its normal
    workloads use (collectives/incast between GPU nodes, GPU <-> storage, inference
    frontend -> GPU, SSH and metrics scrapes from management, DNS to mgmt01, egress to the authorized
    mirror); unknown hosts are left to unregistered_host / exfiltration.
    Off-hours: bulk transfers from storage, model store and management, except
    storage serving the GPU nodes; business hours 07:00-20:00 every day in a time zone
    chosen so that the run (which happens *now*, sFlow has no clock) falls at the
    scenario's designed hour of day (02:00 for segmentation, 14:00 for the rest).
    """
    designed = scenario["simulation"].get("start")
    designed_ms = epoch_ms
    if designed:
        designed_ms = int(datetime.fromisoformat(str(designed).replace("Z", "+00:00")).timestamp() * 1000)
    tz = _tz_for(designed_ms, epoch_ms)
    return {
        "segmentation": {
            "enabled": True,
            "groups": ["gpu", "storage", "mgmt", "model-store", "frontend", "external-authorized"],
            "skip_unknown": True,
            "allow": [
                {"name": "gpu-gpu", "src": "gpu", "dst": "gpu", "categories": ["*"]},
                {"name": "gpu-storage", "src": "gpu", "dst": "storage", "categories": ["storage"]},
                {"name": "storage-gpu", "src": "storage", "dst": "gpu", "categories": ["storage"]},
                {"name": "frontend-gpu", "src": "frontend", "dst": "gpu", "categories": ["*"]},
                # mgmt initiates SSH and metrics scrapes; replies come back from those ports
                {"name": "mgmt-any", "src": "mgmt", "dst": "*", "categories": ["*"], "ports": [22, 9100]},
                {"name": "any-dns", "src": "*", "dst": "mgmt", "categories": ["dns"], "ports": [53]},
                {"name": "egress-mirror", "src": "*", "dst": "external-authorized", "categories": ["external"]},
            ],
        },
        "off_hours_transfer": {
            "enabled": True,
            "source_groups": ["storage", "model-store", "mgmt"],
            "exclude_dst_groups": ["gpu"],
            "schedule": {"timezone": tz, "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                         "start": BUSINESS_START, "end": BUSINESS_END},
        },
    }  # fmt: skip


# --------------------------------------------------------------------------- collection


@dataclass
class Seen:
    detection: Detection
    evidence_ms: int  # event time of the evidence (window end, counter sample, alert's last_seen)
    wall_s: float  # when the bench read it


def evidence_ms(kind: str, v: dict, d: Detection) -> int:
    if kind in ("incast", "straggler", "pattern"):
        return int(v.get("window_end_ms", d.time_ms))
    if kind == "link":
        return int(v["time_ms"])
    if kind == "alert":
        return int(v.get("last_seen_ms") or v.get("window_end_ms") or d.time_ms)
    return int(d.time_ms)


class _NoConsumer:
    """Stands in for the Kafka consumer when the outputs come from an offline run."""

    def subscribe(self, topics) -> None:
        pass

    def close(self) -> None:
        pass


class BenchFeed(DetectionFeed):
    """DetectionFeed that also keeps every node-level matrix cell and the evidence time of each detection."""

    def __init__(self, settings, group: str | None = None, consumer=None):
        super().__init__(settings, group, consumer)
        self.cells: dict[int, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
        self.seen: list[Seen] = []

    def interpret(self, kind: str, v):
        if kind == "matrix" and v.level == "node":  # a matrix.windows.v2 window (schemas.matrix.MatrixWindow)
            cells, names = self.cells[v.window_start_ms], v.labels.tolist()
            for s, d, b in pair_bytes(v):
                cells[(names[s], names[d])] += b
        d = super().interpret(kind, v)
        if d is not None:
            self.seen.append(Seen(d, evidence_ms(kind, v, d), time.monotonic()))
        return d


@dataclass
class SimRun:
    """The simulator, sending in a thread.

    ``offsets_ms``: per sFlow agent, wall time - event time of its first datagram, i.e. the
    shift of that agent's uptime-based event times against the scenario clock.
    """

    scenario: str
    targets: dict
    speed: float
    start_ms: int
    duration_s: float | None = None
    max_pps: float = 5000.0
    sim: Simulation | None = None
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    first_send: dict[str, tuple[int, float]] = field(default_factory=dict)
    sent: int = 0
    wall_start: float | None = None

    def start(self) -> "SimRun":
        self.sim = Simulation(self.scenario, start_ms=self.start_ms, duration_s=self.duration_s,
                              kinds={"sflow", "netflow9", "ipfix", "marks"})
        threading.Thread(target=self._run, name="simulator", daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            stream = iter(self.sim.run())
            first = next(stream)
            delay = first[0] / 1000.0 - time.time()
            if delay > 0:
                time.sleep(delay)  # start when the wall clock reaches the scenario clock
            sender = UdpSender(parse_targets(self.targets))
            current = [first[0]]

            def tee(it):
                for dg in it:
                    current[0] = dg[0]
                    yield dg

            def send(kind, data, exporter=""):
                sender.send(kind, data, exporter)
                if kind == "sflow" and exporter not in self.first_send:
                    self.first_send[exporter] = (current[0], time.time() * 1000.0)

            self.wall_start = time.monotonic()
            try:
                st = pace_and_send(tee(chain([first], stream)), send, speed=self.speed, max_pps=self.max_pps)
                self.sent = st.sent
            finally:
                sender.close()
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.done.set()

    @property
    def offsets_ms(self) -> dict[str, float]:
        return {k: round(w - t, 1) for k, (t, w) in sorted(self.first_send.items())}


def ports_block(base: int) -> PipelinePorts:
    """Every pipeline port in ``[base, base + 30)`` (SeaweedFS's nine internal ports included), for running
    the bench beside other pipelines on one machine (``--port-block``)."""
    return PipelinePorts(kafka=base, s3=base + 1, s3_base=base + 10, sflow=base + 20, netflow=base + 21,
                         ipfix=base + 22, ingest_metrics=base + 23, processors_web=base + 24,
                         archive_metrics=base + 25, processors_metrics=base + 26, marks=base + 27)


def next_epoch_ms(window_ms: int = 10_000, lead_s: float = 3.0) -> int:
    """First window boundary at least ``lead_s`` from now (scenario epochs align with processor windows)."""
    t = int((time.time() + lead_s) * 1000)
    return -(-t // window_ms) * window_ms


# --------------------------------------------------------------------------- one scenario


@dataclass
class RunResult:
    scenario: str
    speed: float
    truth_path: Path
    seen: list[Seen]
    cells: dict
    offsets_ms: dict
    wall_s: float
    datagrams: int
    score: ScoreReport | None = None
    matrix: MatrixReport | None = None
    diagnoses: dict = field(default_factory=dict)  # detection ref -> its final diagnosis record
    diagnosis_score: dict[str, DiagnosisScore] | None = None
    seed: int | None = None

    def observed(self) -> list[Observed]:
        """The detections to score (``diagnosis`` lines announce a verdict, they detect nothing), each with the
        verdict of its final diagnosis."""
        return [Observed(s.detection.kind, s.detection.entity, s.evidence_ms, s.detection.summary, s.detection.cause,
                         self.diagnoses.get(s.detection.ref, {}).get("verdict", ""))
                for s in self.seen if s.detection.kind != "diagnosis"]


def _merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base``, nested mappings merged key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def scenario_file(name: str) -> Path:
    p = Path(name)
    return p.resolve() if p.is_file() else SCENARIO_DIR / f"{name}.yaml"


def run_scenario(
    name: str,
    state_dir: Path,
    *,
    speed: float = 10.0,
    ports: PipelinePorts | None = None,
    duration_s: float | None = None,
    archive: bool = False,
    extra: dict | None = None,
    drain_quiet_s: float = 2.0,
    drain_max_s: float = 60.0,
    log=print,
    on_up=None,
    on_drained=None,
) -> RunResult:
    """Run one scenario through a fresh local pipeline; return detections, matrix cells and the truth path.

    ``on_up(pipe)`` is called once the pipeline is up, before the simulator starts;
    ``on_drained(pipe, last_window_ms)`` once the scenario's last matrix window was read (or the
    drain timed out), while the pipeline still runs (the Prometheus end-to-end tests attach there).
    """
    path = scenario_file(name)
    scen = yaml.safe_load(path.read_text())
    state_dir = Path(state_dir)
    if state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    window_ms = int(float(scen["simulation"].get("window_s", 10)) * 1000)
    settings_extra = _merge(pipeline_extra(speed), extra or {})
    if archive:
        settings_extra["archive"] = {"url": f"file://{state_dir / 'archive'}", "s3_endpoint": None,
                                     "s3_access_key": None, "s3_secret_key": None}  # fmt: skip
    policy_path = state_dir / "policy.yaml"
    ports = ports or PipelinePorts.offset(BENCH_PORTS)
    pipe = LocalPipeline(state_dir, inventory=str(path), policy=str(policy_path), ports=ports, archive=archive,
                         extra=settings_extra)  # fmt: skip
    # the hour of day is what matters (policy_for): the run starts within a minute
    policy_path.write_text(yaml.safe_dump(policy_for(scen, int(time.time() * 1000) + 30_000), sort_keys=False))
    t0 = time.monotonic()
    truth_path = state_dir / "truth.jsonl"
    with pipe:
        up = time.monotonic() - t0
        if on_up is not None:
            on_up(pipe)
        epoch = next_epoch_ms(window_ms)
        feed = BenchFeed(pipe.settings())
        try:
            feed.poll(0.5)
            sim = SimRun(str(path), pipe.targets(), speed, epoch, duration_s).start()
            dur = sim.sim.duration_ms / 1000.0
            log(f"  {name}: pipeline up in {up:.0f}s; sending {dur:.0f}s of scenario at {speed:g}x"
                f" (~{dur / speed:.0f}s)")
            last_window = epoch + (int(dur * 1000) - 1) // window_ms * window_ms
            last_msg = time.monotonic()
            count = feed.messages
            ended: float | None = None
            while True:
                feed.poll(0.3)
                pipe.check()
                now = time.monotonic()
                if feed.messages != count:
                    count, last_msg = feed.messages, now
                if sim.done.is_set() and ended is None:
                    ended = now
                if ended is not None:
                    # the last windows close on the processors' idle timer (idle_close_s of wall time after
                    # the last data): wait for the scenario's last matrix window, then for quiet
                    complete = last_window in feed.cells
                    if (complete and now - last_msg >= drain_quiet_s) or now - ended >= drain_max_s:
                        break
            if sim.error is not None:
                raise sim.error
        finally:
            feed.close()
        if on_drained is not None:
            on_drained(pipe, last_window)
        wall = time.monotonic() - t0
        sim.sim.truth.write(truth_path)
    return RunResult(name, speed, truth_path, feed.seen, {k: dict(v) for k, v in feed.cells.items()}, sim.offsets_ms,
                     wall, sim.sent, diagnoses=dict(feed.diagnoses))  # fmt: skip


def run_scenario_offline(name: str, state_dir: Path, *, seed: int | None = None, partitions: int = 1,
                         extra: dict | None = None, duration_s: float | None = None) -> RunResult:
    """One scenario through the pipeline's code without a broker (devtools/offline.py): the same settings as
    the live bench at 1x (sFlow for the traffic detectors), one seed, ``partitions`` detector shards."""
    path = scenario_file(name)
    scen = yaml.safe_load(path.read_text())
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    over = _merge({"processors": {"detector_protocols": ["sflow5"]}}, extra or {})
    settings = offline_settings(over)
    epoch = int(time.time() * 1000) // 10_000 * 10_000
    policy = policy_for(scen, epoch)
    t0 = time.monotonic()
    run = run_offline(path, seed, start_ms=epoch, settings=settings, partitions=partitions, policy=policy,
                      duration_s=duration_s)
    feed = BenchFeed(settings, consumer=_NoConsumer())
    kinds = {"matrix", "incast", "straggler", "link", "alert", "pattern"}
    for o in run.outputs:
        if o.kind in kinds:
            feed.interpret(o.kind, o.value)
    truth_path = state_dir / (f"truth-{run.seed}.jsonl" if seed is not None else "truth.jsonl")
    with open(truth_path, "w") as fh:
        for line in run.truth:
            fh.write(json.dumps(line, sort_keys=True) + "\n")
    return RunResult(name, 1.0, truth_path, feed.seen, {k: dict(v) for k, v in feed.cells.items()}, {},
                     time.monotonic() - t0, run.datagrams, diagnoses=dict(feed.diagnoses), seed=run.seed)  # fmt: skip


def score_run(run: RunResult, min_expected_samples: float = 100.0) -> RunResult:
    truth = read_truth(run.truth_path)
    run.score = score_detections(run.observed(), truth)
    run.diagnosis_score = score_diagnoses(run.score)
    loss = [(f["start_ms"], f["end_ms"]) for f in truth if f.get("type") == "fault" and f["kind"] == "exporter_loss"]
    run.matrix = matrix_error(run.cells, truth, min_expected_samples=min_expected_samples, exclude=loss)
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append",
                    help=f"scenario name or file (repeatable; default all: {', '.join(SCENARIOS)})")
    ap.add_argument("--speed", type=float, default=10.0, help="scenario seconds per wall second (default 10)")
    ap.add_argument("--state-dir", default=".fabricflow/bench-detection", help="pipeline state, logs and truth files")
    ap.add_argument("--report", default=None, help="JSON report path (default STATE_DIR/report.json)")
    ap.add_argument("--port-offset", type=int, default=BENCH_PORTS, help="PipelinePorts.offset for the pipeline")
    ap.add_argument("--port-block", type=int, default=None,
                    help="put every pipeline port in [N, N+30) instead (overrides --port-offset)")
    ap.add_argument("--min-samples", type=float, default=100.0, help="matrix volume floor in expected samples per cell")
    ap.add_argument("--set", action="append", default=[], metavar="DETECTOR.PARAM=VALUE",
                    help="detector override passed as processors.detectors (e.g. pattern.min_acf=0.75); repeatable")
    ap.add_argument("--offline", action="store_true",
                    help="no broker: the simulator's datagrams through ingest and the processors' code in process "
                         "(devtools/offline.py), event time = scenario time; fast enough for many seeds. Also backfills each "
                         "scenario with job change marks (tuning, by default) into an archive and scores fabricflow "
                         "compare around each marker (devtools/scoring_compare.py)")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated simulator seeds to run each scenario with (--offline; default: the "
                         "scenario's own seed). Seeds other than the scenarios' own are held out from tuning")
    ap.add_argument("--partitions", type=int, default=1, help="detector shards of an --offline run (default 1)")
    ap.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                    help="run every scenario for this long instead of its own duration_s (faults keep their times; "
                         "the workloads run on)")
    ap.add_argument("--born-broken", action="store_true",
                    help="also run each scenario with faults with every fault active from its job's start "
                         "(STATE_DIR/NAME-born-broken.yaml), scored as NAME+born")
    a = ap.parse_args(argv)
    if a.duration is not None and a.duration <= 0:
        ap.error(f"--duration {a.duration:g}: a positive number of seconds")
    if a.seeds and not a.offline:
        ap.error("--seeds needs --offline")
    try:
        seeds = [int(x) for x in a.seeds.split(",")] if a.seeds else [None]
    except ValueError:
        ap.error(f"--seeds {a.seeds!r}: comma-separated integers")
    overrides: dict = {}
    for item in a.set:
        key, sep, value = item.partition("=")
        det, dot, param = key.strip().partition(".")
        if not (sep and dot and det and param):
            ap.error(f"--set {item!r}: use DETECTOR.PARAM=VALUE")
        overrides.setdefault(det, {})[param] = yaml.safe_load(value)
    names = a.scenario or list(SCENARIOS)
    state = Path(a.state_dir).resolve()
    runs: list[RunResult] = []
    compares: list[tuple[str, CompareOutcome]] = []  # (scenario@seed, outcome)
    t0 = time.monotonic()
    extra = {"processors": {"detectors": overrides}} if overrides else None
    todo = [(name, Path(name).stem, name) for name in names]
    if a.born_broken:
        for name in names:
            born = born_broken_file(scenario_file(name), state / "born-broken")
            if born is not None:
                todo.append((str(born), f"{Path(name).stem}+born", None))
    for path, label, compare_name in todo:
        for seed in seeds:
            if a.offline:
                run = run_scenario_offline(path, state / label, seed=seed, partitions=a.partitions, extra=extra,
                                           duration_s=a.duration)
            else:
                ports = ports_block(a.port_block) if a.port_block else PipelinePorts.offset(a.port_offset)
                run = run_scenario(path, state / label, speed=a.speed, ports=ports, extra=extra,
                                   duration_s=a.duration)
            run.scenario = label
            print_run(score_run(run, a.min_samples))
            runs.append(run)
            if a.offline and compare_name is not None:
                compares.extend(compare_scenario(scenario_file(compare_name), seed, state / label))
    for name in COMPARE_SCENARIOS if a.offline and not a.scenario else ():
        compares += [c for seed in seeds for c in compare_scenario(scenario_file(name), seed, state / Path(name).stem)]
    totals = merge_scores(r.score for r in runs)
    how = "offline" + (f", seeds {a.seeds}" if a.seeds else "") + (f", {a.partitions} shards" if a.partitions > 1 else "") \
        if a.offline else f"at {a.speed:g}x"
    how += f", {a.duration:g} s each" if a.duration else ""
    print(f"\n== all scenarios ({', '.join(sorted({r.scenario for r in runs}))}) {how} in {time.monotonic() - t0:.0f}s"
          + (f", overrides {overrides}" if overrides else ""))
    for line in detector_table(totals):
        print(line)
    tp = sum(s.tp for s in totals.values())
    fn = sum(s.fn for s in totals.values())
    fp = sum(s.fp for s in totals.values())
    dup = sum(s.duplicates for s in totals.values())
    recall = tp / (tp + fn) if tp + fn else None
    precision = (tp + dup) / (tp + dup + fp) if tp + dup + fp else None
    print(f"    overall: recall {pct(recall)}, precision {pct(precision)}"
          f" (TP {tp}, FP {fp}, FN {fn}, duplicates {dup})")
    diagnoses = merge_diagnoses(r.diagnosis_score or {} for r in runs)
    print("    diagnoses of the detections matched to a fault (final verdict per detection):")
    for line in diagnosis_table(diagnoses):
        print(line)
    for r in runs:
        label = r.scenario + (f"@{r.seed}" if r.seed is not None else "")
        print(f"    {label:<20}" + matrix_line(r.matrix).strip())
    if compares:
        ok = sum(o.correct for _l, o in compares)
        print(f"    compare around each scenario's change markers (offline backfill): {ok} of {len(compares)} as expected")
        for label, o in compares:
            print(f"    {label:<20}{o.line()}")
    out = Path(a.report) if a.report else state / "report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rep = report_json(runs, totals)
    rep["diagnosis_totals"] = {k: v.as_dict() for k, v in sorted(diagnoses.items())}
    rep["compare"] = [{"run": label} | o.as_dict() for label, o in compares]
    out.write_text(json.dumps(rep, indent=1, default=str))
    print(f"report: {out}")
    return 0

