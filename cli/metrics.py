"""``fabricflow sink metrics``: the flow-metrics service (sinks/metrics) in the foreground."""

from __future__ import annotations

from typing import Optional

import typer

from .archive import sink_app
from .context import fail, settings_of

HELP = ("Serve flow metrics for Prometheus (node-to-node, rack, group and app traffic, TCP/ECN/CNP signals, "
        "switch port counters, detector state) from the processors' output topics on /metrics.")


@sink_app.command("metrics", help=HELP)
def sink_metrics(
    ctx: typer.Context,
    bind: Optional[str] = typer.Option(None, "--bind", help="Address of /metrics and /healthz (default metrics.bind, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", min=0, max=65535, help="Port (default metrics.port, 9183; 0 = any free port)."),
    inventory: Optional[str] = typer.Option(None, "--inventory", "-i", help="Inventory file (default metrics.inventory, else processors.inventory)."),
    group: Optional[str] = typer.Option(None, "--group", help="Kafka consumer group (default metrics.group)."),
    series_budget: Optional[int] = typer.Option(None, "--series-budget", min=100, help="Series budget: node pairs get what the other families leave, the rest fold into \"other\" (default metrics.series_budget, 50000)."),
    start_lookback: Optional[float] = typer.Option(None, "--start-lookback", min=0, help="A new group skips messages older than this many seconds (default metrics.start_lookback_s)."),
    max_seconds: Optional[float] = typer.Option(None, "--max-seconds", help="Stop after this long (default: run until SIGTERM)."),
):
    from fabricflow.kafka_security import check_files
    from fabricflow.logs import setup_logging
    from fabricflow.readiness import Unreachable
    from processors.logic.enrich.inventory import InventoryError
    from sinks.metrics.service import MetricsService

    s = settings_of(ctx)
    upd = {k: v for k, v in {"bind": bind, "port": port, "inventory": inventory, "group": group,
                             "series_budget": series_budget, "start_lookback_s": start_lookback}.items()
           if v is not None}
    if upd:
        s = settings_of(ctx, metrics={**s.metrics.model_dump(), **upd})
    setup_logging(s.log_level)
    try:  # settings and files first: exit 2 before any connection
        check_files(s.kafka)
        svc = MetricsService(s)
    except (InventoryError, ValueError) as e:
        fail(str(e))
    try:
        svc.run(max_seconds=max_seconds)
    except Unreachable as e:  # Kafka did not answer within kafka.wait_timeout_s
        fail(str(e), 1)
    except OSError as e:  # the port is taken, the address is not local, ...
        fail(f"metrics: cannot serve on {s.metrics.bind}:{s.metrics.port}: {e}")


def register(app: typer.Typer) -> None:
    """The command sits in the ``sink`` group (cli/archive.py registers the group)."""
