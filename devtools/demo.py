"""``fabricflow demo``: the whole pipeline on the embedded stack, fed by the simulator, with a live view.

Starts the embedded broker and object store, ingest, a processor worker and
the archive sink (each a ``fabricflow`` subprocess, see
:mod:`devtools.runner`), runs a scenario through the simulator as real
sFlow/NetFlow/IPFIX datagrams on loopback, and shows detections as they
arrive: a rich terminal view (traffic-matrix heatmap, top talkers, events) or,
with ``--no-ui``, one plain line per detection naming its kind.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console, Group
from rich.layout import Layout
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .detections import Detection, DetectionFeed, MatrixView, _fmt_bps
from .runner import PORTS_BLOCK, LocalPipeline, PipelineError, PipelinePorts

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
SHADES = ["grey23", "blue", "cyan", "green", "yellow", "dark_orange", "red"]


def _iso(t: float) -> str:
    """Unix seconds as the UTC ISO-8601 text ``fabricflow replay --from/--to`` take (no zone = UTC)."""
    return datetime.fromtimestamp(int(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


def scenario_path(name: str) -> Path:
    p = Path(name)
    if p.is_file():
        return p.resolve()
    cand = SCENARIOS / f"{name}.yaml"
    if cand.is_file():
        return cand
    known = ", ".join(sorted(x.stem for x in SCENARIOS.glob("*.yaml") if not x.stem.endswith("example")))
    raise PipelineError(f"scenario {name!r} not found (a file, or one of: {known})")


def heatmap(view: MatrixView) -> Panel:
    ws, cells = view.latest()
    if not cells:
        return Panel(Text("waiting for the first traffic-matrix window ...", style="dim"), title="traffic matrix")
    nodes = sorted({s for s, _ in cells} | {d for _, d in cells})[:20]
    peak = max(cells.values()) or 1
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 0))
    t.add_column("src\\dst", style="bold", no_wrap=True)
    for n in nodes:
        t.add_column(n[-5:], justify="center", no_wrap=True, width=5)
    for s in nodes:
        row = []
        for d in nodes:
            b = cells.get((s, d), 0)
            if b <= 0:
                row.append(Text("  .  ", style="grey30"))
                continue
            level = min(len(SHADES) - 1, max(0, int(len(SHADES) * math.log10(1 + b) / math.log10(1 + peak)) - 1))
            row.append(Text("  #  ", style=f"bold {SHADES[level]}"))
        t.add_row(s, *row)
    title = f"traffic matrix (node x node, estimated bytes) window {_ts(ws)} + {view.window_ms // 1000}s"
    return Panel(t, title=title)


def talkers(view: MatrixView) -> Panel:
    t = Table(box=None)
    t.add_column("src")
    t.add_column("dst")
    t.add_column("est. rate", justify="right")
    span = max(1, len(view.windows)) * view.window_ms / 1000
    for s, d, b in view.top_talkers(10):
        t.add_row(s, d, _fmt_bps(b * 8 / span))
    return Panel(t, title="top talkers (last windows)")


def events_panel(events: list[Detection]) -> Panel:
    t = Table(box=None, show_header=True)
    t.add_column("event time")
    t.add_column("kind", style="bold")
    t.add_column("what")
    colors = {"critical": "red", "warning": "yellow", "info": "cyan"}
    for d in events[-14:]:
        t.add_row(_ts(d.time_ms), Text(d.kind, style=colors.get(d.severity, "white")), d.summary)
    return Panel(t if events else Text("no detections yet", style="dim"), title="detections")


def render(view: MatrixView, events: list[Detection], status: str) -> Layout:
    lay = Layout()
    lay.split_column(Layout(Text(status, style="bold"), size=1), Layout(name="top"), Layout(events_panel(events), size=17))
    lay["top"].split_row(Layout(heatmap(view), ratio=3), Layout(talkers(view), ratio=2))
    return lay


def run_demo(
    scenario: str = "mixed",
    duration_s: float = 90.0,
    speed: float = 5.0,
    no_ui: bool = False,
    state_dir: str = ".fabricflow/demo",
    console: Console | None = None,
    ports_from: int | None = None,
) -> int:
    """Run the demo; raises :class:`PipelineError` (a service failed, a port is taken) and
    :class:`~fabricflow.statedir.StateDirError` (``state_dir`` not writable)."""
    from fabricflow.logs import process_age_s
    from fabricflow.statedir import writable_dir

    from .simulator.cli import run_simulate

    console = console or Console()
    say = (lambda msg: print(msg, flush=True)) if no_ui else console.print
    scen = scenario_path(scenario)
    state = Path(state_dir).resolve()
    writable_dir(state, "--state-dir", "choose another with fabricflow demo --state-dir DIR")
    shutil.rmtree(state)
    archive_dir = state / "archive"
    pipe = LocalPipeline(
        state,
        inventory=str(scen),
        ports=PipelinePorts() if ports_from is None else PipelinePorts.block(ports_from),
        move_ports=f"; or move the demo's {PORTS_BLOCK} ports with --ports-from N",
        console=True,
        extra={
            # files every minute (not every 15): the console's drill-down into an event reads the archive
            "archive": {"url": f"file://{archive_dir}", "s3_endpoint": None, "s3_access_key": None, "s3_secret_key": None,
                        "max_file_age_s": 60},
            # The simulator's ToR sFlow sees every packet once; core NetFlow/IPFIX see some again:
            # traffic detectors use the sFlow layer only (policy alerts and the archive use everything).
            "ingest": {"sflow_event_time": "uptime"},
            "processors": {"detector_protocols": ["sflow5"]},
        },
    )
    t0 = time.monotonic() - process_age_s()  # the figures below count from the command's start
    say(f"fabricflow demo: scenario {scen.stem}, {duration_s:.0f}s at {speed:g}x; starting broker, object store, ingest, "
        "processors, archive sink, flow-metrics sink, console ...")
    sim_rc: list[int] = []
    stop = threading.Event()
    detections: list[Detection] = []
    sim_start = time.time()
    try:
        pipe.start()
        say(f"pipeline up in {time.monotonic() - t0:.1f}s (logs in {state}); sending {scen.stem} as sFlow/NetFlow/IPFIX to 127.0.0.1")
        say(f"metrics: {pipe.metrics_url}")
        say(f"console: {pipe.console_url}")
        settings = pipe.settings()
        feed = DetectionFeed(settings)

        def simulate():
            sim_rc.append(
                run_simulate(
                    str(scen), targets=pipe.targets(), speed=speed, duration_s=duration_s * speed, start_now=True, echo=lambda *_: None
                )
            )

        sim = threading.Thread(target=simulate, name="simulator", daemon=True)
        sim_start = time.time()  # the simulator's event time starts now and runs at ``speed``
        sim.start()
        end = time.monotonic() + duration_s + 8  # let the last windows close
        first: float | None = None

        def step():
            nonlocal first
            for d in feed.poll(0.3):
                detections.append(d)
                if first is None:
                    first = time.monotonic() - t0
                if no_ui:
                    print(f"{_ts(d.time_ms)} {d.kind} {d.entity}: {d.summary}", flush=True)
            pipe.check()

        if no_ui:
            while time.monotonic() < end and not stop.is_set():
                step()
        else:
            with Live(render(feed.matrix, detections, "starting ..."), console=console, refresh_per_second=2, screen=False) as live:
                while time.monotonic() < end:
                    step()
                    left = max(0, end - time.monotonic())
                    status = (
                        f"fabricflow demo | {scen.stem} at {speed:g}x | {len(detections)} detections | "
                        f"{feed.messages} output messages | {left:.0f}s left | Ctrl-C to stop"
                    )
                    live.update(render(feed.matrix, detections, status))
        feed.close()
    except KeyboardInterrupt:
        say("interrupted: stopping everything ...")
    except PipelineError as e:
        console.print(f"[red]demo failed:[/red] {e}") if not no_ui else print(f"demo failed: {e}", flush=True)
        pipe.stop()
        return 1
    finally:
        stop.set()
        pipe.stop()
    kinds: dict[str, int] = {}
    for d in detections:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    cfg = pipe.config_path
    lines = [
        "",
        f"summary: {len(detections)} detections: " + (", ".join(f"{k}={v}" for k, v in sorted(kinds.items())) or "none"),
        f"first detection {first:.0f}s after the start of fabricflow demo" if first is not None else "no detection (try a longer --duration)",
        f"archive (hourly Parquet): {archive_dir}",
        "try:",
        f"  fabricflow --config {cfg} query top-talkers",
        f"  fabricflow --config {cfg} query matrix --level group --format csv",
        f"  fabricflow --config {cfg} query sql \"SELECT category, sum(bytes_est) FROM flows_enriched GROUP BY 1\"",
        f"  fabricflow --config {cfg} replay --from {_iso(sim_start - 60)} --to {_iso(sim_start + duration_s * speed + 60)} "
        "--set incast.min_sources=3 --report replay.json",
    ]
    for line in lines:
        print(line, flush=True)
    return 0
