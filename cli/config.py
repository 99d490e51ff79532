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
    """Validate a settings file (with the current environment), its detector parameters and the files it names
    (inventory, policy, category rules, TLS files); exit 2 with one line per problem if invalid."""
    from fabricflow.kafka_security import SecurityFileError, check_files
    from processors.config_files import check_config_files
    from processors.logic.core import CoreConfigError, engine_config

    try:
        s = load_settings(str(file))
    except ConfigError as e:
        fail(str(e))
    problems = []
    try:
        engine_config(s.processors)
    except CoreConfigError as e:
        problems.append(str(e))
    problems += check_config_files(s.processors)  # inventory, policy, category rules: one line each
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
    text = configuration_docs()
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


def configuration_docs() -> str:
    """docs/configuration.md: the settings model, then every detector parameter (declared beside its code)."""
    import yaml

    from processors.logic.core import DETECTORS
    from processors.logic.params import describe_params

    lines = [
        configuration_markdown().rstrip("\n"),
        "",
        "## Detector parameters",
        "",
        "Declared beside each detector's code (`processors/logic/detectors/*.py`, the matrix's in",
        "`processors/logic/windows/matrix.py`), validated when a worker or a replay",
        "starts and by `fabricflow config check` (exit 2 with one line naming the parameter). Set them under",
        "`processors.detectors.<detector>` in the YAML file, as `FABRICFLOW_PROCESSORS__DETECTORS` (JSON, e.g.",
        "`'{\"incast\": {\"min_sources\": 3}}'`), or for one replay with `--set <detector>.<parameter>=VALUE`.",
        "",
        "| parameter | default | description |",
        "|---|---|---|",
    ]
    for name, cls in DETECTORS.items():
        for param, default, desc in describe_params(cls):
            d = "`" + yaml.safe_dump(list(default) if isinstance(default, tuple) else default,
                                     default_flow_style=True).strip().removesuffix("...").strip() + "`"
            lines.append(f"| `processors.detectors.{name}.{param}` | {d} | {desc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
