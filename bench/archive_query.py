"""Query latency of the named archive reports on a generated one-day archive (default), or on a generated
week of rollups (``--week``: see :func:`week_main`).

How it works: bench/README.md, "bench/archive_query.py"; results: docs/performance.md#archive-queries.

    .venv/bin/python bench/archive_query.py [--rows 100000000] [--dir PATH] [--keep]
                                            [--partitions 4] [--raw] [--runs 3] [--hour 10] [--json FILE]
    .venv/bin/python bench/archive_query.py --week [--rate 200000] [--raw-rows 8000000] [--partitions 4]
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.columns import v4_column_to_addr16
from sinks.archive import layout
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import arrow_schema, table_from_columns
from query.reports import ArchiveQuery

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
        "vlan_out": np.zeros(n, np.int32), "vlan_priority_in": np.zeros(n, np.int32),
        "vlan_priority_out": np.zeros(n, np.int32),
        "next_hop": np.zeros((n, 16), np.uint8), "bgp_next_hop": np.zeros((n, 16), np.uint8),
        "duplicate": np.zeros(n, bool),
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


def markdown(results: list[dict]) -> str:
    lines = ["| range | report | median s | min s | files read | rows in files read | rows in range | result rows |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['range']} | `{r['report']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | "
                     f"{r['files_read']} | {r['rows_in_files']:,} | {r['rows_in_range']:,} | {r['result_rows']:,} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- a week of rollups


WEEK_HOURS = 168


def key_universe(rng: np.random.Generator, cl: Cluster, partitions: int) -> dict:
    """The (src, dst, category, exporter protocol, duplicate) keys a cluster's traffic has in one hour.

    Structured like a training fabric rather than uniform: ring collectives within each job (both
    neighbours), RoCEv2 all-to-all within a job, each GPU with 4 storage/model-store nodes (both ways),
    DNS to 2 mgmt nodes, each mgmt node to 32 nodes, each node with 4 outside addresses (both ways) and
    2,000 random pairs. 20 % of the pairs are also seen by a NetFlow exporter; a pair crossing racks is
    seen by both ToRs (one copy flagged duplicate). Partition = the observing ToR's rack modulo the
    partitions (the Kafka key is the exporter).
    """
    src, dst, cat = [], [], []

    def add(s, d, c):
        src.append(np.asarray(s)), dst.append(np.asarray(d)), cat.append(np.full(len(np.asarray(s)), c))

    gpu = np.arange(N_GPU)
    job, pos = gpu // JOB_SIZE, gpu % JOB_SIZE
    for step in (1, JOB_SIZE - 1):  # ring: next and previous in the job
        add(gpu, job * JOB_SIZE + (pos + step) % JOB_SIZE, 0)
    a = np.repeat(gpu, JOB_SIZE)
    b = (a // JOB_SIZE) * JOB_SIZE + np.tile(np.arange(JOB_SIZE), N_GPU)
    add(a[a != b], b[a != b], 1)
    stor = N_GPU + rng.integers(0, N_STORAGE + N_MODEL, (N_GPU, 4))
    add(np.repeat(gpu, 4), stor.ravel(), 2)
    add(stor.ravel(), np.repeat(gpu, 4), 2)
    mgmt_lo = N_GPU + N_STORAGE + N_MODEL
    nodes = np.arange(N_NODES)
    add(np.repeat(nodes, 2), mgmt_lo + rng.integers(0, N_MGMT, 2 * N_NODES), 3)
    add(np.repeat(mgmt_lo + np.arange(N_MGMT), 32), rng.integers(0, N_NODES, 32 * N_MGMT), 4)
    ext = N_NODES + rng.integers(0, N_EXTERNAL, 4 * N_NODES)
    add(np.repeat(nodes, 4), ext, 5)
    add(ext, np.repeat(nodes, 4), 5)
    add(rng.integers(0, N_NODES, 2000), rng.integers(0, N_NODES + N_EXTERNAL, 2000), 6)
    src, dst, cat = np.concatenate(src), np.concatenate(dst), np.concatenate(cat)
    keep = src != dst
    src, dst, cat = src[keep], dst[keep], cat[keep]
    # exporter protocol: sFlow always, NetFlow too for 20 % of the pairs
    nf = rng.random(len(src)) < 0.2
    proto = np.r_[np.ones(len(src), np.int32), np.full(int(nf.sum()), 4, np.int32)]
    src, dst, cat = np.r_[src, src[nf]], np.r_[dst, dst[nf]], np.r_[cat, cat[nf]]
    # duplicate: a pair crossing racks is seen by the destination's ToR as well
    rack = cl.exporter_of
    cross = rack[src] != rack[dst]
    dup = np.r_[np.zeros(len(src), bool), np.ones(int(cross.sum()), bool)]
    observer = np.r_[rack[src], rack[dst][cross]]
    src, dst, cat, proto = np.r_[src, src[cross]], np.r_[dst, dst[cross]], np.r_[cat, cat[cross]], np.r_[proto, proto[cross]]
    return {"src": src, "dst": dst, "cat": cat, "proto": proto, "dup": dup, "partition": observer % partitions}


def rollup_table(rng, cl: Cluster, keys: dict, idx: np.ndarray, buckets: np.ndarray, records: np.ndarray) -> pa.Table:
    """traffic rollup rows for keys ``idx`` in ``buckets`` with ``records`` flow records each."""
    from sinks.archive.rollups import TRAFFIC_SCHEMA

    s, d = pa.array(keys["src"][idx]), pa.array(keys["dst"][idx])
    node_s, node_d = cl.node.take(s), cl.node.take(d)
    addr_text = pa.array([f"100.64.{(i - N_NODES) // 256}.{(i - N_NODES) % 256}" if i >= N_NODES else ""
                          for i in range(N_NODES + N_EXTERNAL)], pa.string())
    rate = np.where(rng.random(len(idx)) < 0.9, 1000, 4096)
    cat = keys["cat"][idx]
    pkt_per_rec = np.where(cat <= 1, 2, 1)
    packets = records * pkt_per_rec
    size = np.where(cat <= 1, 4096, 800)
    return pa.table({
        "bucket_ms": pa.array(buckets, pa.int64()),
        "src_node": node_s, "dst_node": node_d, "src_ip": addr_text.take(s), "dst_ip": addr_text.take(d),
        "src_group": cl.group.take(s), "dst_group": cl.group.take(d),
        "src_rack": cl.rack.take(s), "dst_rack": cl.rack.take(d),
        "src_job": cl.job.take(s), "dst_job": cl.job.take(d),
        "category": cl.category.take(pa.array(cat)),
        "export_protocol": pa.array(keys["proto"][idx], pa.int32()), "duplicate": pa.array(keys["dup"][idx]),
        "bytes_est": pa.array(packets * size * rate, pa.int64()), "packets_est": pa.array(packets * rate, pa.int64()),
        "bytes": pa.array(packets * size, pa.int64()), "packets": pa.array(packets, pa.int64()),
        "flow_records": pa.array(records, pa.int64()),
    }, schema=TRAFFIC_SCHEMA)


def generate_week(root: str, rate: int, partitions: int, raw_rows: int, seed: int = 5) -> dict:
    """168 hours of compacted ``traffic_1h`` (one merged file per hour and partition, as ``fabricflow sink
    compact`` leaves them), ``traffic_1m`` for the first hour, and hour 168 as raw ``flows_enriched`` written
    by the sink's own path (with its per-file rollups, then compacted). Flow records per hour = rate x 3600."""
    from sinks.archive.compaction import compact
    from sinks.archive.rollups import TRAFFIC_SCHEMA  # noqa: F401

    rng = np.random.default_rng(seed)
    cl = Cluster()
    keys = key_universe(rng, cl, partitions)
    nkeys = len(keys["src"])
    writer = ParquetWriter(None, root)
    t0 = time.perf_counter()
    per_hour = rate * 3600
    rows_1h = rows_1m = 0
    weight = rng.pareto(1.5, nkeys) + 0.05  # heavy-tailed pair volumes, stable over the week
    for h in range(WEEK_HOURS + 1):
        hour = DAY * 24 + h
        active = np.flatnonzero(rng.random(nkeys) < 0.9)
        w = weight[active] * rng.uniform(0.5, 1.5, len(active))
        records = np.maximum(1, (w / w.sum() * per_hour).astype(np.int64))
        if h == WEEK_HOURS:
            break  # the raw hour: below
        for p in range(partitions):
            sel = keys["partition"][active] == p
            idx, rec = active[sel], records[sel]
            off0 = h * 10**9 + p
            name = layout.merged_name(p, off0, off0 + 10**6)
            t = rollup_table(rng, cl, keys, idx, np.full(len(idx), hour * layout.HOUR_MS), rec)
            writer.write_table(f"{writer.root}/traffic_1h/{layout.hour_dir(hour)}/{name}", t)
            rows_1h += t.num_rows
            if h == 0:  # per-minute rows of the first hour (the start edge of an unaligned week)
                per_min = np.maximum(1, rec // 60)
                reps = np.repeat(np.arange(60), len(idx))
                t = rollup_table(rng, cl, keys, np.tile(idx, 60),
                                 hour * layout.HOUR_MS + reps * 60_000, np.tile(per_min, 60))
                writer.write_table(f"{writer.root}/traffic_1m/{layout.hour_dir(hour)}/{name}", t)
                rows_1m += t.num_rows
        if h % 24 == 23:
            print(f"  day {h // 24 + 1} of rollups written ({rows_1h:,} traffic_1h rows, "
                  f"{time.perf_counter() - t0:.0f} s)", flush=True)
    t_roll = time.perf_counter() - t0
    # the raw hour, through the sink's buffer and writer: files of up to 1M rows, each with its rollups
    t1 = time.perf_counter()
    raw_hour = DAY * 24 + WEEK_HOURS
    lo = raw_hour * layout.HOUR_MS
    per_file = 1_000_000
    done = 0
    bufs = [HourlyBuffer("flows_enriched", p, max_rows=per_file) for p in range(partitions)]
    offs = [0] * partitions
    i = 0
    while done < raw_rows:
        p = i % partitions
        n = min(per_file, raw_rows - done)
        cols = make_columns(rng, cl, n, lo + (done * layout.HOUR_MS) // raw_rows,
                            lo + ((done + n) * layout.HOUR_MS) // raw_rows)
        cols["duplicate"] = rng.random(n) < 0.3
        bufs[p].add(table_from_columns(cols, "flow_enriched"), offs[p] + np.arange(n, dtype=np.int64) // MESSAGE_ROWS)
        offs[p] += n // MESSAGE_ROWS + 1
        plan = bufs[p].flush_plan(None, force=True)
        writer.write_plan(plan)
        bufs[p].confirm(plan)
        done += n
        i += 1
    t_raw = time.perf_counter() - t1
    per_file_rows = {d: sum(pq.ParquetFile(os.path.join(dp, f)).metadata.num_rows
                            for dp, _, fs in os.walk(os.path.join(root, d, layout.hour_dir(raw_hour))) for f in fs)
                     for d in ("traffic_1m", "traffic_1h")}
    raw_files = len(os.listdir(os.path.join(root, "flows_enriched", layout.hour_dir(raw_hour))))
    t2 = time.perf_counter()
    merged = compact(None, root, {("flows_enriched", p): 10**18 for p in range(partitions)}, before_hour=raw_hour + 1)
    t_compact = time.perf_counter() - t2
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    return {"keys": nkeys, "rows_1h": rows_1h, "rows_1m_first_hour": rows_1m, "seconds_rollups": t_roll,
            "raw_rows": raw_rows, "raw_files": raw_files, "seconds_raw": t_raw, "rollup_seconds": writer.rollup_seconds,
            "raw_hour_per_file_rollup_rows": per_file_rows, "compact_seconds": t_compact,
            "raw_hour_merged": [{"path": os.path.relpath(m.path, root), "inputs": m.inputs, "rows_in": m.rows_in,
                                 "rows_out": m.rows_out} for m in merged], "bytes": size, "rate": rate,
            "partitions": partitions}


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
    lines = ["| range | report | median s | min s | CPU s | datasets (files) | rows in files read | result rows |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['range']} | `{r['report']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['cpu_s']:.2f} | "
                     f"{r['datasets']} | "
                     f"{r['rows_read']:,} | {r['result_rows']:,} |")
    return "\n".join(lines)


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
