"""``fabricflow stack ...`` (the embedded broker and object store) and ``fabricflow topics ...``."""

from __future__ import annotations

import json
from typing import Optional

import typer

from .context import fail, settings_of

stack_app = typer.Typer(help="Start/stop the embedded broker (Tansu) and object store (SeaweedFS) on 127.0.0.1.", no_args_is_help=True)
topics_app = typer.Typer(help="Kafka topics owned by fabricflow.", no_args_is_help=True)


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
    from devtools.stack import SESSION_TIMEOUT_MS, EmbeddedStack, StackError
    from fabricflow.kafka import ensure_topics
    from fabricflow.statedir import StateDirError

    s = settings_of(ctx)
    if storage:
        s = settings_of(ctx, stack={**s.stack.model_dump(), "storage_engine": storage})
    st = EmbeddedStack(s, with_s3=not no_s3)
    try:
        rows = st.up()
    except StateDirError as e:
        fail(str(e))
    except StackError as e:
        fail(str(e), 1)
    _print_status(rows)
    created = ensure_topics(s.kafka.model_copy(update={"bootstrap_servers": st.bootstrap}))
    typer.echo(f"topics: {sum(v == 'created' for v in created.values())} created, {sum(v == 'exists' for v in created.values())} existing")
    typer.echo(f"broker: {st.bootstrap}   s3: {st.s3_endpoint if st.with_s3 else '-'} bucket={s.stack.bucket}")
    if s.kafka.session_timeout_ms > SESSION_TIMEOUT_MS:
        typer.echo(f"group members join this broker in {-(-s.kafka.session_timeout_ms // 2000)} s with kafka.session_timeout_ms "
                   f"{s.kafka.session_timeout_ms}; FABRICFLOW_KAFKA__SESSION_TIMEOUT_MS={SESSION_TIMEOUT_MS} makes it 1 s "
                   "(docs/embedded-stack.md)")


@stack_app.command("down")
def stack_down(ctx: typer.Context):
    """Stop the embedded services started by `stack up`."""
    from devtools.stack import EmbeddedStack

    stopped = EmbeddedStack(settings_of(ctx)).down()
    typer.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@stack_app.command("status")
def stack_status(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="JSON output.")):
    """Show whether the embedded services run and answer; exit 1 if the broker is down."""
    from devtools.stack import EmbeddedStack

    st = EmbeddedStack(settings_of(ctx), with_s3=True)
    rows = st.status()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        _print_status(rows)
    if not rows[0]["running"]:
        raise typer.Exit(1)


@topics_app.command("create")
def topics_create(ctx: typer.Context):
    """Create missing topics (idempotent) on the configured broker."""
    from fabricflow.kafka import ensure_topics

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
    from fabricflow.streams import topic_specs

    for t in topic_specs(settings_of(ctx).kafka):
        typer.echo(f"{t.name:<22} partitions={t.partitions:<3} schema={t.schema or '-':<16} {t.doc}")


def register(app: typer.Typer) -> None:
    app.add_typer(stack_app, name="stack")
    app.add_typer(topics_app, name="topics")
