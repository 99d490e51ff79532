"""A simulator scenario through a fresh local pipeline with the console serving beside it.

Shared by the console's browser tests (tests/e2e/test_console_browser.py), the screenshot
script (scripts/console-screenshots.py) and bench/console.py. The pipeline is
:class:`devtools.runner.LocalPipeline` (embedded broker + object store, ingest,
processors, archive sink to a local directory); the console is started in-process
with the pipeline's own settings file, as ``fabricflow console --config`` would be.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools.scenario_run import SimRun, next_epoch_ms, pipeline_extra, policy_for, scenario_file
from devtools.runner import LocalPipeline, PipelinePorts


# one block of ports (31300-31399 by default): broker, object store, UDP listeners, metrics, console, driver
def ports_in_block(base: int = 31300) -> tuple[PipelinePorts, int, int]:
    """(pipeline ports, console port, chromedriver port) inside [base, base + 100)."""
    p = PipelinePorts(kafka=base + 1, s3=base + 2, s3_base=base + 10, sflow=base + 20, netflow=base + 21,
                      ipfix=base + 22, ingest_metrics=base + 23, processors_web=base + 24, archive_metrics=base + 25,
                      processors_metrics=base + 26, flow_metrics=base + 27, console=base + 28,
                      console_metrics=base + 29, marks=base + 30)
    return p, base + 31, base + 32


@dataclass
class ConsoleRun:
    pipe: LocalPipeline
    console: object  # console.server.ConsoleServer
    sim: SimRun
    epoch_ms: int
    archive_dir: Path

    @property
    def url(self) -> str:
        return self.console.url


def wait_for(pred, timeout_s: float, what: str, poll_s: float = 0.5, check=None):
    """Poll ``pred()`` until it is truthy (returns it) or raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(poll_s)


@contextmanager
def scenario_with_console(name: str, state_dir: Path, *, base_port: int = 31300, speed: float = 10.0,
                          duration_s: float | None = None, log=print):
    from console.server import ConsoleServer

    path = scenario_file(name)
    scen = yaml.safe_load(path.read_text())
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    window_ms = int(float(scen["simulation"].get("window_s", 10)) * 1000)
    ports, console_port, _driver = ports_in_block(base_port)
    archive = state_dir / "archive"
    extra = pipeline_extra(speed)
    extra["archive"] = {"url": f"file://{archive}", "s3_endpoint": None, "s3_access_key": None, "s3_secret_key": None}
    extra["console"] = {"listen": f"127.0.0.1:{console_port}", "lookback_s": 3600}
    policy = state_dir / "policy.yaml"
    policy.write_text(yaml.safe_dump(policy_for(scen, int(time.time() * 1000) + 30_000), sort_keys=False))
    pipe = LocalPipeline(state_dir, inventory=str(path), policy=str(policy), ports=ports, archive=True, extra=extra)
    t0 = time.monotonic()
    with pipe:
        svc = ConsoleServer(pipe.settings()).start()
        try:
            epoch = next_epoch_ms(window_ms)
            sim = SimRun(str(path), pipe.targets(), speed, epoch, duration_s).start()
            log(f"  {name}: pipeline up in {time.monotonic() - t0:.0f}s; console at {svc.url}; "
                f"sending {sim.sim.duration_ms / 1000:.0f}s of scenario at {speed:g}x")
            yield ConsoleRun(pipe, svc, sim, epoch, archive)
        finally:
            svc.stop()
