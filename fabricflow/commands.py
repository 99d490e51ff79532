"""Registers the data-path subcommands (decode, ingest, process, sink, query, replay, simulate, demo).

Kept apart from :mod:`fabricflow.cli` so each command imports its heavy
dependencies only when it runs.
"""

from __future__ import annotations

from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("decode")
    def decode_cmd(
        file: str = typer.Argument(..., help="pcap/pcapng file holding export datagrams (UDP)."),
        fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (one JSON object per record) or table."),
        port_map: Optional[str] = typer.Option(
            None, "--port-map", help="Which protocol each UDP port carries, e.g. 2055=netflow,6343=sflow,4739=ipfix. "
            "Without it the version field decides and every UDP packet is tried."
        ),
    ):
        """Decode a capture of export datagrams offline: records to stdout, a summary to stderr."""
        from ingest.offline import run_decode

        raise typer.Exit(run_decode(file, fmt=fmt, port_map=port_map))
