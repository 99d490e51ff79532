"""The replay command alone in a Typer app with the --config callback, for tests that invoke it."""

from __future__ import annotations

import typer

from cli.main import State
from cli.replay import register


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def cb(ctx: typer.Context, config: str = typer.Option(None, "--config")):
        ctx.obj = State(config)

    register(app)
    return app
