"""``fabricflow backfill CAPTURE``: a pcap/pcapng of export datagrams -> the archive, offline (:mod:`replay.backfill`).

Progress goes to stderr while the capture is read, as nfdump -r or pmacct reading a savefile show it: a bar
with records/s and the share of the file on a terminal, a plain line every 10 s otherwise. The last line sums up.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from .context import fail, settings_of


def _progress_printer(quiet: bool):
    """on_progress callback: a rich bar on a terminal, else a line every 10 s; None when quiet."""
    if quiet:
        return None, lambda: None
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("backfill"), BarColumn(), TextColumn("{task.percentage:>3.0f}% of file"),
                       TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=Console(stderr=True),
                       transient=True)
        task = bar.add_task("backfill", total=1.0, info="")
        bar.start()

        def on_progress(st):
            rate = st.flow_records / st.wall_s if st.wall_s else 0.0
            bar.update(task, completed=st.fraction,
                       info=f"{st.datagrams:,} datagrams, {st.flow_records:,} records, {rate:,.0f} records/s")

        return on_progress, bar.stop
    last = [0.0]

    def on_line(st):
        if time.monotonic() - last[0] < 10.0 or st.fraction >= 1.0:
            return
        last[0] = time.monotonic()
        rate = st.flow_records / st.wall_s if st.wall_s else 0.0
        print(f"backfill: {100 * st.fraction:.0f}% of file, {st.datagrams:,} datagrams, {st.flow_records:,} records, "
              f"{rate:,.0f} records/s", file=sys.stderr, flush=True)

    return on_line, lambda: None


def register(app: typer.Typer) -> None:
    @app.command("backfill")
    def backfill_cmd(
        ctx: typer.Context,
        capture: str = typer.Argument(..., help="pcap/pcapng holding export datagrams (UDP): a tcpdump of the "
                                      "collector ports, ingest.capture_path, or `fabricflow simulate --pcap F --no-send`."),
        inventory: Optional[str] = typer.Option(None, "--inventory", help="Inventory file instead of "
                                                "processors.inventory (as the live processors enrich)."),
        policy: Optional[str] = typer.Option(None, "--policy", help="Policy file instead of processors.policy."),
        archive: Optional[str] = typer.Option(None, "--archive", help="Archive URL to write (file://DIR, "
                                              "s3://BUCKET/PREFIX); default archive.url. A local directory is created."),
        replace: bool = typer.Option(False, "--replace", help="First delete what an earlier backfill of this same "
                                     "capture wrote (otherwise its files are found and kept, and nothing is written twice)."),
        fmt: str = typer.Option("text", "--format", "-f", help="Summary on stdout: text or json."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress, only the summary."),
    ):
        """Run a capture of sFlow / NetFlow / IPFIX datagrams (and step/change mark lines) through the live
        pipeline's decoders, processors logic and archive writer, offline and deterministically, into the
        archive that `fabricflow query`, `fabricflow compare` and the console read.

        Capture timestamps are the receive times. docs/closed-loop.md, "Backfill".
        """
        from replay import ReplayError
        from replay.backfill import Backfill, open_archive_for_writing, remove_previous
        from replay.config import core_factory_from

        if fmt not in ("text", "json"):
            fail(f"--format {fmt!r}: use text or json")
        s = settings_of(ctx)
        if archive:
            s = settings_of(ctx, archive={**s.archive.model_dump(), "url": archive})
        on_progress, stop = _progress_printer(quiet)
        try:
            factory = core_factory_from(s.processors, inventory=inventory, policy=policy)
            fs, root = open_archive_for_writing(s.archive)
            bf = Backfill(s, capture, fs=fs, root=root, core_factory=factory, on_progress=on_progress)
            if replace:
                gone = remove_previous(fs, root, bf.stats.base_offset)
                if not quiet:
                    print(f"backfill: removed {gone} files of an earlier backfill of {capture}", file=sys.stderr)
            try:
                st = bf.run()
            finally:
                stop()
        except ReplayError as e:
            fail(str(e))
        except OSError as e:
            fail(f"backfill failed: {type(e).__name__}: {e}", 1)
        if fmt == "json":
            out = {k: v for k, v in st.__dict__.items() if k != "pcap"}
            out["archive"] = s.archive.url
            print(json.dumps(out, sort_keys=True))
        else:
            span = ""
            if st.first_ms is not None:
                from replay.core import iso_utc

                span = f" from {iso_utc(st.first_ms)} to {iso_utc(st.last_ms)}"
            print(f"backfill {capture}{span}: {st.line()} -> {s.archive.url}")
        if st.datagrams == 0:
            fail(f"{capture} holds no UDP datagrams", 1)
