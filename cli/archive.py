"""``fabricflow sink ...`` (archive service, retention) and ``fabricflow query ...`` (archive reports).

Query time range: ``--from``/``--to`` (ISO-8601, naive = UTC, or unix ms),
or ``--last 2h``; without any of them a query covers the whole archive.
Errors (no archive, dataset missing, nothing in range, bad time) are one line
on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .context import fail, settings_of
from .options import Exporter, MatrixSource, QueryOptions, Source, parse_duration_ms, with_query_options

sink_app = typer.Typer(help="Sinks: the hourly Parquet archive and its retention.", no_args_is_help=True)
query_app = typer.Typer(
    help="Query the Parquet archive (DuckDB). Range: --from/--to or --last; default the whole archive.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``sink`` and ``query`` command groups to ``app``."""
    app.add_typer(sink_app, name="sink")
    app.add_typer(query_app, name="query")


# ---------------------------------------------------------------------- sink


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
    """Consume the archived topics and write hourly Parquet files (exactly once); produce hourly summaries;
    apply the archive retention every archive.retention_interval_s."""
    from fabricflow.kafka_security import check_files
    from fabricflow.logs import setup_logging
    from fabricflow.readiness import Unreachable
    from sinks.archive.fs import ArchiveUnavailable, ArchiveUrlError
    from sinks.archive.service import ArchiveService

    s = settings_of(ctx)
    setup_logging(s.log_level)
    try:  # settings and files first: exit 2 before any connection
        check_files(s.kafka)
        svc = ArchiveService(s, group_id=group, metrics_port=metrics_port, batch_messages=batch_messages,
                             max_rows=max_rows)
    except (ArchiveUrlError, ValueError) as e:
        fail(str(e))
    try:
        report = svc.run(max_seconds=max_seconds, idle_exit_s=idle_exit)
    except (Unreachable, ArchiveUnavailable) as e:  # Kafka or the object store did not answer: exit 1, one line
        fail(str(e), 1)
    typer.echo(" ".join(f"{k}={v}" for k, v in report.items()), err=True)


@sink_app.command("retention")
def sink_retention(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be deleted."),
):
    """Delete archive partitions older than archive.retention_days (per dataset, 'default' for the rest)."""
    import time

    from sinks.archive.fs import ArchiveUrlError, archive_filesystem
    from sinks.archive.retention import apply_retention, retention_policy

    s = settings_of(ctx)
    try:
        policy = retention_policy(s.archive.retention_days)
        fs, root = archive_filesystem(s.archive, write=not dry_run)
    except (ArchiveUrlError, ValueError) as e:
        fail(str(e))
    deleted = apply_retention(fs, root, int(time.time() * 1000), policy, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    for d in deleted:
        typer.echo(f"{verb} {d.dataset} dt={d.dt}" + ("" if d.hour is None else f" hour={d.hour:02d}"))
    typer.echo(f"{len(deleted)} partition(s) {verb}" + (" (dry run)" if dry_run else ""), err=True)


@sink_app.command("compact")
def sink_compact(
    ctx: typer.Context,
    group: str = typer.Option("fabricflow-archive", "--group", help="The archive sink's Kafka consumer group."),
):
    """Merge each closed hour's rollup files of one Kafka partition into one (docs/archive.md, "Rollups").

    Only files below the archive sink's committed offsets are merged (read from Kafka), so it is safe while
    the sink runs; run it periodically, one at a time, like retention.
    """
    import time

    from fabricflow import streams
    from fabricflow.logs import setup_logging
    from sinks.archive.compaction import compact
    from sinks.archive.fs import ArchiveUrlError, archive_filesystem
    from sinks.archive.layout import HOUR_MS

    s = settings_of(ctx)
    setup_logging(s.log_level)
    try:
        fs, root = archive_filesystem(s.archive, write=True)
    except (ArchiveUrlError, ValueError) as e:
        fail(str(e))
    sources = sorted({d.derived_from for d in streams.DERIVED})
    try:
        committed = _committed_offsets(s.kafka, group, {d: streams.topic_of(s.kafka, streams.DATASETS[d]) for d in sources})
    except Exception as e:  # broker unreachable, unknown topic: one line
        fail(f"cannot read the committed offsets of group {group}: {e}")
    before = (int(time.time() * 1000) - int(s.archive.grace_s * 1000)) // HOUR_MS
    done = compact(fs, root, committed, before_hour=before)
    for m in done:
        typer.echo(f"merged {m.inputs} files ({m.rows_in} rows) -> {m.path} ({m.rows_out} rows)")
    typer.echo(f"{len(done)} merged file(s) written", err=True)


def _committed_offsets(kafka, group: str, topics: dict[str, str]) -> dict[tuple[str, int], int]:
    """(dataset, partition) -> committed offset of ``group`` (partitions without a commit are left out)."""
    from confluent_kafka import Consumer, TopicPartition

    from fabricflow.kafka import client_config

    conf = client_config(kafka)
    conf.update({"group.id": group, "enable.auto.commit": False})
    c = Consumer(conf)
    try:
        out = {}
        for dataset, topic in topics.items():
            md = c.list_topics(topic, timeout=10).topics.get(topic)
            if md is None or md.error is not None:
                continue
            tps = [TopicPartition(topic, p) for p in md.partitions]
            for tp in c.committed(tps, timeout=10):
                if tp.offset >= 0:
                    out[(dataset, tp.partition)] = tp.offset
        return out
    finally:
        c.close()


# ---------------------------------------------------------------------- query


def _open(ctx):
    from sinks.archive.fs import ArchiveUrlError, archive_filesystem
    from query.errors import ArchiveError
    from query.reports import ArchiveQuery

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


def _range(opts: QueryOptions) -> tuple[int | None, int | None]:
    from query.timerange import parse_time

    if opts.last is not None:
        if opts.frm is not None or opts.to is not None:
            fail("give either --last or --from/--to, not both")
        import time

        try:
            span = parse_duration_ms(opts.last)
        except ValueError as e:
            fail(str(e))
        now = int(time.time() * 1000)
        return now - span, now
    try:
        lo = parse_time(opts.frm) if opts.frm is not None else None
        hi = parse_time(opts.to) if opts.to is not None else None
    except (ValueError, TypeError) as e:
        fail(str(e))
    if lo is not None and hi is not None and hi <= lo:
        fail(f"empty time range: --from {opts.frm} is not before --to {opts.to}")
    return lo, hi


def _run(ctx, fn, opts: QueryOptions, title: str) -> None:
    """Open the archive, run ``fn(query, lo, hi)`` over the options' range and write the table as asked."""
    import duckdb

    from query.errors import ArchiveError

    from query.render import FORMATS, render

    fmt, output = opts.fmt, opts.output
    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        fail("--format parquet needs --output PATH")
    lo, hi = _range(opts)
    q = _open(ctx)
    try:
        table = fn(q, lo, hi)
    except (ArchiveError, ValueError, TypeError) as e:
        fail(" ".join(str(e).split()))
    except duckdb.Error as e:  # parser/binder errors in `query sql`
        fail("query failed: " + " ".join(str(e).split()))
    if q.answered:  # which datasets answered (rollups and/or the raw flows): stderr, not the result
        typer.echo("answered from " + " + ".join(f"{d} ({n} file{'s' if n != 1 else ''})" for d, _, _, n in q.answered),
                   err=True)
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


def _source(source: str) -> str:
    from query.plan import SOURCE_CHOICES

    if source not in SOURCE_CHOICES:
        fail(f"--source must be one of {', '.join(SOURCE_CHOICES)}, got {source!r}")
    return source


@query_app.command("sql")
@with_query_options
def query_sql(
    ctx: typer.Context,
    sql: str = typer.Argument(..., help="SQL over the views, e.g. \"SELECT category, sum(bytes_est) AS bytes_est "
                              "FROM flows GROUP BY 1 ORDER BY 2 DESC\"."),
    opts: QueryOptions = QueryOptions(),
):
    """Run SQL over views of the range. flows: the enriched flow records that count, each packet once (sum
    these); flow_observations: every exporter's record of a packet (one row per exporter that saw it);
    flows_1m, flows_1h: per-minute / per-hour sums, each packet once. Every dataset is a view of its own
    name too (flows_raw, flows_enriched, counters_raw, matrix_windows, incast_events, straggler_scores,
    link_health, alerts, patterns, summaries_hourly, ingest_quality, traffic_1m, traffic_1h, ports_1m,
    ports_1h); flows_raw, flows_enriched and traffic_* hold every exporter's record (docs/archive.md,
    "Which name to query")."""
    from query.views import observation_note

    note = observation_note(sql)
    if note:
        typer.echo(f"fabricflow: {note}", err=True)
    _run(ctx, lambda q, lo, hi: q.sql(sql, lo, hi), opts, "query")


@query_app.command("top-talkers")
@with_query_options
def query_top(
    ctx: typer.Context,
    n: int = typer.Option(10, "--limit", "-n", min=1, help="Number of pairs."),
    exporter: Exporter = None,
    source: Source = "auto",
    opts: QueryOptions = QueryOptions(),
):
    """Largest source -> destination pairs by estimated bytes (node name, else IP) from flows_enriched,
    each packet counted once (docs/detectors.md, "Counting each packet once")."""
    source = _source(source)
    _run(ctx, lambda q, lo, hi: q.top_talkers(lo, hi, n=n, exporter=exporter, source=source), opts, "top talkers")


@query_app.command("matrix")
@with_query_options
def query_matrix(
    ctx: typer.Context,
    level: str = typer.Option("node", "--level", help="node, rack or group."),
    source: MatrixSource = "auto",
    exporter: Exporter = None,
    opts: QueryOptions = QueryOptions(),
):
    """Traffic matrix (src, dst, category) summed over the range."""
    if level not in ("node", "rack", "group"):
        fail(f"--level must be node, rack or group, got {level!r}")
    _run(ctx, lambda q, lo, hi: q.matrix(lo, hi, level=level, source=source, exporter=exporter), opts,
         f"matrix ({level})")


def _named_report(report: str, name_help: str, doc: str):
    """The ``fabricflow query REPORT NAME`` command of a report about one named thing (``ArchiveQuery.REPORT``)."""

    def command(
        ctx: typer.Context,
        name: str = typer.Argument(..., help=name_help),
        exporter: Exporter = None,
        source: Source = "auto",
        opts: QueryOptions = QueryOptions(),
    ):
        source = _source(source)
        _run(ctx, lambda q, lo, hi: getattr(q, report)(name, lo, hi, exporter=exporter, source=source), opts,
             f"{report} {name}")

    command.__doc__ = doc
    command.__name__ = command.__qualname__ = f"query_{report}"
    return query_app.command(report)(with_query_options(command))


query_node = _named_report("node", "Node name (inventory) or IP address.",
                           "One node's traffic: direction, peer, category, bytes/packets/flow records.")
query_job = _named_report("job", "Job name (inventory).",
                          "A job's nodes: bytes and flow records sent and received per node and category.")


@query_app.command("segmentation")
@with_query_options
def query_segmentation(
    ctx: typer.Context,
    policy: Optional[Path] = typer.Option(
        None, "--policy", help="Policy file (YAML, docs/alerts.md): mark each row allowed / violation."),
    exporter: Exporter = None,
    opts: QueryOptions = QueryOptions(),
):
    """Group x group bytes and flow records by category; with --policy, each row allowed or a violation."""
    from query.reports import segmentation_review

    cfg = None
    if policy is not None:
        if not policy.is_file():
            fail(f"policy file not found: {policy}")
        from processors.config_files import ConfigFileError, load_policy_file

        try:
            cfg = load_policy_file(policy)
        except ConfigFileError as e:  # YAML or model errors: one line with the file's line number
            fail(f"policy file {e}")
    if cfg is None:
        _run(ctx, lambda q, lo, hi: q.segmentation(lo, hi, exporter=exporter), opts, "segmentation")
    else:
        _run(ctx, lambda q, lo, hi: segmentation_review(q, cfg, lo, hi, exporter=exporter), opts, "segmentation review")


@query_app.command("drops")
@with_query_options
def query_drops(
    ctx: typer.Context,
    by: str = typer.Option("switch,port,node,job,reason", "--by", help="Group by, comma-separated: switch, port, "
                           "node (behind the port), src_node, dst_node, job, reason."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="Inventory file; default processors.inventory."),
    opts: QueryOptions = QueryOptions(),
):
    """Dropped packets (sFlow drop notifications, discards_raw) per port, node, job and drop reason."""
    from query.drops import drop_reasons
    from replay import ReplayError
    from replay.config import load_inventory

    s = settings_of(ctx)
    try:
        inv = load_inventory(s.processors, str(inventory) if inventory is not None else None)
    except ReplayError as e:
        fail(str(e))
    keys = tuple(k.strip() for k in by.split(",") if k.strip())

    def run(q, lo, hi):
        i = inv
        if s.processors.jobs.source != "file" and lo is not None and hi is not None:  # the jobs that held then
            from replay.memberships import archived_membership_rows, inventory_with_archived_jobs

            rows = archived_membership_rows(q.fs, q.root, lo, hi)
            i = inventory_with_archived_jobs(inv, rows, s.processors.jobs.kubernetes.pod_addresses)
        return drop_reasons(q, i, lo, hi, keys)

    _run(ctx, run, opts, "drops")
