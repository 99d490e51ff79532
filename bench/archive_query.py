"""Query latency of the named archive reports on a generated one-day archive (default), or on a generated
week of rollups (``--week``: see :func:`week_main`).

How it works: bench/README.md, "bench/archive_query.py"; results: docs/performance.md#archive-queries.

    .venv/bin/python -m bench.archive_query [--rows 100000000] [--dir PATH] [--keep]
                                            [--partitions 4] [--raw] [--runs 3] [--hour 10] [--json FILE]
    .venv/bin/python -m bench.archive_query --week [--rate 200000] [--raw-rows 8000000] [--partitions 4]
                                            [--runs 3] [--dir PATH] [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow.parquet as pq

from bench.archive_query_data import (
    DAY, DAY_START_MS, JOB_NAME, NODE_NAME, QUARTERS, WEEK_HOURS, generate, generate_week, plan_rows,
)
from query.reports import ArchiveQuery
from sinks.archive import layout


REPORTS = [
    ("top_talkers", lambda q, f, t: q.top_talkers(f, t, n=10)),
    ("matrix node", lambda q, f, t: q.matrix(f, t, level="node")),
    ("matrix group", lambda q, f, t: q.matrix(f, t, level="group")),
    ("node", lambda q, f, t: q.node(NODE_NAME, f, t)),
    ("job", lambda q, f, t: q.job(JOB_NAME, f, t)),
    ("segmentation", lambda q, f, t: q.segmentation(f, t)),
    ("sql count(*)", lambda q, f, t: q.sql("SELECT count(*) AS n FROM flows_enriched", f, t)),
]


def file_rows(path: str) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def check_pruning(root: str, hour: int) -> dict:
    """One-hour range: which directories were listed and which files the view reads."""
    frm = DAY_START_MS + hour * layout.HOUR_MS
    q = ArchiveQuery(None, root)
    q.register("flows_enriched", frm, frm + layout.HOUR_MS)
    used = q.files_used["flows_enriched"]
    hour_dir = os.path.join(root, "flows_enriched", layout.hour_dir(DAY * 24 + hour))
    on_disk = sorted(os.path.join(hour_dir, f) for f in os.listdir(hour_dir) if not f.startswith("."))
    all_files = ArchiveQuery(None, root).files("flows_enriched")
    hours = {layout.parse_key(f).hour - DAY * 24 for f in used}
    res = {"files_read": len(used), "files_in_hour_dir": len(on_disk), "files_in_day": len(all_files),
           "hours_read": sorted(hours), "listed": [os.path.relpath(x, root) for x in q.listed],
           "ok": sorted(used) == on_disk and hours == {hour}}
    return res


def time_reports(root: str, hour: int, runs: int) -> list[dict]:
    rows_of = {f: file_rows(f) for f in ArchiveQuery(None, root).files("flows_enriched")}
    ranges = {"1 hour": (DAY_START_MS + hour * layout.HOUR_MS, DAY_START_MS + (hour + 1) * layout.HOUR_MS),
              "1 day": (DAY_START_MS, DAY_START_MS + layout.DAY_MS)}
    out = []
    for rname, (frm, to) in ranges.items():
        in_range = None
        for name, fn in REPORTS:
            secs = []
            for _ in range(runs):
                t0 = time.perf_counter()
                q = ArchiveQuery(None, root)
                res = fn(q, frm, to)
                secs.append(time.perf_counter() - t0)
            # a report may be answered from the rollups (query/plan.py picks the coarsest dataset)
            used = [f for files in q.files_used.values() for f in files]
            datasets = sorted(d for d, files in q.files_used.items() if files)
            if name == "sql count(*)":
                in_range = res.column("n")[0].as_py()
            r = {"range": rname, "report": name, "median_s": statistics.median(secs), "min_s": min(secs),
                 "runs": runs, "result_rows": res.num_rows, "files_read": len(used),
                 "datasets": datasets, "rows_in_files": sum(rows_of[f] if f in rows_of else file_rows(f) for f in used)}
            out.append(r)
            print(f"  {rname:6} {name:13} median {r['median_s']:7.2f} s  min {r['min_s']:7.2f} s  "
                  f"files {r['files_read']:4}  rows in files {r['rows_in_files']:>13,}  "
                  f"result rows {r['result_rows']:,}  from {'+'.join(datasets)}", flush=True)
        for r in out:
            if r["range"] == rname:
                r["rows_in_range"] = in_range
    return out


def _md_table(columns: str, align: str, rows) -> str:
    """A Markdown table: ``columns`` and ``align`` as "a | b" and "--- | ---:", ``rows`` its "| ... |" lines."""
    return "\n".join([f"| {columns} |", f"| {align} |", *rows])


def markdown(results: list[dict]) -> str:
    return _md_table("range | report | median s | min s | files read | rows in files read | rows in range | result rows",
                     "--- | --- | ---: | ---: | ---: | ---: | ---: | ---:",
                     (f"| {r['range']} | `{r['report']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['files_read']} | "
                      f"{r['rows_in_files']:,} | {r['rows_in_range']:,} | {r['result_rows']:,} |" for r in results))


# --------------------------------------------------------------------------- a week of rollups


def time_week(root: str, runs: int) -> list[dict]:
    w0 = DAY_START_MS
    raw_lo = w0 + WEEK_HOURS * layout.HOUR_MS
    ranges = {
        "week, whole hours": (w0, raw_lo, "auto"),
        "week, to the second": (w0 + 90_000, raw_lo + 90_000, "auto"),
        "raw hour from rollups": (raw_lo, raw_lo + layout.HOUR_MS, "auto"),
        "raw hour, raw detail": (raw_lo, raw_lo + layout.HOUR_MS, "raw"),
    }
    reports = [
        ("top_talkers", lambda q, f, t, s: q.top_talkers(f, t, n=10, source=s)),
        ("matrix node", lambda q, f, t, s: q.matrix(f, t, level="node", source=s)),
        ("matrix group", lambda q, f, t, s: q.matrix(f, t, level="group", source=s)),
        ("node", lambda q, f, t, s: q.node(NODE_NAME, f, t, source=s)),
        ("job", lambda q, f, t, s: q.job(JOB_NAME, f, t, source=s)),
    ]
    out = []
    for rname, (frm, to, src) in ranges.items():
        extra = [("segmentation", lambda q, f, t, s: q.segmentation(f, t)),
                 ("sql count(*)", lambda q, f, t, s: q.sql("SELECT count(*) AS n FROM flows_enriched", f, t))] \
            if src == "raw" else []
        for name, fn in reports + extra:
            secs, cpus = [], []
            for _ in range(runs):
                t0, c0 = time.perf_counter(), time.process_time()
                q = ArchiveQuery(None, root)
                res = fn(q, frm, to, src)
                secs.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            used = q.answered if name not in ("segmentation", "sql count(*)") else [
                ("flows_enriched", frm, to, len(q.files_used["flows_enriched"]))]
            rows = sum(pq.ParquetFile(f).metadata.num_rows for d, lo, hi, _ in used
                       for f in ArchiveQuery(None, root).files(d, lo, hi)) if used else 0
            r = {"range": rname, "report": name, "median_s": statistics.median(secs), "min_s": min(secs),
                 "cpu_s": statistics.median(cpus), "runs": runs, "result_rows": res.num_rows,
                 "datasets": " + ".join(f"{d} ({n})" for d, _, _, n in used), "rows_read": rows}
            out.append(r)
            print(f"  {rname:22} {name:13} median {r['median_s']:6.2f} s  min {r['min_s']:6.2f} s  "
                  f"CPU {r['cpu_s']:5.2f} s  "
                  f"rows {rows:>12,}  {r['datasets']}", flush=True)
    return out


def week_markdown(results: list[dict]) -> str:
    return _md_table("range | report | median s | min s | CPU s | datasets (files) | rows in files read | result rows",
                     "--- | --- | ---: | ---: | ---: | --- | ---: | ---:",
                     (f"| {r['range']} | `{r['report']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['cpu_s']:.2f} | "
                      f"{r['datasets']} | {r['rows_read']:,} | {r['result_rows']:,} |" for r in results))


def week_main(args) -> None:
    """``--week``: a week of rollups equivalent to ``--rate`` records/s of raw flow (written directly as the
    sink and its compaction leave them), and the hour after it as raw flows through the sink's path; then the
    reports over the week from rollups and over the raw hour (raw detail and from rollups)."""
    parent = args.dir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    root = tempfile.mkdtemp(prefix="ffarchive-week-", dir=parent)
    print(f"archive {root}: a week of rollups at {args.rate:,} records/s, {args.partitions} partitions, "
          f"then {args.raw_rows:,} raw rows in the hour after", flush=True)
    try:
        gen = generate_week(root, args.rate, args.partitions, args.raw_rows)
        print(f"generated {gen['keys']:,} keys per hour, {gen['rows_1h']:,} traffic_1h rows for the week in "
              f"{gen['seconds_rollups']:.0f} s; raw hour: {gen['raw_rows']:,} rows, {gen['raw_files']} files in "
              f"{gen['seconds_raw']:.0f} s (rollups {gen['rollup_seconds']:.1f} s of it); its per-file rollups "
              f"{gen['raw_hour_per_file_rollup_rows']} rows, compacted in {gen['compact_seconds']:.1f} s to "
              f"{[m['rows_out'] for m in gen['raw_hour_merged']]}; {gen['bytes'] / 1e9:.2f} GB", flush=True)
        results = time_week(root, args.runs)
        print()
        print(week_markdown(results))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"generation": gen, "queries": results, "root": root}, fh, indent=1)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--dir", default=None, help="parent directory of the temporary archive (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the generated archive")
    ap.add_argument("--partitions", type=int, default=4, help="Kafka partitions of flows.enriched")
    ap.add_argument("--raw", action="store_true", help="also write flows_raw (same rows, raw columns)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hour", type=int, default=10, help="hour of the one-hour range")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    ap.add_argument("--week", action="store_true", help="a week of rollups (and one raw hour) instead of a raw day")
    ap.add_argument("--rate", type=int, default=200_000, help="--week: raw flow records/s the rollups stand for")
    ap.add_argument("--raw-rows", type=int, default=8_000_000, help="--week: raw rows in the hour after the week")
    args = ap.parse_args()
    if args.week:
        week_main(args)
        return

    parent = args.dir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    datasets = ["flows_enriched"] + (["flows_raw"] if args.raw else [])
    rows, msg = plan_rows(args.rows, parent, datasets)
    if msg:
        print(msg, flush=True)
    if rows < 24 * QUARTERS * args.partitions:
        sys.exit("not enough room for even one row per file")
    root = tempfile.mkdtemp(prefix="ffarchive-query-", dir=parent)
    print(f"archive {root}: {rows:,} rows of {', '.join(datasets)} for {layout.day_dir(DAY)[3:]}, "
          f"{args.partitions} partitions x 24 hours x {QUARTERS} files", flush=True)
    try:
        gen = generate(root, rows, args.partitions, args.raw)
        print(f"generated {gen['rows']:,} rows/dataset, {gen['files']} files, {gen['bytes'] / 1e9:.2f} GB "
              f"({gen['bytes'] / (gen['rows'] * len(datasets)):.1f} bytes/row) in {gen['seconds']:.0f} s "
              f"(columns {gen['seconds_columns']:.0f} s, arrow {gen['seconds_arrow']:.0f} s, "
              f"buffer+parquet {gen['seconds_write']:.0f} s)", flush=True)
        prune = check_pruning(root, args.hour)
        print(f"pruning, {args.hour:02d}:00-{args.hour + 1:02d}:00: read {prune['files_read']} of "
              f"{prune['files_in_day']} files (hours {prune['hours_read']}, {prune['files_in_hour_dir']} in that "
              f"hour's directory), listed {prune['listed']} -> {'OK' if prune['ok'] else 'NOT PRUNED'}", flush=True)
        t0 = time.perf_counter()
        results = time_reports(root, args.hour, args.runs)
        print(f"queries took {time.perf_counter() - t0:.0f} s\n")
        print(markdown(results))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"generation": gen, "pruning": prune, "queries": results, "root": root}, fh, indent=1)
        if not prune["ok"]:
            sys.exit("partition pruning failed")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
