"""Query latency of the named archive reports on a generated one-day archive.

    .venv/bin/python bench/archive_query.py [--rows 100000000] [--dir PATH] [--keep]
                                            [--partitions 4] [--raw] [--runs 3] [--hour 10] [--json FILE]

Generates one UTC day of ``flows_enriched`` (and ``flows_raw`` with ``--raw``)
in a temporary directory on local disk with the sink's own code path
(``table_from_columns`` -> ``HourlyBuffer`` -> ``ParquetWriter``), so keys,
Hive layout, zstd, row groups and metadata are those the archive service
writes. Generation streams: one file (one Kafka partition, one quarter hour)
is in memory at a time. Files roll every 15 minutes per partition, as
``max_chunk_age_ms`` does in the service.

Cluster: 512 nodes (448 GPU in 16 jobs of 28, 32 storage, 16 model-store,
16 mgmt; 32 racks/ToR exporters) and 4,096 outside addresses; 7 categories
(collective, rocev2, storage, dns, mgmt, external, other); random ephemeral
ports and sizes.

Then each named report of ``sinks.query.ArchiveQuery`` (top_talkers, matrix
node/group, node, job, segmentation) and a ``sql`` count(*) is timed over one
hour and over the whole day, ``--runs`` times each, every run with a fresh
``ArchiveQuery`` (as one ``fabricflow query`` command does). Prints median
and min seconds, files read, rows in those files and rows in range, and checks
partition pruning (the one-hour range lists only its day and reads only that
hour's files). The directory is deleted unless ``--keep``.
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if not os.environ.get("PYTHONPATH"):  # PYTHONPATH=<other tree> runs that tree's code with this script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from schemas.columns import v4_column_to_addr16  # noqa: E402
from sinks import layout  # noqa: E402
from sinks.archive import HourlyBuffer, ParquetWriter  # noqa: E402
from sinks.arrow_schema import arrow_schema, table_from_columns  # noqa: E402
from sinks.query import ArchiveQuery  # noqa: E402

DAY = 20454  # 2026-01-01, days since the epoch
DAY_START_MS = DAY * layout.DAY_MS
QUARTERS = 4  # files per partition-hour (15-minute rolls)
MESSAGE_ROWS = 4096  # rows per Kafka message (offsets advance once per message)
BYTES_PER_ROW = {"flows_enriched": 45, "flows_raw": 35}  # on-disk estimate (41 measured at 100M) for the space check
RESERVE_BYTES = 2 << 30  # leave this much free

N_GPU, N_STORAGE, N_MODEL, N_MGMT = 448, 32, 16, 16
N_NODES = N_GPU + N_STORAGE + N_MODEL + N_MGMT  # 512
N_JOBS, JOB_SIZE = 16, 28
N_EXTERNAL = 4096
NODES_PER_RACK = 16
CATEGORIES = ("collective", "rocev2", "storage", "dns", "mgmt", "external", "other")
CATEGORY_P = (0.45, 0.15, 0.20, 0.03, 0.05, 0.07, 0.05)
NODE_NAME = "gpu-0007"  # for the `node` report
JOB_NAME = "job-03"  # for the `job` report


# --------------------------------------------------------------------------- cluster and rows


class Cluster:
    """Lookup tables indexed by endpoint id: 0..511 inventory nodes, 512.. outside addresses."""

    def __init__(self) -> None:
        n = N_NODES + N_EXTERNAL
        ids = np.arange(n)
        v4 = np.where(ids < N_NODES, 0x0A010000 + ids, 0x64400000 + (ids - N_NODES)).astype(np.uint32)
        self.addr = v4_column_to_addr16(v4)
        groups = (["gpu"] * N_GPU + ["storage"] * N_STORAGE + ["model-store"] * N_MODEL + ["mgmt"] * N_MGMT
                  + ["unknown"] * N_EXTERNAL)
        prefix = {"gpu": "gpu", "storage": "stor", "model-store": "mstore", "mgmt": "mgmt"}
        names, racks, switches, jobs = [], [], [], []
        for i in range(n):
            if i < N_NODES:
                g = groups[i]
                start = {"gpu": 0, "storage": N_GPU, "model-store": N_GPU + N_STORAGE,
                         "mgmt": N_GPU + N_STORAGE + N_MODEL}[g]
                names.append(f"{prefix[g]}-{i - start:04d}")
                r = i // NODES_PER_RACK
                racks.append(f"r{r:02d}")
                switches.append(f"tor-r{r:02d}")
                jobs.append(f"job-{i // JOB_SIZE:02d}" if i < N_GPU else "")
            else:
                names.append("")
                racks.append("")
                switches.append("")
                jobs.append("")
        self.node = pa.array(names, pa.string())
        self.group = pa.array(groups, pa.string())
        self.rack = pa.array(racks, pa.string())
        self.switch = pa.array(switches, pa.string())
        self.job = pa.array(jobs, pa.string())
        self.category = pa.array(CATEGORIES, pa.string())
        # exporter: the ToR of the inventory endpoint (a border router for outside addresses)
        rack_id = np.where(ids < N_NODES, ids // NODES_PER_RACK, N_NODES // NODES_PER_RACK)
        self.exporter_of = rack_id.astype(np.int64)
        self.exporter_addr = v4_column_to_addr16(
            (0xC0000200 + np.arange(N_NODES // NODES_PER_RACK + 1)).astype(np.uint32))


def make_columns(rng: np.random.Generator, cl: Cluster, n: int, t_lo: int, t_hi: int) -> dict:
    """Column dict of ``n`` enriched flows with ``time_end_ms`` sorted in [t_lo, t_hi)."""
    cat = rng.choice(len(CATEGORIES), size=n, p=CATEGORY_P).astype(np.int32)
    src = np.empty(n, np.int64)
    dst = np.empty(n, np.int64)
    stor_lo, stor_n = N_GPU, N_STORAGE + N_MODEL
    mgmt_lo = N_GPU + N_STORAGE + N_MODEL

    def pick(mask, s, d):
        k = int(mask.sum())
        src[mask], dst[mask] = s(k), d(k)

    # collective: GPU -> another GPU of the same job
    m = cat == 0
    k = int(m.sum())
    job = rng.integers(0, N_JOBS, k)
    a = rng.integers(0, JOB_SIZE, k)
    b = (a + rng.integers(1, JOB_SIZE, k)) % JOB_SIZE
    src[m], dst[m] = job * JOB_SIZE + a, job * JOB_SIZE + b
    # rocev2: any GPU -> any GPU
    pick(cat == 1, lambda k: rng.integers(0, N_GPU, k), lambda k: rng.integers(0, N_GPU, k))
    # storage: GPU <-> storage / model-store (2/3 reads from storage)
    m = cat == 2
    k = int(m.sum())
    g, s = rng.integers(0, N_GPU, k), stor_lo + rng.integers(0, stor_n, k)
    rd = rng.random(k) < 2 / 3
    src[m], dst[m] = np.where(rd, s, g), np.where(rd, g, s)
    # dns: any node -> a mgmt node; mgmt: mgmt node -> any node
    pick(cat == 3, lambda k: rng.integers(0, N_NODES, k), lambda k: mgmt_lo + rng.integers(0, N_MGMT, k))
    pick(cat == 4, lambda k: mgmt_lo + rng.integers(0, N_MGMT, k), lambda k: rng.integers(0, N_NODES, k))
    # external: node -> outside address (1/4 the other way)
    m = cat == 5
    k = int(m.sum())
    nd, ex = rng.integers(0, N_NODES, k), N_NODES + rng.integers(0, N_EXTERNAL, k)
    out = rng.random(k) < 0.75
    src[m], dst[m] = np.where(out, nd, ex), np.where(out, ex, nd)
    # other: random endpoints
    pick(cat == 6, lambda k: rng.integers(0, N_NODES + N_EXTERNAL, k),
         lambda k: rng.integers(0, N_NODES + N_EXTERNAL, k))

    roce = cat <= 1
    tcp = (cat == 2) | (cat == 4) | (cat == 5)
    eph = rng.integers(32768, 65536, n).astype(np.int32)
    service = np.select([roce, cat == 2, cat == 3, cat == 4, cat == 5],
                        [4791, 2049, 53, 22, 443], default=0).astype(np.int32)
    service = np.where(service == 0, rng.integers(1, 65536, n), service).astype(np.int32)
    packets = rng.integers(1, 4, n).astype(np.int64)
    nbytes = packets * np.where(roce, rng.integers(1000, 4200, n), rng.integers(64, 1500, n))
    rate = np.where(rng.random(n) < 0.9, 1000, 4096).astype(np.int64)
    t_end = np.sort(rng.integers(t_lo, t_hi, n))
    sflow = rng.random(n) < 0.8
    roce_qp = np.where(roce, rng.integers(0, 1 << 24, n), -1)
    src_i, dst_i = pa.array(src), pa.array(dst)
    cols = {
        "export_protocol": np.where(sflow, 1, 4).astype(np.int32),
        "exporter_addr": cl.exporter_addr[cl.exporter_of[src]],
        "observation_domain": np.zeros(n, np.int64),
        "sampler_id": np.ones(n, np.int64),
        "sampling_rate": rate,
        "bytes": nbytes,
        "packets": packets,
        "bytes_est": nbytes * rate,
        "packets_est": packets * rate,
        "ip_version": np.full(n, 4, np.int32),
        "src_addr": cl.addr[src],
        "dst_addr": cl.addr[dst],
        "src_port": eph,
        "dst_port": service,
        "ip_protocol": np.where(tcp, 6, 17).astype(np.int32),
        "tcp_flags": np.where(tcp, 0x18, 0).astype(np.int32),
        "tos": np.where(roce, 106, 0).astype(np.int32),
        "vlan": np.zeros(n, np.int32),
        "in_if": rng.integers(1, 65, n),
        "out_if": rng.integers(1, 65, n),
        "direction": np.zeros(n, np.int32),
        "time_start_ms": np.where(sflow, t_end, t_end - rng.integers(0, 60_000, n)),
        "time_end_ms": t_end,
        "time_received_ms": t_end + rng.integers(1, 20, n),
        "time_export_ms": t_end,
        "vxlan_vni": np.zeros(n, np.int64),
        "roce_opcode": np.where(roce, rng.choice([4, 10, 17], n), -1).astype(np.int32),
        "roce_dest_qp": roce_qp,
        "src_node": cl.node.take(src_i), "dst_node": cl.node.take(dst_i),
        "src_group": cl.group.take(src_i), "dst_group": cl.group.take(dst_i),
        "src_rack": cl.rack.take(src_i), "dst_rack": cl.rack.take(dst_i),
        "src_switch": cl.switch.take(src_i), "dst_switch": cl.switch.take(dst_i),
        "src_job": cl.job.take(src_i), "dst_job": cl.job.take(dst_i),
        "category": cl.category.take(pa.array(cat)),
    }
    return cols


# --------------------------------------------------------------------------- generation


def plan_rows(requested: int, root_parent: str, datasets: list[str]) -> tuple[int, str | None]:
    """Rows that fit on the disk of ``root_parent`` (and a message when scaled down)."""
    free = shutil.disk_usage(root_parent).free
    per_row = sum(BYTES_PER_ROW[d] for d in datasets)
    fit = max(0, (free - RESERVE_BYTES) // per_row)
    if requested <= fit:
        return requested, None
    n = int(fit // 1_000_000 * 1_000_000)
    return n, (f"not enough free space in {root_parent}: {free / 1e9:.1f} GB free, {requested:,} rows need "
               f"~{requested * per_row / 1e9:.1f} GB (+{RESERVE_BYTES / 1e9:.0f} GB reserve); "
               f"scaling down to {n:,} rows")


def generate(root: str, rows: int, partitions: int, raw: bool, seed: int = 11) -> dict:
    """Write one day of flows under ``root``, one file per (hour, quarter, partition)."""
    rng = np.random.default_rng(seed)
    cl = Cluster()
    writer = ParquetWriter(None, root)
    datasets = ["flows_enriched"] + (["flows_raw"] if raw else [])
    bufs = {(d, p): HourlyBuffer(d, p) for d in datasets for p in range(partitions)}
    next_offset = dict.fromkeys(range(partitions), 0)
    n_files = 24 * QUARTERS * partitions
    base, extra = divmod(rows, n_files)
    t_cols = t_arrow = t_write = 0.0
    done = 0
    t_start = time.perf_counter()
    i = 0
    for hour in range(24):
        h0 = DAY_START_MS + hour * layout.HOUR_MS
        for q in range(QUARTERS):
            lo = h0 + q * layout.HOUR_MS // QUARTERS
            hi = lo + layout.HOUR_MS // QUARTERS
            for p in range(partitions):
                n = base + (1 if i < extra else 0)
                i += 1
                if n == 0:
                    continue
                a = time.perf_counter()
                cols = make_columns(rng, cl, n, lo, hi)
                b = time.perf_counter()
                offs = next_offset[p] + np.arange(n, dtype=np.int64) // MESSAGE_ROWS
                next_offset[p] = int(offs[-1]) + 1
                tables = {"flows_enriched": table_from_columns(cols, "flow_enriched")}
                if raw:
                    t = tables["flows_enriched"]
                    tables["flows_raw"] = t.select(arrow_schema("flow_record").names)
                c = time.perf_counter()
                for d in datasets:
                    buf = bufs[(d, p)]
                    buf.add(tables[d], offs)
                    plan = buf.flush_plan(None, force=True)
                    writer.write_plan(plan)
                    buf.confirm(plan)
                e = time.perf_counter()
                t_cols, t_arrow, t_write = t_cols + b - a, t_arrow + c - b, t_write + e - c
                done += n
        el = time.perf_counter() - t_start
        print(f"  hour {hour:02d} written: {done:,} rows, {done / el:,.0f} rows/s, "
              f"eta {el / (hour + 1) * (23 - hour):.0f} s", flush=True)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    return {"rows": done, "files": writer.files_written, "bytes": size, "seconds": time.perf_counter() - t_start,
            "seconds_columns": t_cols, "seconds_arrow": t_arrow, "seconds_write": t_write,
            "datasets": datasets, "partitions": partitions}


# --------------------------------------------------------------------------- queries


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
            used = q.files_used["flows_enriched"]
            if name == "sql count(*)":
                in_range = res.column("n")[0].as_py()
            r = {"range": rname, "report": name, "median_s": statistics.median(secs), "min_s": min(secs),
                 "runs": runs, "result_rows": res.num_rows, "files_read": len(used),
                 "rows_in_files": sum(rows_of[f] for f in used)}
            out.append(r)
            print(f"  {rname:6} {name:13} median {r['median_s']:7.2f} s  min {r['min_s']:7.2f} s  "
                  f"files {r['files_read']:4}  rows in files {r['rows_in_files']:>13,}  "
                  f"result rows {r['result_rows']:,}", flush=True)
        for r in out:
            if r["range"] == rname:
                r["rows_in_range"] = in_range
    return out


def markdown(results: list[dict]) -> str:
    lines = ["| range | report | median s | min s | files read | rows in files read | rows in range | result rows |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['range']} | `{r['report']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | "
                     f"{r['files_read']} | {r['rows_in_files']:,} | {r['rows_in_range']:,} | {r['result_rows']:,} |")
    return "\n".join(lines)


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
    args = ap.parse_args()

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
