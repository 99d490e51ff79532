"""Command-line entry of the simulator: ``run_simulate`` (wired into ``fabricflow simulate``) and
``python -m devtools.simulator`` (argparse, same options)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from .engine import Simulation

ALL_KINDS = {"sflow", "netflow9", "ipfix", "marks"}  # marks go to a marks= target and into a capture
from .exporters.pcap import DistinctSources, write_pcap
from .model import ScenarioError, parse_time_ms
from .sender import TargetError, UdpSender, pace_and_send, parse_targets


def run_simulate(
    scenario: str,
    targets: dict[str, str] | list[str] | None = None,
    speed: float = 1.0,
    duration_s: float | None = None,
    seed: int | None = None,
    truth_out: str | None = None,
    start_ms: int | None = None,
    *,
    max_pps: float = 5000.0,
    max_datagrams: int | None = None,
    allow_remote: bool = False,
    pcap_out: str | None = None,
    distinct_sources: bool = True,
    start_now: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Run a scenario onto UDP targets (or into ``pcap_out`` without sending when ``targets`` == []).

    ``start_ms``: scenario epoch (unix ms); default the scenario's ``start`` (``start_now``: wall clock).
    ``speed``: event-time seconds per wall second (<= 0: as fast as ``max_pps`` allows).
    Returns a process exit code: 0 ok, 2 bad arguments/scenario, 1 send errors.
    """
    try:
        if start_ms is None and start_now:
            start_ms = int(time.time()) * 1000
        tgt = None if targets == [] else parse_targets(targets, allow_remote=allow_remote)
        # marks (step marks, changes) into a capture, or to a marks= target; never generated for nobody
        kinds = ALL_KINDS if pcap_out or (tgt is not None and "marks" in tgt) else ALL_KINDS - {"marks"}
        sim = Simulation(scenario, seed=seed, start_ms=start_ms, duration_s=duration_s, kinds=kinds)
        stream = sim.run(max_datagrams)
        if tgt is None:  # --no-send: only the capture and/or the truth
            if not pcap_out and not truth_out:
                raise ValueError("--no-send writes nothing without --pcap or --truth")
            if pcap_out:
                n = write_pcap(pcap_out, stream, sources=DistinctSources())
                echo(f"wrote {n} datagrams to {pcap_out}")
            else:
                for _ in stream:
                    pass
            stats_errors = 0
        else:
            sender = UdpSender(tgt, distinct_sources=distinct_sources)
            if pcap_out:
                captured: list = []

                def tee(it):
                    for d in it:
                        captured.append(d)
                        yield d

                stream = tee(stream)
            echo(
                f"simulating {sim.scen.name}: {sim.duration_ms / 1000:.0f} s of scenario time from "
                f"{sim.start_ms} at speed {speed}, to "
                + ", ".join(f"{k}={h}:{p}" for k, (h, p) in tgt.items())
            )
            try:
                st = pace_and_send(stream, sender.send, speed=speed, max_pps=max_pps, max_datagrams=max_datagrams)
            finally:
                sender.close()
            if pcap_out:
                write_pcap(pcap_out, captured, ports={k: p for k, (_, p) in tgt.items()}, sources=sender.source_of)
            echo(f"sent {st.sent - sum(sender.skipped.values())} datagrams {st.by_kind} in {st.wall_s:.1f} s, "
                 f"{st.errors} errors" + "".join(f"; {n} {k} not sent (no {k}=HOST:PORT target)"
                                                 for k, n in sorted(sender.skipped.items())))
            stats_errors = st.errors
        if truth_out:
            sim.truth.write(truth_out)
            echo(f"truth written to {truth_out}")
        return 1 if stats_errors else 0
    except (ScenarioError, TargetError, ValueError, FileNotFoundError) as exc:
        echo(f"error: {exc}")
        return 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.simulator", description=__doc__)
    ap.add_argument("scenario", help="scenario YAML path or shipped name (healthy, straggler, ...)")
    ap.add_argument("--target", action="append", default=None,
                    help="kind=host:port or host:port (all export kinds); repeatable; default loopback 6343/2055/4739; "
                         "marks=host:port sends the training jobs' step marks and the scenario's changes")
    ap.add_argument("--speed", type=float, default=1.0, help="scenario seconds per wall second (0 = unpaced)")
    ap.add_argument("--duration", type=float, default=None, help="scenario seconds to run (default: scenario's)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--truth", default=None, help="write ground truth JSON lines here")
    ap.add_argument("--start", default=None, help="scenario epoch: ISO time or unix seconds, or 'now'")
    ap.add_argument("--max-pps", type=float, default=5000.0)
    ap.add_argument("--max-datagrams", type=int, default=None)
    ap.add_argument("--pcap", default=None, help="also write the datagrams to this pcap")
    ap.add_argument("--no-send", action="store_true", help="only write --pcap/--truth, send nothing")
    ap.add_argument("--allow-remote", action="store_true", help="allow non-loopback targets")
    a = ap.parse_args(argv)  # fmt: skip
    start_ms = None
    start_now = a.start == "now"
    if a.start and not start_now:
        start_ms = parse_time_ms(float(a.start) if a.start.replace(".", "").isdigit() else a.start)
    return run_simulate(
        a.scenario, [] if a.no_send else a.target, a.speed, a.duration, a.seed, a.truth, start_ms,
        max_pps=a.max_pps, max_datagrams=a.max_datagrams, allow_remote=a.allow_remote, pcap_out=a.pcap,
        start_now=start_now,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
