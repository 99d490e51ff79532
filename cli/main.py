"""The ``fabricflow`` command: one entry point, one module per command group.

Each module under ``cli/`` adds its commands with ``register(app)`` and imports
the services it runs only inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from fabricflow import __version__
from fabricflow.compiled import NotBuilt
from fabricflow.settings import ConfigError

from . import archive, backfill, closedloop, config, console, metrics, pipeline, replay, stack
from .context import State

app = typer.Typer(
    name="fabricflow",
    help=(
        "Flow telemetry pipeline for AI training clusters: sFlow/NetFlow/IPFIX -> Kafka -> traffic matrices, "
        "incast, stragglers, link health, alerts -> hourly Parquet archive.\n\n"
        "Settings come from --config FILE (YAML), FABRICFLOW_* environment variables and defaults that run "
        "locally; see docs/configuration.md."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool):
    if value:
        typer.echo(f"fabricflow {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    config: Optional[str] = typer.Option(
        None, "--config", "-c", envvar="FABRICFLOW_CONFIG", help="YAML settings file (sections as in docs/configuration.md)."
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    ctx.obj = State(config)


for _group in (config, stack, pipeline, archive, metrics, replay, backfill, closedloop, console):
    _group.register(app)


def main() -> None:
    try:
        app()
    except (ConfigError, NotBuilt) as e:
        typer.echo(f"fabricflow: {e}", err=True)
        sys.exit(2)
