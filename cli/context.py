"""What every command module shares: the settings of this invocation and the one-line failure exit."""

from __future__ import annotations

import typer

from fabricflow.settings import ConfigError, Settings, load_settings


class State:
    """The ``--config`` file of this invocation and the settings loaded from it (once)."""

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
    """Print ``fabricflow: msg`` on stderr and exit with ``code`` (2: the user can fix it)."""
    typer.echo(f"fabricflow: {msg}", err=True)
    raise typer.Exit(code)


def settings_of(ctx: typer.Context, **overrides) -> Settings:
    """The settings for this command (``overrides``: whole sections replaced, as CLI flags do)."""
    state = ctx.ensure_object(State) if ctx.obj is None else ctx.obj
    try:
        return state.settings(**overrides)
    except ConfigError as e:
        fail(str(e))
