"""Console benchmark: API latency at 512 nodes and time to first paint of the matrix and the topology graph in
headless Chromium.

How it works: bench/README.md, "bench/console.py"; results: docs/performance.md#console.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

import fsspec
import numpy as np
import pyarrow as pa
import uvicorn

from console.app import ConsoleState, create_app
from console.history import History
from console.layout import Layout
from console.live import LiveStore
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import arrow_schema, table_from_dicts

N_SW, PER_SW, JOB = 32, 16, 64
N = N_SW * PER_SW
W = 10_000
T0 = 1_767_225_600_000 + 3_600_000  # 2026-01-01T01:00Z


def inventory() -> dict:
    nodes, switches = [], []
    for s in range(N_SW):
        ports = []
        for k in range(PER_SW):
            i = s * PER_SW + k
            name = f"gpu{i:03d}"
            nodes.append({"name": name, "ips": [f"10.{s}.{k // 250}.{k % 250 + 1}"], "rack": f"r{s:02d}",
                          "switch": f"tor{s:02d}", "group": "gpu", "capacity": "100G"})
            ports.append({"if_index": k + 1, "node": name, "speed": "100G"})
        switches.append({"name": f"tor{s:02d}", "agent": f"10.255.0.{s + 1}", "ports": ports})
    jobs = [{"name": f"job{j}", "nodes": [f"gpu{i:03d}" for i in range(j * JOB, (j + 1) * JOB)]} for j in range(N // JOB)]
    return {"nodes": nodes, "switches": switches, "jobs": jobs}


def matrix_table(ws: int) -> pa.Table:
    names = np.array([f"gpu{i:03d}" for i in range(N)], dtype=object)
    i, j = np.divmod(np.arange(N * N), N)
    rng = np.random.default_rng(1)
    b = rng.lognormal(16, 2, N * N).astype(np.int64) + 1
    cols = {"window_start_ms": np.full(N * N, ws), "window_end_ms": np.full(N * N, ws + W), "level": ["node"] * (N * N),
            "src": names[i], "dst": names[j], "category": ["collective"] * (N * N), "bytes_est": b,
            "packets_est": b // 1000, "flow_records": np.full(N * N, 3), "samples": np.maximum(1, b // 4_000_000)}
    return table(cols, "matrix_cell")


def table(cols: dict, record: str) -> pa.Table:
    """``cols`` as a table of ``record``'s schema; a field the bench does not set (the matrix cell's signal
    counters, a straggler score's ``explained_by``, whatever the records gain later) is zero, false, empty or
    null."""
    schema = arrow_schema(record)
    n = len(next(iter(cols.values())))
    for f in schema:
        if f.name in cols:
            continue
        t = f.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            cols[f.name] = pa.array(np.zeros(n), pa.float64()).cast(t)
        elif pa.types.is_boolean(t):
            cols[f.name] = pa.array(np.zeros(n, dtype=bool))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            cols[f.name] = pa.array([""] * n, t)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            cols[f.name] = pa.array([[]] * n, t)
        else:  # a struct (a diagnosis): null records, built so that their non-nullable children are valid
            cols[f.name] = pa.array([None] * n, t)
    return pa.Table.from_pydict(cols, schema=schema)


def archive(root: str, cells: pa.Table) -> None:
    w = ParquetWriter(None, root)

    def put(dataset, table, offset=0):
        b = HourlyBuffer(dataset, 0)
        b.add(table, offset)
        w.write_plan(b.flush_plan(force=True))

    put("matrix_windows", cells)
    windows = range(T0, T0 + 3_600_000, W)
    names = [f"gpu{i:03d}" for i in range(N)]
    scores = {"window_start_ms": [], "window_end_ms": [], "job": [], "node": [], "sent_bytes": [], "recv_bytes": [],
              "peer_median_sent": [], "peer_median_recv": [], "ratio_sent": [], "score": [], "evidence_windows": [],
              "straggler": [], "peers": []}
    for ws in windows:
        for i, n in enumerate(names):
            strag = i == 7 and ws >= T0 + 600_000
            for k, v in (("window_start_ms", ws), ("window_end_ms", ws + W), ("job", f"job{i // JOB}"), ("node", n),
                         ("sent_bytes", 10**9), ("recv_bytes", 10**9), ("peer_median_sent", 1e9),
                         ("peer_median_recv", 1e9), ("ratio_sent", 0.3 if strag else 1.0),
                         ("score", -6.0 if strag else 0.0), ("evidence_windows", 3 if strag else 0),
                         ("straggler", strag), ("peers", JOB - 1)):
                scores[k].append(v)
    put("straggler_scores", table(scores, "straggler_score"))
    link: dict = {}
    for ws in windows:
        for s in range(N_SW):
            for k in range(PER_SW):
                for f, v in (("time_ms", ws), ("interval_ms", W), ("kind", "sample"), ("exporter", f"10.255.0.{s + 1}"),
                             ("switch", f"tor{s:02d}"), ("if_index", k + 1), ("if_speed", 100_000_000_000),
                             ("previous_if_speed", 100_000_000_000), ("util_in", 0.3), ("util_out", 0.3),
                             ("in_errors_per_s", 0.0), ("out_errors_per_s", 0.0), ("in_discards_per_s", 0.0),
                             ("out_discards_per_s", 0.0), ("oper_up", True), ("detail", "")):
                    link.setdefault(f, []).append(v)
    for e in range(40):
        for f, v in (("time_ms", T0 + e * 90_000), ("interval_ms", W), ("kind", "error_burst"), ("exporter", "10.255.0.1"),
                     ("switch", "tor00"), ("if_index", 1 + e % PER_SW), ("if_speed", 100_000_000_000),
                     ("previous_if_speed", 100_000_000_000), ("util_in", 0.3), ("util_out", 0.3),
                     ("in_errors_per_s", 50.0), ("out_errors_per_s", 0.0), ("in_discards_per_s", 0.0),
                     ("out_discards_per_s", 0.0), ("oper_up", True), ("detail", "50 errors/s")):
            link.setdefault(f, []).append(v)
    put("link_health", table(link, "link_health"))
    incast = [{"event_id": f"gpu{e:03d}-{e}", "state": "open", "window_start_ms": T0 + e * 30_000,
               "window_end_ms": T0 + e * 30_000 + 200, "destination": f"gpu{e:03d}", "destination_group": "gpu",
               "sources": names[:16], "source_rates_bps": [7e9] * 16, "aggregate_bps": 1.1e11, "capacity_bps": 1e11,
               "fraction": 1.1, "fraction_low": 0.95, "fraction_high": 1.25, "samples": 300, "sampling_rate": 4096}
              for e in range(120)]
    put("incast_events", table_from_dicts(incast, "incast_event"))
    alerts = [{"dedup_key": f"segmentation|gpu{e:03d}", "rule": "segmentation", "severity": "warning", "state": "firing",
               "summary": f"segmentation gpu{e:03d}", "entities": {"src_node": f"gpu{e:03d}", "dst_node": "mgmt01"},
               "window_start_ms": T0 + e * 60_000, "window_end_ms": T0 + e * 60_000 + W, "first_seen_ms": T0 + e * 60_000,
               "last_seen_ms": T0 + e * 60_000 + W, "bytes_est": 10**6, "flows": 3, "sample_flows": []} for e in range(60)]
    put("alerts", table_from_dicts(alerts, "alert"))


def serve(state: ConsoleState, port: int) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    server.install_signal_handlers = lambda: None
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit(f"console did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    return server


def timed_get(url: str, repeat: int) -> tuple[float, int, dict]:
    times, size, body = [], 0, {}
    for _ in range(repeat):
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as r:
            raw = r.read()
        times.append(time.perf_counter() - t)
        size = len(raw)
        body = json.loads(raw)
    return statistics.median(times) * 1000, size, body


def main() -> int:
    ap = argparse.ArgumentParser(description="console benchmark")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--port", type=int, default=31334)
    args = ap.parse_args()
    from processors.logic.enrich.inventory import Inventory

    t = time.perf_counter()
    layout = Layout.from_inventory(Inventory.from_dict(inventory()))
    cells = matrix_table(T0)
    store = LiveStore(layout)
    for r in cells.to_pylist():
        store.add("matrix", r)
    tmp = tempfile.mkdtemp(prefix="fabricflow-console-bench-")
    archive(tmp, cells)
    print(f"set-up: {N} nodes, {cells.num_rows:,} cells in one window, one hour of outputs archived "
          f"({time.perf_counter() - t:.1f} s)")
    history = History(fsspec.filesystem("file"), tmp)
    live_srv = serve(ConsoleState(layout, store, history), args.port)
    arch_srv = serve(ConsoleState(layout, LiveStore(layout), history), args.port + 1)
    live, arch = f"http://127.0.0.1:{args.port}", f"http://127.0.0.1:{args.port + 1}"
    rows = []
    ms, size, body = timed_get(f"{live}/api/matrix?window={T0}&encoding=b64", args.repeat)
    assert body["nonzero"] == N * N and body["source"] == "live", body.get("nonzero")
    rows.append(("GET /api/matrix, one live window, 512 x 512 (page: b64)", ms, size, 200))
    ms, size, body = timed_get(f"{live}/api/matrix?window={T0}", args.repeat)
    rows.append(("GET /api/matrix, same, values as a JSON list", ms, size, 200))
    ms, size, body = timed_get(f"{arch}/api/matrix?from={T0}&to={T0 + W}&encoding=b64", args.repeat)
    assert body["nonzero"] == N * N and body["source"] == "archive", body.get("nonzero")
    rows.append(("GET /api/matrix, same window from the archive (b64)", ms, size, 200))
    ms, size, body = timed_get(f"{arch}/api/events?from={T0}&to={T0 + 3_600_000}", args.repeat)
    rows.append((f"GET /api/events, one hour from the archive ({body['total']} events)", ms, size, 200))
    ms, size, body = timed_get(f"{live}/api/matrix/cell?window={T0}&src=gpu001&dst=gpu002", args.repeat)
    rows.append(("GET /api/matrix/cell (hover detail), live", ms, size, 200))

    from devtools.browser import available, browser

    why = available()
    if why:
        print(f"first paint: skipped ({why})")
    else:
        with browser(1500, 1000, driver_port=args.port + 2) as d:
            paint = paint_times(d, f"{live}/?k={{k}}#view=matrix&window={T0}", "matrix", max(3, args.repeat // 2))
        first = statistics.median(p[0] for p in paint)
        draw = statistics.median(p[0] - p[1] for p in paint)
        rows.append(("matrix view: navigation start -> 262k cells painted", first, 0, 1000))
        rows.append(("  of which drawing the canvas (data in hand -> painted)", draw, 0, None))
    live_srv.should_exit = arch_srv.should_exit = True
    rows += topology_rows(args)
    print(f"{'measurement':<62}{'median ms':>10}{'bytes':>12}{'target ms':>11}")
    worst = True
    for name, ms, size, target in rows:
        ok = "" if target is None else ("  ok" if ms < target else "  OVER")
        worst &= target is None or ms < target
        print(f"{name:<62}{ms:>10.1f}{size:>12,}{'' if target is None else target:>11}{ok}")
    return 0 if worst else 1


def paint_times(d, url: str, view: str, n: int) -> list[tuple[float, float]]:
    """(navigation start -> ``{view}-painted``, -> ``{view}-data``) in ms, the page's performance marks, for ``n``
    fresh loads of ``url`` (``{k}`` in it: the load's number, so each load is a new document)."""
    out = []
    for k in range(n):
        d.get(url.format(k=k))
        got, deadline = None, time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            got = d.execute_script(
                f"const p = performance.getEntriesByName('{view}-painted')[0], "
                f"q = performance.getEntriesByName('{view}-data')[0]; "
                "return p ? [p.startTime, q.startTime] : null")
            time.sleep(0.05)
        if got is None:
            raise SystemExit(f"the {view} view was not painted within 30 s")
        out.append(got)
    return out


def topology_rows(args) -> list[tuple]:
    """The topology graph of a 512-node rail-optimised fabric (8 rails, 32 leaves, 8 spines, 4352 links with one
    counter sample each, devtools/fabric_fixture.py): the APIs, and navigation start -> graph painted."""
    from devtools import fabric_fixture as ff

    rows = []
    port = args.port + 3
    with ff.serving(port, samples=3) as url:
        ms, size, body = timed_get(f"{url}api/topology", args.repeat)
        assert body["counts"]["nodes"] == 512 and body["collapse"], body["counts"]
        rows.append((f"GET /api/topology, 512 nodes, {body['links_total']} links, grouped", ms, size, 200))
        ms, size, body = timed_get(f"{url}api/topology?expand=rack:rack03", args.repeat)
        rows.append(("GET /api/topology, one rack opened", ms, size, 200))
        ms, size, body = timed_get(f"{url}api/topology?detail=all", args.repeat)
        rows.append(("GET /api/topology?detail=all (every node link)", ms, size, None))
        ms, size, body = timed_get(f"{url}api/rails", args.repeat)
        rows.append(("GET /api/rails, 4096 NICs on 8 rails", ms, size, 200))
        ms, size, body = timed_get(f"{url}api/link?id={ff.ERRORS}", args.repeat)
        rows.append(("GET /api/link (an uplink, both ends)", ms, size, 200))
        from devtools.browser import available, browser

        if available():
            return rows
        with browser(1600, 1000, driver_port=port + 1) as d:
            paint = paint_times(d, f"{url}?k={{k}}#view=topology", "topology", max(3, args.repeat // 2))
        rows.append(("topology view: navigation start -> 512-node graph painted",
                     statistics.median(p[0] for p in paint), 0, 1000))
        rows.append(("  of which laying out and drawing (data in hand -> painted)",
                     statistics.median(p[0] - p[1] for p in paint), 0, None))
    return rows


if __name__ == "__main__":
    sys.exit(main())
