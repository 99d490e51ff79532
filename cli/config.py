"""``fabricflow config ...``: show, check and document the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fabricflow.settings import ConfigError, configuration_markdown, dump_yaml, load_settings

from .context import fail, settings_of

config_app = typer.Typer(help="Show and check configuration.", no_args_is_help=True)


@config_app.command("dump")
def config_dump(ctx: typer.Context, show_secrets: bool = typer.Option(False, help="Print secrets instead of masking them.")):
    """Print the effective settings (defaults + file + environment) as YAML."""
    typer.echo(dump_yaml(settings_of(ctx), show_secrets=show_secrets), nl=False)


@config_app.command("check")
def config_check(ctx: typer.Context, file: Path = typer.Argument(..., help="YAML settings file to validate.")):
    """Validate a settings file (with the current environment); exit 2 with one line per problem if invalid."""
    try:
        load_settings(str(file))
    except ConfigError as e:
        fail(str(e))
    typer.echo(f"{file}: OK")


@config_app.command("docs")
def config_docs(output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout.")):
    """Print docs/configuration.md generated from the settings model."""
    text = configuration_markdown()
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
