"""Every command and subcommand has useful --help text."""

import typer.main
from typer.testing import CliRunner

from cli.main import app
from cli.pipeline import register

register(app)
runner = CliRunner()


def _walk(group, path=()):
    for name, cmd in getattr(group, "commands", {}).items():
        yield path + (name,), cmd
        yield from _walk(cmd, path + (name,))


def test_every_subcommand_has_help():
    root = typer.main.get_command(app)
    seen = 0
    for path, cmd in _walk(root):
        r = runner.invoke(app, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"
        assert "Usage" in r.output
        seen += 1
    assert seen >= 8


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("fabricflow ")


def test_version_is_the_installed_distributions():
    """`fabricflow --version` and the package metadata (what pip shows) come from one place."""
    from importlib.metadata import version

    import fabricflow

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"fabricflow {fabricflow.__version__}"
    assert version("fabricflow") == fabricflow.__version__
