"""Benchmark: can the flow-metrics sink keep up with processors producing >= 1 M flow records/s?

How it works: bench/README.md, "bench/metrics_sink.py"; results: docs/performance.md#flow-metrics-sink.

Run: .venv/bin/python -m bench.metrics_sink [--nodes 512 --windows 12 --records-per-s 1000000] [--series]
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
from prometheus_client import CollectorRegistry, generate_latest

from processors.logic.enrich.inventory import Inventory
from schemas import codec
from schemas.columns import COUNTER_DTYPE, addr16
from schemas.records import encode_records
from sinks.metrics.state import MetricsState

WINDOW_MS = 10_000
T0 = 1_800_000_000_000
JOB, RACK = 32, 16
POLL = 2000
TCP_CATS = {"storage", "mgmt", "other"}


class Cluster:
    """Node names, racks, groups, jobs and the pair-category traffic weights of the model."""

    def __init__(self, nodes: int, seed: int = 5):
        rng = np.random.default_rng(seed)
        n_stor = max(4, nodes * 3 // 64)
        n_svc = min(8, max(4, nodes // 64))
        n_gpu = (nodes - n_stor - n_svc) // JOB * JOB
        n_stor = nodes - n_svc - n_gpu
        self.n = nodes
        self.names = [f"gpu-{i:04d}" for i in range(n_gpu)] + [f"stor-{i:03d}" for i in range(n_stor)] + \
                     [f"svc-{i:02d}" for i in range(n_svc)] + [""]  # last: addresses outside the inventory
        self.groups = ["gpu"] * n_gpu + ["storage"] * n_stor + ["mgmt"] * n_svc + ["unknown"]
        self.racks = [f"r{i // RACK:03d}" for i in range(nodes)] + [""]
        self.jobs = {f"job-{j:03d}": self.names[j * JOB:(j + 1) * JOB] for j in range(n_gpu // JOB)}
        gpu = np.arange(n_gpu)
        stor = n_gpu + np.arange(n_stor)
        svc = n_gpu + n_stor + np.arange(n_svc)
        unknown = nodes
        src, dst, cat, w = [], [], [], []

        def add(s, d, c, total):
            s, d = np.asarray(s).ravel(), np.asarray(d).ravel()
            src.append(s), dst.append(d), cat.append(np.full(len(s), c, dtype=object))
            w.append(np.full(len(s), total / len(s)))

        nxt = (gpu // JOB) * JOB + (gpu % JOB + 1) % JOB
        add(np.r_[gpu, nxt], np.r_[nxt, gpu], "rocev2", 0.55)
        a2a_jobs = range(0, n_gpu // JOB, 4)
        pairs = [(a, b) for j in a2a_jobs for a in range(j * JOB, (j + 1) * JOB) for b in range(j * JOB, (j + 1) * JOB) if a != b]
        add([p[0] for p in pairs], [p[1] for p in pairs], "collective", 0.15)
        st_of = stor[(gpu[:, None] * 7 + np.arange(4)[None, :] * 13) % n_stor]
        g4 = np.repeat(gpu, 4)
        add(np.r_[g4, st_of.ravel()], np.r_[st_of.ravel(), g4], "storage", 0.20)
        allnodes = np.arange(nodes)
        add(np.r_[allnodes, np.full(nodes, svc[0])], np.r_[np.full(nodes, svc[0]), allnodes], "dns", 0.03)
        mg = svc[1:]
        add(np.r_[np.repeat(mg, nodes), np.tile(allnodes, len(mg))], np.r_[np.tile(allnodes, len(mg)), np.repeat(mg, nodes)], "mgmt", 0.02)
        rs = rng.integers(0, nodes, 2000)
        rd = np.where(rng.random(2000) < 0.3, unknown, rng.integers(0, nodes, 2000))
        add(rs, rd, "other", 0.05)
        self.src, self.dst, self.cat = np.concatenate(src), np.concatenate(dst), np.concatenate(cat)
        self.w = np.concatenate(w)
        self.w /= self.w.sum()

    def inventory(self) -> Inventory:
        nodes = [{"name": n, "addresses": [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"], "group": g, "rack": r,
                  "switch": f"tor-{r}", "capacity": "400G"}
                 for i, (n, g, r) in enumerate(zip(self.names[:-1], self.groups[:-1], self.racks[:-1]))]
        switches = [{"name": f"tor-{r}", "agents": [f"172.16.{k // 256}.{k % 256}"],
                     "ports": {p + 1: {"peer": self.names[k * RACK + p]} for p in range(RACK) if k * RACK + p < self.n}}
                    for k, r in enumerate(sorted(set(self.racks[:-1])))]
        jobs = [{"name": j, "nodes": ns} for j, ns in self.jobs.items()]
        return Inventory.from_dict({"nodes": nodes, "switches": switches, "jobs": jobs})

    def window_cells(self, rng, records: int, ws: int) -> list[dict]:
        counts = rng.multinomial(records, self.w)
        hit = np.flatnonzero(counts)
        rate = 1000
        out = []
        acc: dict[tuple, list[int]] = {}
        for i in hit.tolist():
            s, d, c, k = int(self.src[i]), int(self.dst[i]), self.cat[i], int(counts[i])
            b = k * rate * 1100
            syn = k * rate // 200 if c in TCP_CATS else 0
            rst = k * rate // 5000 if c in TCP_CATS else 0
            for lvl, a, z in (("node", self.names[s], self.names[d]), ("rack", self.racks[s], self.racks[d]),
                              ("group", self.groups[s], self.groups[d])):
                v = acc.setdefault((lvl, a or "unknown", z or "unknown", c), [0, 0, 0, 0, 0, 0])
                v[0] += b
                v[1] += k * rate
                v[2] += k
                v[3] += k
                v[4] += syn
                v[5] += rst
        for (lvl, a, z, c), v in sorted(acc.items()):
            out.append({"window_start_ms": ws, "window_end_ms": ws + WINDOW_MS, "level": lvl, "src": a, "dst": z,
                        "category": c, "bytes_est": v[0], "packets_est": v[1], "flow_records": v[2], "samples": v[3],
                        "syn_packets_est": v[4], "rst_packets_est": v[5], "ecn_ce_packets_est": 0, "cnp_packets_est": 0})
        return out


def counter_messages(cluster: Cluster, window: int, per_msg: int = 48) -> tuple[list[bytes], list[bytes]]:
    """Counter batches and link-health sample records of one window (half the ports sample each 10 s)."""
    racks = sorted(set(cluster.racks[:-1]))
    rows = []
    for k, _r in enumerate(racks):
        for p in range(RACK + 8):
            if (k + p + window) % 2:
                continue
            rows.append((f"172.16.{k // 256}.{k % 256}", p + 1))
    arr = np.zeros(len(rows), dtype=COUNTER_DTYPE)
    t = T0 + window * WINDOW_MS
    for i, (agent, ifx) in enumerate(rows):
        arr[i]["exporter_addr"] = np.frombuffer(addr16(agent), np.uint8)
        arr[i]["if_index"] = ifx
        arr[i]["time_received_ms"] = t
        arr[i]["if_speed"] = 400_000_000_000
        arr[i]["if_oper_up"] = True
        arr[i]["in_octets"] = arr[i]["out_octets"] = (window + 1) * 10**12 + i
    batches = [codec.encode_batch("counter_batch", arr[i:i + per_msg]) for i in range(0, len(arr), per_msg)]
    link = [{"time_ms": t, "interval_ms": 20_000, "kind": "sample", "exporter": a, "switch": f"tor-{racks[int(a.split('.')[3]) + 256 * int(a.split('.')[2])]}",
             "if_index": ifx, "if_speed": 400_000_000_000, "previous_if_speed": 400_000_000_000, "util_in": 0.4,
             "util_out": 0.3, "in_errors_per_s": 0.0, "out_errors_per_s": 0.0, "in_discards_per_s": 0.0,
             "out_discards_per_s": 0.0, "oper_up": True, "detail": ""} for a, ifx in rows]
    return batches, encode_records("link_health", link)


def straggler_messages(cluster: Cluster, window: int) -> list[bytes]:
    ws = T0 + window * WINDOW_MS
    recs = [{"window_start_ms": ws, "window_end_ms": ws + WINDOW_MS, "job": job, "node": n, "sent_bytes": 10**9,
             "recv_bytes": 10**9, "peer_median_sent": 1e9, "peer_median_recv": 1e9, "ratio_sent": 1.0,
             "score": 0.1, "evidence_windows": 0, "straggler": False, "peers": JOB - 1}
            for job, ns in cluster.jobs.items() for n in ns]
    return encode_records("straggler_score", recs)


def matrix_messages(cells: list[dict], max_cells: int = 20_000) -> list[bytes]:
    """The matrix topic's messages of one window's cells as the processors write them: ``matrix.windows.v2``, one
    message per level (parts of at most ``max_cells`` cells); one ``matrix_cell`` message per cell for a tree
    before v2 (FF_BENCH_CODE)."""
    try:
        from schemas.matrix import MatrixWindow, encode_window
    except ImportError:
        return encode_records("matrix_cell", cells)
    by_level: dict[str, list[dict]] = {}
    for c in cells:
        by_level.setdefault(c["level"], []).append(c)
    out = []
    for cs in by_level.values():
        cs.sort(key=lambda c: (c["src"], c["dst"], c["category"]))
        out += [encode_window(MatrixWindow.from_cells(cs[i:i + max_cells], part=i // max_cells))
                for i in range(0, len(cs), max_cells)]
    return out


def build(cluster: Cluster, windows: int, records_per_s: int, seed: int = 11):
    rng = np.random.default_rng(seed)
    per_window = []
    levels = {"node": 0, "rack": 0, "group": 0}
    for w in range(windows):
        cells = cluster.window_cells(rng, records_per_s * WINDOW_MS // 1000, T0 + w * WINDOW_MS)
        for c in cells:
            levels[c["level"]] += 1
        counters, link = counter_messages(cluster, w)
        per_window.append({"matrix": matrix_messages(cells), "counters": counters, "link": link,
                           "straggler": straggler_messages(cluster, w)})
    return per_window, {k: v / windows for k, v in levels.items()}


def apply_window(st: MetricsState, msgs: dict, now: float) -> None:
    """One window's messages in polls of POLL, the budget selection when a new window arrived."""
    for kind in ("counters", "link", "straggler", "matrix"):
        vals = msgs[kind]
        for i in range(0, len(vals), POLL):
            st.add_values(kind, vals[i:i + POLL], now)
            if st.reselect_due():
                st.reselect()


def run_state(cluster: Cluster, per_window, budget: int) -> dict:
    st = MetricsState(cluster.inventory(), series_budget=budget)
    reg = CollectorRegistry()
    reg.register(st)
    scrape_s, scrape_cpu, body = [], 0.0, b""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for w, msgs in enumerate(per_window):
        now = (T0 + w * WINDOW_MS) / 1000
        apply_window(st, msgs, now)
        if w % 3 != 1:  # two scrapes per three windows: every 15 s
            t, c = time.perf_counter(), time.process_time()
            # what MetricsService.scrape serves (an older tree without exposition: prometheus_client's text)
            body = st.exposition(now) if hasattr(st, "exposition") else generate_latest(reg)
            st.scraped()
            scrape_s.append(time.perf_counter() - t)
            scrape_cpu += time.process_time() - c
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"cpu": cpu, "wall": wall, "scrape_cpu": scrape_cpu, "scrapes": len(scrape_s), "scrape_ms": 1000 * float(np.mean(scrape_s)), "scrape_bytes": len(body),
            "series": st.series_count(), "folded": sum(st.folded.values.values()),
            "pairs": len(st.n2n_bytes), "undecodable": sum(st.undecodable.values.values()),
            "by_family": sorted(((len(f), f.name) for f in st.families if len(f)), reverse=True)}


def series_parts(cluster: Cluster, per_window, budget: int) -> dict[str, int]:
    """Series exported after every window was applied (no timing; scrapes every 15 s derive the scrape-time
    families but format nothing), by part: node pairs within a job and the other pairs (the budgeted
    families), per port, per node, rack matrix, the rest (group matrix, detectors, own health)."""
    st = MetricsState(cluster.inventory(), series_budget=budget)
    for w, msgs in enumerate(per_window):
        now = (T0 + w * WINDOW_MS) / 1000
        apply_window(st, msgs, now)
        if w % 3 != 1:  # as run_state's scrapes
            st._derive(now)
            st.scraped()
    st._derive(now)
    job = {n: j for j, ns in cluster.jobs.items() for n in ns}
    parts = dict.fromkeys(("job pairs", "other pairs", "ports", "nodes", "racks", "rest"), 0)
    for f in st.families:
        if "src_node" in f.labels:
            for key in f.values:
                parts["job pairs" if job.get(key[0], "-") == job.get(key[1], "+") else "other pairs"] += 1
            continue
        part = ("ports" if "switch" in f.labels else "racks" if "src_rack" in f.labels
                else "nodes" if "node" in f.labels and "job" not in f.labels else "rest")
        parts[part] += len(f)
    parts["total"] = st.series_count()
    parts["folded cells"] = int(sum(st.folded.values.values()))
    return parts


def run_kafka(bootstrap: str, per_window) -> dict:
    from confluent_kafka import Producer

    from fabricflow.settings import load_settings
    from fabricflow.kafka import ensure_topics
    from sinks.metrics.service import MetricsService

    prefix = f"bench{uuid.uuid4().hex[:6]}."
    topics = {k: prefix + v for k, v in load_settings().kafka.topics.model_dump().items() if k != "replay_prefix"}
    s = load_settings(None, kafka={"bootstrap_servers": bootstrap, "topics": topics})
    ensure_topics(s.kafka)
    names = {"matrix": s.kafka.topics.matrix, "counters": s.kafka.topics.counters_raw,
             "link": s.kafka.topics.link_health, "straggler": s.kafka.topics.straggler}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    total = 0
    for msgs in per_window:
        for kind, vals in msgs.items():
            for v in vals:
                p.produce(names[kind], value=v)
                total += 1
                if total % 50_000 == 0:
                    p.flush(30)
    p.flush(60)
    svc = MetricsService(s, port=0, group="bench-" + uuid.uuid4().hex[:6])
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    svc.start()
    deadline = time.monotonic() + 600
    while svc.report["messages"] < total and time.monotonic() < deadline:
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    svc.scrape()
    svc.stop()
    return {"messages": total, "consumed": svc.report["messages"], "wall": wall, "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--windows", type=int, default=12, help="10 s windows of event time")
    ap.add_argument("--records-per-s", type=int, default=1_000_000, help="flow records/s the processors take in")
    ap.add_argument("--budget", type=int, default=50_000, help="metrics.series_budget")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kafka", default=None, help="also run the real service against this broker")
    ap.add_argument("--series", action="store_true",
                    help="only count the series (by part) with --budget and without a budget; no timing")
    a = ap.parse_args()
    t = time.perf_counter()
    cluster = Cluster(a.nodes)
    per_window, levels = build(cluster, a.windows, a.records_per_s)
    n_msgs = {k: sum(len(w[k]) for w in per_window) for k in per_window[0]}
    cells = round(sum(levels.values()) * a.windows)
    records = a.records_per_s * WINDOW_MS // 1000 * a.windows
    print(f"cluster: {a.nodes} nodes, {len(cluster.jobs)} jobs of {JOB}; {a.records_per_s:,} flow records/s; "
          f"{a.windows} windows of 10 s (built in {time.perf_counter() - t:.1f} s)")
    print(f"per window: {levels['node']:,.0f} node cells, {levels['rack']:,.0f} rack cells, {levels['group']:,.0f} "
          f"group cells; {n_msgs['counters'] / a.windows:.0f} counter batches, {n_msgs['link'] / a.windows:.0f} link "
          f"health, {n_msgs['straggler'] / a.windows:.0f} straggler scores")
    print(f"  = {cells / a.windows / 10:,.0f} matrix cells/s and {sum(n_msgs.values()) / a.windows / 10:,.0f} messages/s "
          f"for {a.records_per_s:,} flow records/s ({a.records_per_s * a.windows * 10 / max(cells, 1):,.0f} records per cell)")
    if a.series:
        for budget in (a.budget, 10**9):
            parts = series_parts(cluster, per_window, budget)
            print(f"series with budget {budget:,}: " + ", ".join(f"{k} {v:,}" for k, v in parts.items()))
        return
    for run in range(a.runs):
        r = run_state(cluster, per_window, a.budget)
        total = sum(n_msgs.values())
        print(f"run {run + 1}: {r['cpu']:.2f} CPU-s ({r['wall']:.2f} s wall): {cells / r['cpu']:,.0f} cells/CPU-s, "
              f"{total / r['cpu']:,.0f} messages/CPU-s = {records / r['cpu'] / 1e6:.1f} M flow records/s equivalent "
              f"({records / r['cpu'] / a.records_per_s:.1f}x the stream; sink CPU share at 1 M/s: "
              f"{r['cpu'] / (a.windows * 10) * 1e6 / a.records_per_s:.1%}); of which {r['scrapes']} scrapes "
              f"{r['scrape_cpu']:.2f} CPU-s; without them {records / (r['cpu'] - r['scrape_cpu']) / 1e6:.1f} M records/s")
    print(f"  scrape: {r['scrape_ms']:.0f} ms for {r['series']:,} series ({r['scrape_bytes'] / 1e6:.1f} MB); node pairs with "
          f"series: {r['pairs']:,}; cells folded by the budget ({a.budget:,}): {r['folded']:,.0f}; undecodable: {r['undecodable']:.0f}")
    print("  series by family: " + ", ".join(f"{name} {n:,}" for n, name in r["by_family"][:8]))
    if a.kafka:
        k = run_kafka(a.kafka, per_window)
        print(f"kafka: {k['consumed']:,} of {k['messages']:,} messages consumed by MetricsService in {k['wall']:.1f} s "
              f"({k['consumed'] / k['wall']:,.0f} messages/s, {k['cpu']:.1f} CPU-s in this process) = "
              f"{records / k['wall'] / 1e6:.1f} M flow records/s equivalent")


if __name__ == "__main__":
    main()
