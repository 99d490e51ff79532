"""``fabricflow console``: serve the web console (docs/console.md)."""

from __future__ import annotations

import typer

from .context import fail, settings_of


def register(app: typer.Typer) -> None:
    """Add the ``console`` command to ``app``."""

    @app.command("console")
    def console_cmd(
        ctx: typer.Context,
        listen: str | None = typer.Option(
            None, "--listen", help="HOST:PORT to serve on (default console.listen, 127.0.0.1:8090). "
            "A non-loopback address needs console.token (FABRICFLOW_CONSOLE__TOKEN)."),
        no_live: bool = typer.Option(False, "--no-live", help="Do not read Kafka (archive only)."),
        no_archive: bool = typer.Option(False, "--no-archive", help="Do not read the archive (live only)."),
    ):
        """Web console: traffic matrix, topology, jobs, events and top-N, live from Kafka and from the archive."""
        from console.server import ConsoleConfigError, ConsoleServer
        from fabricflow.logs import setup_logging

        s = settings_of(ctx)
        setup_logging(s.log_level)
        try:
            svc = ConsoleServer(s, listen=listen, live=not no_live, archive=not no_archive)
        except ConsoleConfigError as e:
            fail(str(e))
        except ValueError as e:  # a bad inventory file: its own one-line message
            fail(f"console: {e}")
        try:
            svc.start()
        except ConsoleConfigError as e:
            fail(str(e))
        typer.echo(f"console: {svc.url}")
        svc.serve_forever()  # until SIGTERM/SIGINT; stops everything it started
