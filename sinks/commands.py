"""``fabricflow sink ...`` (archive service, retention) and ``fabricflow query ...`` (archive reports).

Query time range: ``--from``/``--to`` (ISO-8601, naive = UTC, or unix ms),
or ``--last 2h``; without any of them a query covers the whole archive.
Errors (no archive, dataset missing, nothing in range, bad time) are one line
on stderr and exit code 2.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import typer

from sinks.retention import retention_policy  # re-exported: the retention command and its tests use it

FROM_HELP = "Start of the range (ISO-8601, naive = UTC, or unix ms). Default: the whole archive."
TO_HELP = "End of the range, exclusive (ISO-8601 or unix ms). Default: the end of the archive."
LAST_HELP = "Instead of --from/--to: the last DURATION up to now, e.g. 90m, 6h, 2d."
FORMAT_HELP = "Output format: table, csv, json or parquet (parquet needs --output)."
OUTPUT_HELP = "Write the result to this file instead of stdout (required for parquet)."

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """Milliseconds of ``90m``, ``6h``, ``2d``, ``30s``."""
    m = _DUR.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a duration (e.g. 90m, 6h, 2d)")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)])


def register(app: typer.Typer) -> None:
    """Add the ``sink`` and ``query`` command groups to ``app``."""
    sink_app = typer.Typer(help="Sinks: the hourly Parquet archive and its retention.", no_args_is_help=True)
    query_app = typer.Typer(
        help="Query the Parquet archive (DuckDB). Range: --from/--to or --last; default the whole archive.",
        no_args_is_help=True,
    )
    app.add_typer(sink_app, name="sink")
    app.add_typer(query_app, name="query")

    # ------------------------------------------------------------------ sink

    @sink_app.command("archive")
    def sink_archive(
        ctx: typer.Context,
        max_seconds: Optional[float] = typer.Option(None, "--max-seconds", help="Stop after this long (default: run until SIGTERM)."),
        idle_exit: Optional[float] = typer.Option(
            None, "--idle-exit", help="Stop once no message arrived for this many seconds (backfills, tests)."),
        metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Prometheus /metrics port (0 = off; default 9182)."),
        group: str = typer.Option("fabricflow-archive", "--group", help="Kafka consumer group."),
        batch_messages: int = typer.Option(1000, "--batch-messages", min=1, help="Max messages per poll."),
        max_rows: int = typer.Option(1_000_000, "--max-rows", min=1, help="Max rows per Parquet file."),
    ):
        """Consume the archived topics and write hourly Parquet files (exactly once); produce hourly summaries."""
        from fabricflow.cli import fail, settings_of
        from fabricflow.logs import setup_logging
        from sinks.fs import ArchiveUrlError
        from sinks.service import ArchiveService

        from fabricflow.kafka_security import check_files
        from fabricflow.readiness import Unreachable

        s = settings_of(ctx)
        setup_logging(s.log_level)
        try:  # settings and files first: exit 2 before any connection
            check_files(s.kafka)
            svc = ArchiveService(s, group_id=group, metrics_port=metrics_port, batch_messages=batch_messages,
                                 max_rows=max_rows)
        except (ArchiveUrlError, ValueError) as e:
            fail(str(e))
        from sinks.service import ArchiveUnavailable

        try:
            report = svc.run(max_seconds=max_seconds, idle_exit_s=idle_exit)
        except (Unreachable, ArchiveUnavailable) as e:
            fail(str(e), 1)
        typer.echo(" ".join(f"{k}={v}" for k, v in report.items()), err=True)

    @sink_app.command("retention")
    def sink_retention(
        ctx: typer.Context,
        dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted."),
    ):
        """Delete archive partitions older than archive.retention_days (per dataset, 'default' for the rest)."""
        import time

        from fabricflow.cli import fail, settings_of
        from sinks.fs import ArchiveUrlError, archive_filesystem
        from sinks.retention import apply_retention

        s = settings_of(ctx)
        try:
            policy = retention_policy(s.archive.retention_days)
            fs, root = archive_filesystem(s.archive)
        except (ArchiveUrlError, ValueError) as e:
            fail(str(e))
        deleted = apply_retention(fs, root, int(time.time() * 1000), policy, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        for d in deleted:
            typer.echo(f"{verb} {d.dataset} dt={d.dt}" + ("" if d.hour is None else f" hour={d.hour:02d}"))
        typer.echo(f"{len(deleted)} partition(s) {verb}" + (" (dry run)" if dry_run else ""), err=True)

    # ------------------------------------------------------------------ query

    def _open(ctx):
        from fabricflow.cli import fail, settings_of
        from sinks.fs import ArchiveUrlError, archive_filesystem
        from sinks.query import ArchiveError, ArchiveQuery

        s = settings_of(ctx)
        if s.archive.url.startswith("file://"):
            import os

            path = os.path.abspath(s.archive.url[len("file://"):])
            if not os.path.isdir(path):
                fail(f"no archive at {path} (archive.url = {s.archive.url})")
        try:
            fs, root = archive_filesystem(s.archive)
            return ArchiveQuery(fs, root)
        except (ArchiveUrlError, ArchiveError) as e:
            fail(str(e))

    def _range(frm, to, last):
        from fabricflow.cli import fail
        from sinks.query import parse_time

        if last is not None:
            if frm is not None or to is not None:
                fail("give either --last or --from/--to, not both")
            import time

            try:
                span = parse_duration_ms(last)
            except ValueError as e:
                fail(str(e))
            now = int(time.time() * 1000)
            return now - span, now
        try:
            lo = parse_time(frm) if frm is not None else None
            hi = parse_time(to) if to is not None else None
        except (ValueError, TypeError) as e:
            fail(str(e))
        if lo is not None and hi is not None and hi <= lo:
            fail(f"empty time range: --from {frm} is not before --to {to}")
        return lo, hi

    def _run(ctx, fn, fmt: str, output: Optional[Path], title: str):
        import duckdb

        from fabricflow.cli import fail
        from sinks.query import FORMATS, ArchiveError, render

        if fmt not in FORMATS:
            fail(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
        if fmt == "parquet" and output is None:
            fail("--format parquet needs --output PATH")
        q = _open(ctx)
        try:
            table = fn(q)
        except (ArchiveError, ValueError, TypeError) as e:
            fail(" ".join(str(e).split()))
        except duckdb.Error as e:  # parser/binder errors in `query sql`
            fail("query failed: " + " ".join(str(e).split()))
        if fmt == "parquet":
            render(table, "parquet", path=str(output))
            typer.echo(f"{table.num_rows} rows -> {output}", err=True)
            return
        text = render(table, fmt, title=title)
        if output is not None:
            output.write_text(text)
            typer.echo(f"{table.num_rows} rows -> {output}", err=True)
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")

    @query_app.command("sql")
    def query_sql(
        ctx: typer.Context,
        sql: str = typer.Argument(..., help="SQL over the dataset views, e.g. \"SELECT category, sum(bytes_est) FROM flows_enriched GROUP BY 1\"."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """Run SQL; every dataset named (flows_raw, flows_enriched, counters_raw, matrix_windows, incast_events,
        straggler_scores, link_health, alerts, summaries_hourly) is a view over the range."""
        lo, hi = _range(frm, to, last)
        _run(ctx, lambda q: q.sql(sql, lo, hi), fmt, output, "query")

    @query_app.command("top-talkers")
    def query_top(
        ctx: typer.Context,
        n: int = typer.Option(10, "--limit", "-n", min=1, help="Number of pairs."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """Largest source -> destination pairs by estimated bytes (node name, else IP) from flows_enriched."""
        lo, hi = _range(frm, to, last)
        _run(ctx, lambda q: q.top_talkers(lo, hi, n=n), fmt, output, "top talkers")

    @query_app.command("matrix")
    def query_matrix(
        ctx: typer.Context,
        level: str = typer.Option("node", "--level", help="node or group."),
        source: str = typer.Option("auto", "--source", help="matrix (matrix_windows), flows (flows_enriched) or auto."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """Traffic matrix (src, dst, category) summed over the range."""
        from fabricflow.cli import fail

        if level not in ("node", "group"):
            fail(f"--level must be node or group, got {level!r}")
        lo, hi = _range(frm, to, last)
        _run(ctx, lambda q: q.matrix(lo, hi, level=level, source=source), fmt, output, f"matrix ({level})")

    @query_app.command("node")
    def query_node(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Node name (inventory) or IP address."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """One node's traffic: direction, peer, category, bytes/packets/flow records."""
        lo, hi = _range(frm, to, last)
        _run(ctx, lambda q: q.node(name, lo, hi), fmt, output, f"node {name}")

    @query_app.command("job")
    def query_job(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Job name (inventory)."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """A job's nodes: bytes and flow records sent and received per node and category."""
        lo, hi = _range(frm, to, last)
        _run(ctx, lambda q: q.job(name, lo, hi), fmt, output, f"job {name}")

    @query_app.command("segmentation")
    def query_segmentation(
        ctx: typer.Context,
        policy: Optional[Path] = typer.Option(
            None, "--policy", help="Policy file (YAML, docs/alerts.md): mark each row allowed / violation."),
        frm: Optional[str] = typer.Option(None, "--from", help=FROM_HELP),
        to: Optional[str] = typer.Option(None, "--to", help=TO_HELP),
        last: Optional[str] = typer.Option(None, "--last", help=LAST_HELP),
        fmt: str = typer.Option("table", "--format", "-f", help=FORMAT_HELP),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help=OUTPUT_HELP),
    ):
        """Group x group bytes and flow records by category; with --policy, each row allowed or a violation."""
        from fabricflow.cli import fail

        cfg = None
        if policy is not None:
            if not policy.is_file():
                fail(f"policy file not found: {policy}")
            from processors.logic.policy import load_policy_config

            try:
                cfg = load_policy_config(policy)
            except Exception as e:  # pydantic / YAML errors: one line
                fail(f"policy file {policy}: {str(e).splitlines()[0]}")
        lo, hi = _range(frm, to, last)
        if cfg is None:
            _run(ctx, lambda q: q.segmentation(lo, hi), fmt, output, "segmentation")
        else:
            _run(ctx, lambda q: segmentation_review(q, cfg, lo, hi), fmt, output, "segmentation review")


def segmentation_review(q, cfg, frm=None, to=None):
    """Observed group x group traffic checked against ``cfg.segmentation``.

    One row per (src_group, dst_group, category, status, rule): ``status`` is
    ``allowed``, ``violation``, or ``ignored`` (a side is 'unknown' and the policy
    has ``skip_unknown``); ``rule`` names the allow rule that matched. Ports are
    taken into account (flows grouped by destination and source port) only when
    some allow rule restricts ports.
    """
    import pyarrow as pa

    from processors.logic.policy import segmentation_matrix

    seg = cfg.segmentation
    by_port = any(r.ports for r in seg.allow)
    ports = ", dst_port, src_port" if by_port else ""
    t = q.sql(f"""
        SELECT src_group, dst_group, category{ports}, sum(bytes_est)::BIGINT AS bytes,
               count(*)::BIGINT AS flows, sum(packets_est)::BIGINT AS packets
        FROM flows_enriched GROUP BY ALL""", frm, to)
    rows = t.to_pylist()
    packets: dict[tuple, int] = {}
    for r in rows:
        k = (r["src_group"], r["dst_group"], r["category"], r.get("dst_port"), r.get("src_port"))
        packets[k] = packets.get(k, 0) + r["packets"]
    checked = segmentation_matrix(rows, seg)
    agg: dict[tuple, list[int]] = {}
    for r in checked:
        k = (r["src_group"], r["dst_group"], r["category"], r.get("dst_port"), r.get("src_port"))
        if seg.skip_unknown and "unknown" in (r["src_group"], r["dst_group"]):
            status = "ignored"
        else:
            status = "allowed" if r["allowed"] else "violation"
        key = (r["src_group"], r["dst_group"], r["category"], status, r["rule"] or "")
        a = agg.setdefault(key, [0, 0, 0])
        a[0] += r["bytes"]
        a[1] += packets.get(k, 0)
        a[2] += r["flows"]
    keys = sorted(agg, key=lambda k: (k[3] != "violation", k[0], k[1], k[2], k[4]))
    cols = list(zip(*keys)) if keys else [[], [], [], [], []]
    vals = list(zip(*(agg[k] for k in keys))) if keys else [[], [], []]
    return pa.table({
        "src_group": pa.array(cols[0], pa.string()), "dst_group": pa.array(cols[1], pa.string()),
        "category": pa.array(cols[2], pa.string()), "status": pa.array(cols[3], pa.string()),
        "rule": pa.array(cols[4], pa.string()), "bytes_est": pa.array(vals[0], pa.int64()),
        "packets_est": pa.array(vals[1], pa.int64()), "flow_records": pa.array(vals[2], pa.int64()),
    })
