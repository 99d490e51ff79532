"""The synthetic archives bench/archive_query.py times: a one-day archive of enriched (and raw) flows of a 512-node
cluster, and a week of rollups (``generate_week``). Seeded: the same arguments write the same files."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.columns import v4_column_to_addr16
from sinks.archive import layout
from sinks.archive.arrow_schema import arrow_schema, table_from_columns
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter

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
WEEK_HOURS = 168


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
