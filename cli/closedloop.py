"""``fabricflow mark`` (record a change) and ``fabricflow compare`` (before vs after it): the closed loop of
docs/closed-loop.md. Errors the user can fix exit 2 with one line; a broker or store that does not answer, 1."""

from __future__ import annotations

import getpass
import json
import socket
import sys
import time
from typing import Optional

import typer

from .context import fail, settings_of
from .options import Subject, parse_duration_ms, with_subject_options


def _time_ms(text: str | None, what: str) -> int:
    from query.timerange import parse_time

    if text is None or text == "now":
        return int(time.time() * 1000)
    t = text.strip()
    if t.startswith("-"):  # -10m: that long ago
        try:
            return int(time.time() * 1000) - parse_duration_ms(t[1:])
        except ValueError as e:
            fail(f"{what}: {e}")
    try:
        return parse_time(t)
    except (TypeError, ValueError) as e:
        fail(f"{what} {text!r}: {e}")


def _range(text: str | None, what: str) -> tuple[int, int] | None:
    """``FROM..TO`` (each ISO-8601, unix ms, or -DURATION for that long ago) -> [from, to)."""
    if not text:
        return None
    a, sep, b = text.partition("..")
    if not sep or not a or not b:
        fail(f"{what} {text!r}: use FROM..TO, e.g. 2026-12-01T14:00..2026-12-01T14:30")
    lo, hi = _time_ms(a, what), _time_ms(b, what)
    if hi <= lo:
        fail(f"{what} {text!r}: the end is not after the start")
    return lo, hi


def _archive_settings(ctx, archive: str | None):
    s = settings_of(ctx)
    if archive:
        s = settings_of(ctx, archive={**s.archive.model_dump(), "url": archive})
    return s


def _link(link: str | None) -> tuple[str, int]:
    if not link:
        return "", -1
    sw, _, idx = link.rpartition("/")
    if not sw or not idx.isdigit():
        fail(f"--link {link!r}: use SWITCH/IFINDEX, e.g. tor1/4")
    return sw, int(idx)


def _groups(groups: str | None) -> tuple[str, str]:
    if not groups:
        return "", ""
    a, sep, b = groups.partition(">")
    if not sep or not a or not b:
        fail(f"--groups {groups!r}: use SRC_GROUP>DST_GROUP, e.g. gpu>storage")
    return a, b


def register(app: typer.Typer) -> None:
    @app.command("mark")
    @with_subject_options({"job": "The job the change concerns.", "node": "The node it concerns.",
                           "link": "The link it concerns: SWITCH/IFINDEX.",
                           "groups": "The group pair it concerns: SRC>DST."})
    def mark_cmd(
        ctx: typer.Context,
        text: str = typer.Argument(..., help="What was changed, e.g. \"raised NCCL_IB_TIMEOUT to 22\" (<= 500 characters)."),
        at: Optional[str] = typer.Option(None, "--at", help="When it took effect: ISO-8601 (naive = UTC), unix ms, "
                                         "or -DURATION (that long ago, e.g. -10m). Default now."),
        author: Optional[str] = typer.Option(None, "--author", help="Who made it (default USER@HOST)."),
        archive: Optional[str] = typer.Option(None, "--archive", help="Write the marker straight into this archive "
                                              "(file://DIR, s3://...) instead of publishing it to changes.v1: for an "
                                              "archive filled by `fabricflow backfill`, without a broker."),
        subject: Subject = Subject(),
    ):
        """Record a change (a tuning step, a configuration push): published to changes.v1, archived, shown on the
        console's timelines and as a Grafana annotation; `fabricflow compare` compares before and after it."""
        from ingest.marks import publish_marks
        from schemas.marks import MarkError, change_record

        sw, idx = _link(subject.link)
        src, dst = _groups(subject.groups)
        job, node = subject.job, subject.node
        who = author if author is not None else f"{getpass.getuser()}@{socket.gethostname().split('.')[0]}"
        now = int(time.time() * 1000)
        try:
            rec = change_record(text, _time_ms(at, "--at"), now, "cli", job=job or "", node=node or "", switch=sw,
                                if_index=idx, src_group=src, dst_group=dst, author=who)
        except MarkError as e:
            fail(str(e))
        s = settings_of(ctx)
        if archive:
            from sinks.archive.marks import write_change

            s = _archive_settings(ctx, archive)
            try:
                key = write_change(s.archive, rec)
            except OSError as e:
                fail(f"writing the marker failed: {e}", 1)
            typer.echo(f"change {rec['mark_id']} at {_iso(rec['time_ms'])} written to {key}")
            return
        try:
            publish_marks(s.kafka, [("change", rec)])
        except RuntimeError as e:
            fail(f"{e}; is the broker at {s.kafka.bootstrap_servers} up? (--archive writes to an archive instead)", 1)
        typer.echo(f"change {rec['mark_id']} at {_iso(rec['time_ms'])} published to {s.kafka.topics.changes}")

    @app.command("compare")
    @with_subject_options({"job": "Compare a job: the job and each of its nodes.", "node": "Compare one node.",
                           "link": "Compare one link: SWITCH/IFINDEX.", "groups": "Compare a group pair: SRC>DST."})
    def compare_cmd(
        ctx: typer.Context,
        before: Optional[str] = typer.Option(None, "--before", help="FROM..TO of the period before (ISO-8601, unix ms "
                                             "or -DURATION). Default: the same length before the latest change marker."),
        after: Optional[str] = typer.Option(None, "--after", help="FROM..TO of the period after. Default: after the "
                                            "marker (less --settle), as long as the before period."),
        at: Optional[str] = typer.Option(None, "--at", help="Use the latest marker at or before this time."),
        window: Optional[str] = typer.Option(None, "--window", help="Comparison window, e.g. 30s or 1m (default: about "
                                             "12 per period, a multiple of processors.window_s)."),
        settle: Optional[str] = typer.Option(None, "--settle", help="Time after the change left out (default 3 "
                                             "processor windows)."),
        fmt: str = typer.Option("text", "--format", "-f", help="text or json (every metric: before, after, change, "
                                "interval, verdict)."),
        all_nodes: bool = typer.Option(False, "--all-nodes", help="Text: list every node metric, not only the "
                                       "significant ones."),
        archive: Optional[str] = typer.Option(None, "--archive", help="Archive URL instead of archive.url."),
        subject: Subject = Subject(),
    ):
        """Before vs after a change, per metric, with a confidence interval and a verdict (improved, worse,
        no significant change). See docs/closed-loop.md for the metrics and the significance rule."""
        from replay.archive_source import open_archive
        from replay.core import ReplayError
        from query.compare.render import render_text
        from query.compare.report import CompareError, CompareRequest, build_report
        from query.errors import ArchiveError
        from query.reports import ArchiveQuery

        chosen = [(k, v) for k, v in (("job", subject.job), ("node", subject.node), ("link", subject.link),
                                      ("pair", subject.groups)) if v]
        if len(chosen) != 1:
            fail("give exactly one of --job, --node, --link, --groups")
        if fmt not in ("text", "json"):
            fail(f"--format {fmt!r}: use text or json")
        if bool(before) != bool(after):
            fail("--before and --after go together (or neither: around the latest change marker)")
        s = _archive_settings(ctx, archive)
        base = int(s.processors.window_s * 1000)
        try:
            w = parse_duration_ms(window) if window else None
            st = parse_duration_ms(settle) if settle else None
        except ValueError as e:
            fail(str(e))
        if w is not None and (w < base or w % base):
            fail(f"--window {window}: must be a multiple of processors.window_s ({base // 1000} s)")
        req = CompareRequest(chosen[0][0], chosen[0][1], _range(before, "--before"), _range(after, "--after"),
                             w, st, base, _time_ms(at, "--at") if at else None)
        try:
            fs, root = open_archive(s.archive)
            rep = build_report(ArchiveQuery(fs, root), req)
        except (CompareError, ArchiveError, ReplayError) as e:
            fail(str(e))
        if fmt == "json":
            json.dump(rep, sys.stdout, indent=1, default=str)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render_text(rep, all_nodes))


def _iso(ms: int) -> str:
    from replay.core import iso_utc

    return iso_utc(ms)
