"""``fabricflow demo``: the whole pipeline on the embedded stack, fed by the simulator, with a live view.

Starts the embedded broker and object store, ingest, a processor worker and
the archive sink (each a ``fabricflow`` subprocess, see
:mod:`devtools.runner`), runs a scenario through the simulator as real
sFlow/NetFlow/IPFIX datagrams on loopback, and shows detections as they
arrive: a rich terminal view (traffic-matrix heatmap, top talkers, events) or,
with ``--no-ui``, one plain line per detection naming its kind.
"""

from __future__ import annotations

import re
import shutil
import textwrap
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.live import Live

from .demo_view import Screen
from .detections import Detection, DetectionFeed
from .runner import LocalPipeline, PipelineError, PipelinePorts

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _iso(t: float) -> str:
    """Unix seconds as the UTC ISO-8601 text ``fabricflow replay --from/--to`` take (no zone = UTC)."""
    return datetime.fromtimestamp(int(t), timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S")


def status_lines(scenario: str, speed: float, detections: int, messages: int, left_s: float, pipe: LocalPipeline
                 ) -> list[list[str]]:
    """The screen's status lines, each from its longest to its shortest variant (the first that fits is shown)."""
    left = f"{left_s:.0f}s left"
    return [
        [f"fabricflow demo | {scenario} at {speed:g}x | {detections} detections | {messages} output messages | "
         f"{left} | Ctrl-C to stop",
         f"fabricflow demo | {scenario} at {speed:g}x | {detections} detections | {left} | Ctrl-C to stop",
         f"demo {scenario} {speed:g}x | {detections} detections | {left} | Ctrl-C stops",
         f"{detections} detections | {left}"],
        [f"console {pipe.console_url}   metrics {pipe.metrics_url}   logs {_shown(pipe.state_dir)}",
         f"console {pipe.console_url}   metrics {pipe.metrics_url}", f"console {pipe.console_url}"],
    ]


def scenario_path(name: str) -> Path:
    p = Path(name)
    if p.is_file():
        return p.resolve()
    cand = SCENARIOS / f"{name}.yaml"
    if cand.is_file():
        return cand
    known = ", ".join(sorted(x.stem for x in SCENARIOS.glob("*.yaml") if not x.stem.endswith("example")))
    raise PipelineError(f"scenario {name!r} not found (a file, or one of: {known})")


def run_demo(
    scenario: str = "mixed",
    duration_s: float = 90.0,
    speed: float = 5.0,
    no_ui: bool = False,
    state_dir: str = ".fabricflow/demo",
    console: Console | None = None,
    ports: PipelinePorts | None = None,
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
        ports=ports or PipelinePorts(),
        move_ports="; or choose other ports in the settings (fabricflow demo --help)",
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
            def screen() -> Screen:
                left = max(0, end - time.monotonic())
                return Screen(feed.matrix, detections,
                              status_lines(scen.stem, speed, len(detections), feed.messages, left, pipe))

            with Live(screen(), console=console, refresh_per_second=2, screen=False) as live:
                while time.monotonic() < end:
                    step()
                    live.update(screen())
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
    sim_end = sim_start + duration_s * speed
    width = None if no_ui else console.width
    for line in closing_lines(detections, first, archive_dir, pipe.config_path, sim_start, sim_end, width):
        print(line, flush=True)
    return 0


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (shorter to copy), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _command() -> str:
    """How to call fabricflow from here: ``fabricflow`` when that is what the PATH finds, else the path of the
    one running (``make demo`` runs ``.venv/bin/fabricflow``, which a fresh shell does not find)."""
    import sys

    mine = Path(sys.executable).parent / "fabricflow"
    found = shutil.which("fabricflow")
    if (found and Path(found).resolve() == mine.resolve()) or not mine.exists():
        return "fabricflow"
    return _shown(mine)


def closing_lines(detections: list[Detection], first: float | None, archive_dir: Path, config: Path,
                  sim_from: float, sim_to: float, width: int | None = None) -> list[str]:
    """What the demo prints when it ends: the detections by kind, the archive, and commands to try on it. A
    command wider than ``width`` continues on a second line (``\\``), so a terminal does not break it mid-word."""
    from query.views import EXAMPLE_SQL

    kinds: dict[str, int] = {}
    found = [d for d in detections if d.kind != "diagnosis"]  # diagnosis lines name a verdict, they detect nothing
    for d in found:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    said = len(detections) - len(found)
    ff = f"{_command()} --config {_shown(config)}"

    def cmd(args: str) -> str:
        line = f"  {ff} {args}"
        if width is None or len(line) <= width:
            return line
        lines = [f"  {ff}"]
        for word in re.findall(r'"[^"]*"|\S+', args):  # a quoted SQL stays one word
            if len(lines) > 1 and len(f"{lines[-1]} {word} \\") <= width:
                lines[-1] += f" {word}"
            else:
                lines.append(f"      {word}")
        return " \\\n".join(lines)

    summary = f"summary: {len(found)} detections: " + (
        ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())) or "none") + (
        f"; {said} diagnosis {'line' if said == 1 else 'lines'} (the console's events view has every diagnosis)"
        if said else "")
    return [
        "",
        "\n".join(textwrap.wrap(summary, width, subsequent_indent="  ")) if width else summary,
        f"first detection {first:.0f}s after the start of fabricflow demo" if first is not None else "no detection (try a longer --duration)",
        f"archive (hourly Parquet): {_shown(archive_dir)}",
        "try (each packet counted once, however many exporters saw it):",
        cmd("query top-talkers"),
        cmd("query matrix --level group"),
        cmd(f"query sql \"{EXAMPLE_SQL}\""),
        cmd(f"replay --from {_iso(sim_from - 60)} --to {_iso(sim_to + 60)} --set incast.min_sources=3 "
            "--report replay.json"),
        "  (flows: each packet once; flow_observations: every exporter's record)",
    ]
