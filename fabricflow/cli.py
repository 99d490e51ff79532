"""The ``fabricflow`` command: one entry point, one subcommand per service or tool."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from . import __version__
from .settings import ConfigError, Settings, configuration_markdown, dump_yaml, load_settings

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
config_app = typer.Typer(help="Show and check configuration.", no_args_is_help=True)
stack_app = typer.Typer(help="Start/stop the embedded broker (Tansu) and object store (SeaweedFS) on 127.0.0.1.", no_args_is_help=True)
topics_app = typer.Typer(help="Kafka topics owned by fabricflow.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(stack_app, name="stack")
app.add_typer(topics_app, name="topics")


class State:
    def __init__(self, config: str | None):
        self.config = config
        self._settings: Settings | None = None

    def settings(self, **overrides) -> Settings:
        if overrides:
            return load_settings(self.config, **overrides)
        if self._settings is None:
            self._settings = load_settings(self.config)
        return self._settings


def fail(msg: str, code: int = 2) -> "typer.Exit":
    typer.echo(f"fabricflow: {msg}", err=True)
    raise typer.Exit(code)


def _state(ctx: typer.Context) -> State:
    return ctx.ensure_object(State) if ctx.obj is None else ctx.obj


def settings_of(ctx: typer.Context, **overrides) -> Settings:
    try:
        return _state(ctx).settings(**overrides)
    except ConfigError as e:
        fail(str(e))


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


# --------------------------------------------------------------------------- config


@config_app.command("dump")
def config_dump(ctx: typer.Context, show_secrets: bool = typer.Option(False, help="Print secrets instead of masking them.")):
    """Print the effective settings (defaults + file + environment) as YAML."""
    typer.echo(dump_yaml(settings_of(ctx), show_secrets=show_secrets), nl=False)


@config_app.command("check")
def config_check(ctx: typer.Context, file: Path = typer.Argument(..., help="YAML settings file to validate.")):
    """Validate a settings file (with the current environment) and the files it names (inventory, policy,
    category rules, TLS files); exit 2 with one line per problem if invalid."""
    try:
        s = load_settings(str(file))
    except ConfigError as e:
        fail(str(e))
    from fabricflow.kafka_security import SecurityFileError, check_files
    from processors.logic.config_files import check_config_files

    problems = check_config_files(s.processors)  # inventory, policy, category rules: one line each
    try:
        check_files(s.kafka)
    except SecurityFileError as e:
        problems.append(str(e))
    if problems:
        for line in problems:
            typer.echo(f"fabricflow: {file}: {line}", err=True)
        raise typer.Exit(2)
    typer.echo(f"{file}: OK")


@config_app.command("docs")
def config_docs(output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout.")):
    """Print docs/configuration.md generated from the settings model."""
    text = configuration_markdown()
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


# --------------------------------------------------------------------------- stack


def _print_status(rows: list[dict]) -> None:
    for r in rows:
        state = "running" if r["running"] else "stopped"
        reach = "reachable" if r["reachable"] else "not reachable"
        extra = f" storage={r['storage_engine']}" if "storage_engine" in r else ""
        typer.echo(f"{r['service']:<10} {state:<8} pid={r['pid'] or '-':<8} 127.0.0.1:{r['port']} {reach}{extra}  log={r['log']}")


@stack_app.command("up")
def stack_up(
    ctx: typer.Context,
    storage: Optional[str] = typer.Option(None, help="Broker storage engine: memory (default) or s3 (persistent, on SeaweedFS)."),
    no_s3: bool = typer.Option(False, "--no-s3", help="Do not start the object store (only with --storage memory)."),
):
    """Start the embedded broker and object store in the background and create the topics."""
    from .stack import EmbeddedStack, StackError
    from .topics import ensure_topics

    s = settings_of(ctx)
    if storage:
        s = settings_of(ctx, stack={**s.stack.model_dump(), "storage_engine": storage})
    st = EmbeddedStack(s, with_s3=not no_s3)
    try:
        rows = st.up()
    except StackError as e:
        fail(str(e), 1)
    _print_status(rows)
    created = ensure_topics(s.kafka.model_copy(update={"bootstrap_servers": st.bootstrap}))
    typer.echo(f"topics: {sum(v == 'created' for v in created.values())} created, {sum(v == 'exists' for v in created.values())} existing")
    typer.echo(f"broker: {st.bootstrap}   s3: {st.s3_endpoint if st.with_s3 else '-'} bucket={s.stack.bucket}")


@stack_app.command("down")
def stack_down(ctx: typer.Context):
    """Stop the embedded services started by `stack up`."""
    from .stack import EmbeddedStack

    stopped = EmbeddedStack(settings_of(ctx)).down()
    typer.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@stack_app.command("status")
def stack_status(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="JSON output.")):
    """Show whether the embedded services run and answer; exit 1 if the broker is down."""
    from .stack import EmbeddedStack

    st = EmbeddedStack(settings_of(ctx), with_s3=True)
    rows = st.status()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        _print_status(rows)
    if not rows[0]["running"]:
        raise typer.Exit(1)


# --------------------------------------------------------------------------- topics


@topics_app.command("create")
def topics_create(ctx: typer.Context):
    """Create missing topics (idempotent) on the configured broker."""
    from .topics import ensure_topics

    s = settings_of(ctx)
    try:
        res = ensure_topics(s.kafka)
    except Exception as e:
        fail(f"cannot create topics on {s.kafka.bootstrap_servers}: {e}", 1)
    for name, what in res.items():
        typer.echo(f"{name}: {what}")


@topics_app.command("list")
def topics_list(ctx: typer.Context):
    """List fabricflow's topics with partitions, schema and key."""
    from .topics import topic_specs

    for t in topic_specs(settings_of(ctx).kafka):
        typer.echo(f"{t.name:<22} partitions={t.partitions:<3} schema={t.schema or '-':<16} {t.doc}")


def main() -> None:
    from .commands import register

    register(app)
    try:
        app()
    except ConfigError as e:
        typer.echo(f"fabricflow: {e}", err=True)
        sys.exit(2)
