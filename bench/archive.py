"""Archive throughput: numpy flow batches -> Arrow -> HourlyBuffer -> Parquet on a local directory.

    .venv/bin/python -m bench.archive [--rows 2000000] [--batch 100000] [--dataset flows_raw|flows_enriched]

Prints rows per CPU-second per stage and overall (one process, one thread). In the service the
consumer thread does the buffering and a writer thread builds the file's table and encodes it, so
the two halves overlap. ``PYTHONPATH=/work/main ... --input arrow`` runs the old code the same way.
Target: >= 1,000,000 rows/s for flows_raw.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

from schemas.columns import FLOW_DTYPE, dtype_for, empty_flows, v4_column_to_addr16
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns

T0 = 1_767_225_600_000


def make_batch(rng, n: int, t0: int, enriched: bool) -> np.ndarray:
    """Realistic-ish flows: 2,000 hosts, 8 exporters, ports, RoCE, one hour of times."""
    f = empty_flows(n)
    f["export_protocol"] = rng.integers(1, 5, n)
    f["exporter_addr"] = v4_column_to_addr16(0xC0000200 + rng.integers(1, 9, n).astype(np.uint32))
    f["src_addr"] = v4_column_to_addr16(0x0A000000 + rng.integers(1, 2001, n).astype(np.uint32))
    f["dst_addr"] = v4_column_to_addr16(0x0A000000 + rng.integers(1, 2001, n).astype(np.uint32))
    f["sampling_rate"] = 1000
    f["bytes"] = rng.integers(64, 9000, n)
    f["packets"] = 1
    f["bytes_est"] = f["bytes"] * 1000
    f["packets_est"] = 1000
    f["ip_version"] = 4
    f["src_port"] = rng.integers(1024, 65535, n)
    f["dst_port"] = rng.choice([4791, 443, 2049, 53, 22], n)
    f["ip_protocol"] = 17
    f["time_end_ms"] = t0 + np.sort(rng.integers(0, 10_000, n))
    f["time_start_ms"] = f["time_end_ms"]
    f["time_received_ms"] = f["time_end_ms"] + 3
    f["time_export_ms"] = f["time_end_ms"]
    if not enriched:
        return f
    dt = dtype_for("flow_enriched")
    e = np.zeros(n, dtype=dt)
    for name in FLOW_DTYPE.names:
        e[name] = f[name]
    nodes = np.array([f"gpu-{i:04d}" for i in range(2001)], dtype=object)
    src = (f["src_addr"][:, 14].astype(int) << 8) | f["src_addr"][:, 15]
    dst = (f["dst_addr"][:, 14].astype(int) << 8) | f["dst_addr"][:, 15]
    e["src_node"], e["dst_node"] = nodes[src % 2001], nodes[dst % 2001]
    for col in ("src_group", "dst_group"):
        e[col] = "gpu"
    for col in ("src_rack", "dst_rack", "src_switch", "dst_switch"):
        e[col] = "r1"
    e["src_job"] = e["dst_job"] = "job-1"
    e["category"] = np.array(["rocev2", "external", "storage", "dns", "mgmt"], dtype=object)[
        np.searchsorted([4791, 443, 2049, 53, 22], f["dst_port"], sorter=np.argsort([4791, 443, 2049, 53, 22]))
        % 5]
    return e


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--dataset", default="flows_raw", choices=["flows_raw", "flows_enriched"])
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--input", default="numpy", choices=["numpy", "arrow", "columns"],
                    help="numpy: the decoded structured arrays go to the buffer as is (what the service does); "
                         "arrow: table_from_columns per batch first (the old service path); "
                         "columns: dicts of contiguous column arrays -> table_from_columns")
    ap.add_argument("--columnar", action="store_true", help="same as --input columns")
    args = ap.parse_args()
    if args.columnar:
        args.input = "columns"
    enriched = args.dataset == "flows_enriched"
    avsc = "flow_enriched" if enriched else "flow_record"
    rng = np.random.default_rng(7)
    batches = [make_batch(rng, args.batch, T0 + i * 10_000, enriched) for i in range(args.rows // args.batch)]
    if args.input == "columns":
        batches = [{n: np.ascontiguousarray(b[n]) for n in b.dtype.names} for b in batches]
    root = tempfile.mkdtemp(prefix="ffbench-")
    clock = time.thread_time  # CPU of this (the only) thread
    try:
        writer = ParquetWriter(None, root)
        buf = HourlyBuffer(args.dataset, 0, max_rows=args.file_rows)
        t_arrow = t_buf = t_build = t_write = 0.0
        for off, b in enumerate(batches):
            t0 = clock()
            item = b if args.input == "numpy" else table_from_columns(b, avsc)
            t1 = clock()
            buf.add(item, off)
            plan = buf.flush_plan(0, force=off == len(batches) - 1)
            t2 = clock()
            for f in plan.files:
                f.table  # noqa: B018 - builds the file's table (new code; the old code built it in add/plan)
            t3 = clock()
            writer.write_plan(plan)
            buf.confirm(plan)
            t4 = clock()
            t_arrow, t_buf, t_build, t_write = t_arrow + t1 - t0, t_buf + t2 - t1, t_build + t3 - t2, t_write + t4 - t3
        n = len(batches) * args.batch
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        total = t_arrow + t_buf + t_build + t_write
        print(f"dataset={args.dataset} rows={n:,} batch={args.batch:,} files={writer.files_written} "
              f"input={args.input} (rows per CPU-second, one thread)")
        if args.input != "numpy":
            print(f"numpy->arrow per batch  {n / t_arrow:>12,.0f} rows/s  ({t_arrow:.2f} s)")
        print(f"buffer add + plan       {n / t_buf:>12,.0f} rows/s  ({t_buf:.2f} s)")
        print(f"build file table        {n / max(t_build, 1e-9):>12,.0f} rows/s  ({t_build:.2f} s)")
        print(f"parquet encode + write  {n / t_write:>12,.0f} rows/s  ({t_write:.2f} s)")
        print(f"overall, one thread     {n / total:>12,.0f} rows/s  ({total * 1e6 / n:.2f} CPU-s per 1 M rows, "
              f"{size / n:.1f} bytes/row on disk)")
        print(f"consumer side (arrow + buffer) {n / (t_arrow + t_buf):>12,.0f} rows/s; "
              f"writer side (build + write) {n / (t_build + t_write):>12,.0f} rows/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
