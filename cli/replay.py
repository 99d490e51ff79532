"""The ``fabricflow replay`` command: option parsing, progress and output around :mod:`replay`.

``register(app)`` adds the command; :func:`run_replay` does the work and is
callable without the CLI. Problems the user can fix (empty or missing range,
missing archive, bad ``--set``/inventory/policy/offsets) exit 2 with one line.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Optional, TextIO

import typer

SOURCES = ("archive", "kafka")


def _progress(enabled: bool):
    """A rich progress bar on stderr, or None when disabled / stderr is not a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def run_replay(
    settings,
    *,
    frm: str | None = None,
    to: str | None = None,
    source: str = "archive",
    offsets: str | None = None,
    report: str | None = None,
    publish: bool = False,
    sets: list[str] | None = None,
    inventory: str | None = None,
    policy: str | None = None,
    partitions: int | None = None,
    progress: bool = True,
    quiet: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> dict:
    """Run one replay; returns a summary dict. Raises :class:`replay.ReplayError` on user errors."""
    import replay as rp

    out = out or sys.stdout
    err = err or sys.stderr
    if source not in SOURCES:
        raise rp.ReplayError(f"--source {source!r}: use archive or kafka")
    if offsets and source != "kafka":
        raise rp.ReplayError("--offsets needs --source kafka")
    if report and not report.lower().endswith((".json", ".parquet")):
        raise rp.ReplayError(f"--report {report}: use a .json or .parquet file name")
    parts = partitions if partitions is not None else settings.kafka.partitions
    if parts < 1:
        raise rp.ReplayError(f"--partitions {parts}: must be >= 1")
    overrides = rp.parse_set(sets or [])
    rp.core_factory_from(settings.processors, overrides, inventory=inventory, policy=policy)  # problems first
    factory = None

    bar = _progress(progress and not quiet)
    counts = Counter()
    if bar is not None:
        bar.start()
    try:
        if source == "archive":
            fs, root = rp.open_archive(settings.archive)
            src = rp.archive_source(fs, root, frm, to)
            if bar is not None:
                task = bar.add_task("replay (rows read)", total=src.total_rows())
                src.on_file = lambda n: bar.advance(task, n)
            flow_b, counter_b, discard_b = src.flow_batches(), src.counter_batches(), src.discard_batches()
            span = {"from_ms": src.frm_ms, "to_ms": src.to_ms, "files": sum(len(v) for v in src.files.values())}
            if settings.processors.jobs.source != "file":  # the live membership that held then, as archived
                inv, span["job_membership_rows"] = _archived_jobs(settings, fs, root, src, inventory)
                factory = rp.core_factory_from(settings.processors, overrides, inventory=inv, policy=policy)
        else:
            off = rp.parse_offsets(offsets) if offsets else None
            total = sum((b - a) for a, b in off.values() if b is not None) if off else None
            task = bar.add_task("read Kafka (messages)", total=total) if bar is not None else None
            src = rp.kafka_source(settings.kafka, offsets=off, frm=frm, to=to,
                                  grace_ms=int(settings.processors.allowed_lateness_s * 1000),
                                  on_message=(lambda: bar.advance(task)) if bar is not None else None,
                                  on_retry=(lambda: bar.reset(task, total=total)) if bar is not None else None)
            flow_b, counter_b, discard_b = src.flow_batches(), src.counter_batches(), src.discard_batches()
            if bar is not None:
                bar.update(task, visible=False)
                ptask = bar.add_task("replay (batches)", total=len(flow_b) + len(counter_b))
            span = {"offsets": {f"{s}:{p}": list(v) for (s, p), v in sorted(src.read.items())}}
            if settings.processors.jobs.source != "file":  # the live membership that held then, from inventory.jobs.v1
                inv, span["job_membership_rows"] = _kafka_jobs(settings, src, frm, to, inventory)
                if inv is not None:
                    factory = rp.core_factory_from(settings.processors, overrides, inventory=inv, policy=policy)

        if factory is None:
            factory = rp.core_factory_from(settings.processors, overrides, inventory=inventory, policy=policy)

        def on_batch(kind: str, n: int) -> None:
            counts[kind] += n
            if bar is not None and source == "kafka":
                bar.advance(ptask)

        outputs = rp.replay_batches(flow_b, counter_b, factory, parts, on_batch=on_batch, discard_batches=discard_b)
    finally:
        if bar is not None:
            bar.stop()

    by_kind = Counter(o.kind for o in outputs)
    meta = {
        "source": source, "from": frm, "to": to, **span, "partitions": parts, "set": overrides,
        "inventory": inventory or settings.processors.inventory, "policy": policy or settings.processors.policy,
        "flow_records": counts["flows"], "counter_samples": counts["counters"],
        "discard_notifications": counts["discards"],
        "outputs": dict(sorted(by_kind.items())),
    }
    if source == "archive" and meta["flow_records"] + meta["counter_samples"] == 0:
        raise rp.ReplayError(f"no raw records between {rp.iso_utc(span['from_ms'])} and {rp.iso_utc(span['to_ms'])} "
                             f"(the files of those hours hold none in range)")
    if report:
        rp.write_report(outputs, report, meta)
    if publish:
        meta["published"] = rp.publish(outputs, settings.kafka, producer_settings=settings.ingest.producer)
    if not report and not publish:
        for r in rp.output_records(outputs):
            out.write(json.dumps(r, sort_keys=True) + "\n")
        out.flush()
    if not quiet:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())) or "none"
        where = []
        if report:
            where.append(report)
        if publish:
            where.append(", ".join(sorted(meta["published"])) or "replay topics")
        err.write(f"replay: {meta['flow_records']} flow records, {meta['counter_samples']} counter samples, "
                  f"{parts} shards -> {len(outputs)} outputs ({kinds})"
                  + (f" -> {'; '.join(where)}" if where else "") + "\n")
    return meta


def _archived_jobs(settings, fs, root: str, src, inventory: str | None):
    """(the inventory with the archived live job membership of the source's range, rows used)."""
    from replay.config import load_inventory
    from replay.memberships import archived_membership_rows, inventory_with_archived_jobs

    p = settings.processors
    rows = archived_membership_rows(fs, root, src.frm_ms, src.to_ms, int(p.allowed_lateness_s * 1000))
    base = load_inventory(p, inventory)
    return inventory_with_archived_jobs(base, rows, p.jobs.kubernetes.pod_addresses), len(rows)


def _kafka_jobs(settings, src, frm: str | None, to: str | None, inventory: str | None):
    """(the inventory with the live job membership of the replayed range read from inventory.jobs.v1, rows used);
    the range is --from/--to, else the event times of the flows read (None, 0 without flows)."""
    from query.timerange import parse_time
    from replay.config import load_inventory
    from replay.core import FLOW_TIME
    from replay.memberships import inventory_with_archived_jobs, kafka_membership_rows

    p = settings.processors
    if frm is not None and to is not None:
        lo, hi = parse_time(frm), parse_time(to)
    elif len(src.flows):
        lo, hi = int(src.flows[FLOW_TIME].min()), int(src.flows[FLOW_TIME].max()) + 1
    else:
        return None, 0
    rows = kafka_membership_rows(settings.kafka, lo, hi, int(p.allowed_lateness_s * 1000))
    base = load_inventory(p, inventory)
    return inventory_with_archived_jobs(base, rows, p.jobs.kubernetes.pod_addresses), len(rows)


def _opt(default, *names, help: str):
    return typer.Option(default, *names, help=help)


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_cmd(
        ctx: typer.Context,
        frm: Optional[str] = _opt(None, "--from", help="Start of the range (inclusive): ISO-8601 (no zone = UTC) "
                                  "or unix ms."),
        to: Optional[str] = _opt(None, "--to", help="End of the range (exclusive)."),
        source: str = _opt("archive", "--source", help="archive (flows_raw + counters_raw Parquet, "
                           "discards_raw when archived) or kafka (flows.raw / counters.raw / discards.raw)."),
        offsets: Optional[str] = _opt(
            None, "--offsets", help="Kafka ranges of flows.raw PARTITION:START-END,... (END exclusive, empty = to "
            "the end); prefix counters: for counters.raw (counters:0:10-20), discards: for discards.raw. Without it, --from/--to are located "
            "by binary search on record timestamps."),
        archive: Optional[str] = _opt(None, "--archive", help="Archive URL (file://DIR, s3://BUCKET/PREFIX); "
                                      "default archive.url."),
        report: Optional[str] = _opt(None, "--report", help="Write every output (kind, key, value) to a .json or "
                                     ".parquet file."),
        publish: bool = _opt(False, "--publish", help="Produce the outputs to the replay topics "
                             "(kafka.topics.replay_prefix + topic)."),
        sets: Optional[list[str]] = _opt(None, "--set", help="Detector override DETECTOR.PARAMETER=VALUE "
                                         "(YAML scalar), repeatable, e.g. incast.min_sources=3."),
        inventory: Optional[str] = _opt(None, "--inventory", help="Inventory file instead of processors.inventory."),
        policy: Optional[str] = _opt(None, "--policy", help="Policy file instead of processors.policy."),
        partitions: Optional[int] = _opt(None, "--partitions", help="Shards (as the live workers); default "
                                         "kafka.partitions."),
        quiet: bool = _opt(False, "--quiet", "-q", help="No progress bar and no summary line."),
    ):
        """Re-run a past time range through the processor logic: archive or Kafka -> stdout (JSON lines),
        --report or --publish.

        Same code as the live workers (one ProcessorCore per shard); open windows are closed at the end of
        the range. See docs/replay.md.
        """
        from cli.context import fail, settings_of
        from replay import ReplayError

        s = settings_of(ctx)
        if archive:
            s = settings_of(ctx, archive={**s.archive.model_dump(), "url": archive})
        try:
            run_replay(s, frm=frm, to=to, source=source, offsets=offsets, report=report, publish=publish,
                       sets=sets, inventory=inventory, policy=policy, partitions=partitions, quiet=quiet)
        except ReplayError as e:
            fail(str(e))
        except BrokenPipeError:  # stdout closed early (| head): not an error
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except Exception as e:  # broker / object store unreachable, ...: not a usage error
            from confluent_kafka import KafkaException

            if isinstance(e, (KafkaException, OSError)):
                fail(f"replay failed: {type(e).__name__}: {e}", 1)
            raise
