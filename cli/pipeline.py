"""Registers the data-path subcommands (decode, ingest, process, sink, query, replay, simulate, demo).

Kept apart from :mod:`cli.main` so each command imports its heavy
dependencies only when it runs.
"""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("decode")
    def decode_cmd(
        file: str = typer.Argument(..., help="pcap/pcapng file holding export datagrams (UDP)."),
        fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (one JSON object per record) or table."),
        port_map: Optional[str] = typer.Option(
            None, "--port-map", help="Which protocol each UDP port carries, e.g. 2055=netflow,6343=sflow,4739=ipfix. "
            "Without it the version field decides and every UDP packet is tried."
        ),
    ):
        """Decode a capture of export datagrams offline: records to stdout, a summary to stderr."""
        from ingest.offline import run_decode

        raise typer.Exit(run_decode(file, fmt=fmt, port_map=port_map))

    @app.command("simulate")
    def simulate_cmd(
        scenario: str = typer.Argument("mixed", help="Scenario file or shipped name: healthy, straggler, link_downgrade, incast, segmentation, mixed."),
        target: Optional[list[str]] = typer.Option(
            None, "--target", "-t", help="Where to send: KIND=HOST:PORT (kinds sflow, netflow9, ipfix, marks) or HOST:PORT for all "
            "export kinds; loopback only. Default 127.0.0.1:6343/2055/4739; the training jobs' step marks and the scenario's "
            "changes go only to a marks=HOST:PORT target (the ingest marks listener, 6344 by default)."
        ),
        speed: float = typer.Option(1.0, help="Scenario seconds per wall second (10 = ten times faster)."),
        duration: Optional[float] = typer.Option(None, help="Scenario seconds to run (default: the scenario's duration)."),
        seed: Optional[int] = typer.Option(None, help="Random seed (default: the scenario's); same seed = same datagrams."),
        truth: Optional[str] = typer.Option(None, help="Write the ground truth (faults, per-window node-to-node bytes) to this JSONL file."),
        start: Optional[str] = typer.Option(None, help="Scenario epoch: ISO time, unix seconds, or 'now' (default: the scenario's start)."),
        max_pps: float = typer.Option(5000.0, help="Cap on datagrams per wall second."),
        pcap: Optional[str] = typer.Option(None, help="Also write the datagrams to this pcap (step marks and changes to port 6344); "
                                           "read it back with `fabricflow backfill`."),
        no_send: bool = typer.Option(False, "--no-send", help="Send nothing: write --pcap (stamped with scenario time, each "
                                     "exporter from its own 127.0.0.x address) and/or --truth as fast as they are generated."),
    ):
        """Generate AI-cluster traffic as real sFlow v5 / NetFlow v9 / IPFIX datagrams (with injected faults) to UDP targets."""
        from devtools.simulator.cli import run_simulate

        start_ms, start_now = None, False
        if start == "now":
            start_now = True
        elif start:
            from datetime import datetime

            try:
                start_ms = int(float(start) * 1000)
            except ValueError:
                try:
                    start_ms = int(datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() * 1000)
                except ValueError:
                    raise typer.BadParameter(f"--start {start!r}: expected ISO time, unix seconds or 'now'") from None
        raise typer.Exit(
            run_simulate(
                scenario, targets=[] if no_send else (list(target) if target else None), speed=speed, duration_s=duration,
                seed=seed, truth_out=truth, start_ms=start_ms, start_now=start_now, max_pps=max_pps, pcap_out=pcap,
            )
        )  # fmt: skip

    @app.command("demo")
    def demo_cmd(
        ctx: typer.Context,
        scenario: str = typer.Option("mixed", "--scenario", "-s", help="Scenario to play (file or shipped name)."),
        duration: float = typer.Option(90.0, "--duration", "-d", help="Wall-clock seconds to run the scenario."),
        speed: float = typer.Option(5.0, help="Scenario seconds per wall second."),
        no_ui: bool = typer.Option(False, "--no-ui", help="Plain log lines, one per detection naming its kind (for CI and scripts)."),
        state_dir: str = typer.Option(".fabricflow/demo", help="Where logs, config and the archive of the demo go (wiped at start)."),
    ):
        """Run everything on the embedded stack with simulated cluster traffic and show detections live.

        Ports: those of the settings (--config / FABRICFLOW_...): stack.kafka_port, stack.s3_port,
        stack.s3_base_port, ingest.listen, the metrics ports, processors.web_port, console.listen."""
        from cli.context import fail, settings_of
        from devtools.demo import run_demo
        from devtools.runner import PipelineError, PipelinePorts
        from fabricflow.statedir import StateDirError

        ports = PipelinePorts.from_settings(settings_of(ctx))
        try:
            raise typer.Exit(run_demo(scenario, duration, speed, no_ui, state_dir, ports=ports))
        except StateDirError as e:
            fail(str(e))
        except PipelineError as e:
            fail(str(e), 1)

    @app.command("process")
    def process_cmd(
        ctx: typer.Context,
        inventory: Optional[str] = typer.Option(None, "--inventory", "-i", help="Inventory file (YAML/CSV); default processors.inventory."),
        policy: Optional[str] = typer.Option(None, "--policy", help="Policy file (YAML); default processors.policy."),
    ):
        """Run a processor worker (Faust): enrich flows, traffic matrices, incast, stragglers, link health, patterns, alerts.

        Several workers with the same processors.app_id share the partitions.
        """
        from cli.context import fail, settings_of
        from fabricflow.logs import setup_logging
        from fabricflow.kafka_security import SecurityFileError
        from fabricflow.statedir import StateDirError
        from processors.logic.core import CoreConfigError
        from processors.logic.enrich.inventory import InventoryError

        s = settings_of(ctx)
        upd = {k: v for k, v in {"inventory": inventory, "policy": policy}.items() if v}
        if upd:
            s = settings_of(ctx, processors={**s.processors.model_dump(), **upd})
        setup_logging(s.log_level)
        try:
            from processors.worker import run_processors

            raise typer.Exit(run_processors(s))
        except (CoreConfigError, InventoryError, SecurityFileError, StateDirError) as e:  # also a bad policy/categories file
            fail(str(e))

    @app.command("ingest")
    def ingest_cmd(
        ctx: typer.Context,
        listen: Optional[list[str]] = typer.Option(
            None, "--listen", "-l", help="Listener URL, repeatable: sflow://0.0.0.0:6343, netflow://[::]:2055, ipfix://0.0.0.0:4739. "
            "Default: ingest.listen from the settings."
        ),
        stdout: bool = typer.Option(False, "--stdout", help="Print decoded records as JSON lines instead of publishing to Kafka."),
        workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Worker processes per port (SO_REUSEPORT)."),
    ):
        """Receive sFlow/NetFlow/IPFIX on UDP, decode, publish batches to Kafka (flows.raw.v1, counters.raw.v1, ingest.dlq.v1)."""
        from cli.context import fail, settings_of
        from fabricflow.logs import setup_logging
        from ingest.listener import ListenError
        from ingest.start import run_ingest

        s = settings_of(ctx)
        if workers:
            s = settings_of(ctx, ingest={**s.ingest.model_dump(), "workers": workers})
        setup_logging(s.log_level)
        try:
            raise typer.Exit(run_ingest(s, listen=listen, stdout=stdout))
        except ListenError as e:
            fail(str(e))
        except ValueError as e:
            fail(str(e))
