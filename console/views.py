"""The JSON behind each view, from cell tables, events and port states. Pure: no I/O, no web framework.

Matrices are dense and flat (row-major ``values``, ``n x n``) so a page can draw
512 x 512 cells from one array; a cell's category split and sampling
uncertainty come from :func:`cell_detail` when the pointer rests on it.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .layout import UNKNOWN, Layout

LEVELS = ("node", "rack", "group")
ERROR_BURST_PER_S = 10.0  # same default as the link-health detector's error_burst_per_s
DISCARDS_PER_S = 10.0


def _as_level(cells: pa.Table, level: str, layout: Layout) -> pa.Table:
    """Node cells -> rack cells by the inventory (rack level); other levels unchanged."""
    if level != "rack" or cells.num_rows == 0:
        return cells
    racks = {n.name: (n.rack or UNKNOWN) for n in layout.nodes}
    src = [racks.get(s, UNKNOWN) for s in cells.column("src").to_pylist()]
    dst = [racks.get(s, UNKNOWN) for s in cells.column("dst").to_pylist()]
    return cells.set_column(cells.schema.get_field_index("src"), "src", pa.array(src, pa.string())) \
                .set_column(cells.schema.get_field_index("dst"), "dst", pa.array(dst, pa.string()))


def filter_cells(cells: pa.Table, level: str, categories: list[str] | None) -> pa.Table:
    if "level" in cells.column_names:
        cells = cells.filter(pc.equal(cells.column("level"), "group" if level == "group" else "node"))
    if categories:
        cells = cells.filter(pc.is_in(cells.column("category"), pa.array(categories, pa.string())))
    return cells


def matrix(cells: pa.Table, layout: Layout, level: str, categories: list[str] | None, start_ms: int, end_ms: int,
           windows: int = 1) -> dict:
    """Dense matrix of estimated bytes over [start_ms, end_ms); rows = sources, columns = destinations."""
    cells = _as_level(filter_cells(cells, level, categories), level, layout)
    duration_s = max(1e-3, (end_ms - start_ms) / 1000.0)
    if cells.num_rows:
        g = cells.group_by(["src", "dst"]).aggregate([("bytes_est", "sum"), ("samples", "sum")])
        src, dst = g.column("src"), g.column("dst")
        names = set(src.to_pylist()) | set(dst.to_pylist())
    else:
        g, names = None, set()
    # every inventory node / rack / group gets its row, with traffic or without
    names |= {n.name if level == "node" else (n.rack or UNKNOWN) if level == "rack" else n.group for n in layout.nodes}
    labels = layout.order(names, level)
    n = len(labels)
    values = np.zeros(n * n, dtype=np.int64)
    total = 0
    if g is not None:
        lab = pa.array(labels, pa.string())
        i = pc.index_in(g.column("src"), value_set=lab).to_numpy(zero_copy_only=False)
        j = pc.index_in(g.column("dst"), value_set=lab).to_numpy(zero_copy_only=False)
        b = g.column("bytes_est_sum").to_numpy()
        np.add.at(values, i.astype(np.int64) * n + j.astype(np.int64), b)
        total = int(b.sum())
    nz = values[values > 0]
    return {
        "level": level,
        "categories": categories or [],
        "start_ms": int(start_ms),
        "end_ms": int(end_ms),
        "duration_s": duration_s,
        "windows": windows,
        "labels": labels,
        "blocks": layout.blocks(labels, level),
        "values": values.tolist(),
        "nonzero": int(len(nz)),
        "max_bytes": int(nz.max()) if len(nz) else 0,
        "min_bytes": int(nz.min()) if len(nz) else 0,
        "total_bytes": total,
    }


def rel95(samples: int) -> float | None:
    return None if not samples else 1.96 / math.sqrt(samples)


def cell_detail(cells: pa.Table, layout: Layout, level: str, src: str, dst: str, start_ms: int, end_ms: int) -> dict:
    cells = _as_level(filter_cells(cells, level, None), level, layout)
    cells = cells.filter(pc.and_(pc.equal(cells.column("src"), src), pc.equal(cells.column("dst"), dst)))
    duration_s = max(1e-3, (end_ms - start_ms) / 1000.0)
    by_cat: dict[str, dict] = {}
    for r in cells.to_pylist():
        d = by_cat.setdefault(r["category"], {"category": r["category"], "bytes_est": 0, "packets_est": 0,
                                               "flow_records": 0, "samples": 0})
        for k in ("bytes_est", "packets_est", "flow_records", "samples"):
            d[k] += int(r.get(k) or 0)
    cats = sorted(by_cat.values(), key=lambda d: -d["bytes_est"])
    for d in cats:
        d["rate_bps"] = d["bytes_est"] * 8 / duration_s
        d["rel95"] = rel95(d["samples"])
    total = {k: sum(d[k] for d in cats) for k in ("bytes_est", "packets_est", "flow_records", "samples")}
    return {"src": src, "dst": dst, "level": level, "start_ms": start_ms, "end_ms": end_ms, "duration_s": duration_s,
            **total, "rate_bps": total["bytes_est"] * 8 / duration_s, "rel95": rel95(total["samples"]),
            "categories": cats}


def topn(cells: pa.Table, layout: Layout, level: str, categories: list[str] | None, n: int, start_ms: int,
         end_ms: int) -> dict:
    """Group-to-group (or rack/node) flows by category for a Sankey, and the top talkers; the rest folded into 'other'."""
    duration_s = max(1e-3, (end_ms - start_ms) / 1000.0)
    flows = _as_level(filter_cells(cells, level, categories), level, layout)
    links: list[dict] = []
    if flows.num_rows:
        g = flows.group_by(["src", "dst", "category"]).aggregate([("bytes_est", "sum")]).sort_by(
            [("bytes_est_sum", "descending"), ("src", "ascending"), ("dst", "ascending")])
        rows = g.to_pylist()
        for r in rows[:n]:
            links.append({"src": r["src"], "dst": r["dst"], "category": r["category"], "bytes_est": r["bytes_est_sum"],
                          "rate_bps": r["bytes_est_sum"] * 8 / duration_s})
        rest = rows[n:]
        if rest:
            b = sum(r["bytes_est_sum"] for r in rest)
            links.append({"src": "other", "dst": "other", "category": "other", "bytes_est": b,
                          "rate_bps": b * 8 / duration_s, "folded": len(rest)})
    talkers: list[dict] = []
    node = filter_cells(cells, "node", categories)
    if node.num_rows:
        g = node.group_by(["src", "dst"]).aggregate([("bytes_est", "sum")]).sort_by(
            [("bytes_est_sum", "descending"), ("src", "ascending"), ("dst", "ascending")])
        rows = g.to_pylist()
        for r in rows[:n]:
            talkers.append({"src": r["src"], "dst": r["dst"], "bytes_est": r["bytes_est_sum"],
                            "rate_bps": r["bytes_est_sum"] * 8 / duration_s})
        if len(rows) > n:
            b = sum(r["bytes_est_sum"] for r in rows[n:])
            talkers.append({"src": "other", "dst": "other", "bytes_est": b, "rate_bps": b * 8 / duration_s,
                            "folded": len(rows) - n})
    return {"level": level, "categories": categories or [], "start_ms": start_ms, "end_ms": end_ms, "n": n,
            "links": links, "talkers": talkers}


def port_health(speed_cfg: float | None, if_speed: int, oper_up: bool | None, errors_per_s, discards_per_s,
                recent_events: dict[str, int] | None = None) -> list[str]:
    """Health flags of one port: below_speed, errors, discards, oper_down (empty = healthy)."""
    flags = []
    if speed_cfg and if_speed and if_speed < speed_cfg:
        flags.append("below_speed")
    if (errors_per_s or 0) >= ERROR_BURST_PER_S or (recent_events or {}).get("error_burst"):
        flags.append("errors")
    if (discards_per_s or 0) >= DISCARDS_PER_S:
        flags.append("discards")
    if oper_up is False:
        flags.append("oper_down")
    return flags


def topology(layout: Layout, states: list[dict], recent_events: dict[tuple[str, int], dict[str, int]]) -> dict:
    """Switches -> ports with the node behind each, utilisation vs speed, and health flags.

    ``states``: latest per port (dicts with switch, if_index, time_ms, if_speed, oper_up, util_in, util_out,
    errors_per_s, discards_per_s), from the live store or the archive.
    """
    by_key = {(s["switch"], int(s["if_index"])): s for s in states}
    switches: dict[str, list[dict]] = {name: [] for name in layout.switches}
    keys = [(p.switch, p.if_index) for p in layout.ports]
    keys += sorted(k for k in by_key if k not in layout.port_by_key)
    for key in keys:
        p = layout.port_by_key.get(key)
        s = by_key.get(key, {})
        speed_cfg = p.speed_bps if p else None
        if_speed = int(s.get("if_speed") or 0)
        util = max((u for u in (s.get("util_in"), s.get("util_out")) if u is not None), default=None)
        flags = port_health(speed_cfg, if_speed, s.get("oper_up"), s.get("errors_per_s"), s.get("discards_per_s"),
                            recent_events.get(key))
        switches.setdefault(key[0], []).append({
            "switch": key[0], "if_index": key[1], "node": p.node if p else "", "speed_bps": speed_cfg,
            "if_speed": if_speed or None, "oper_up": s.get("oper_up"), "util_in": s.get("util_in"),
            "util_out": s.get("util_out"), "util": util, "errors_per_s": s.get("errors_per_s"),
            "discards_per_s": s.get("discards_per_s"), "time_ms": s.get("time_ms") or None, "health": flags,
            "events": sorted((recent_events.get(key) or {}).keys()),
        })
    return {"switches": [{"name": name, "ports": ports} for name, ports in switches.items()],
            "thresholds": {"errors_per_s": ERROR_BURST_PER_S, "discards_per_s": DISCARDS_PER_S}}


def job_view(layout: Layout, job: str, scores: list[dict], phases: list[dict], bin_ms: int, period_ms: float | None,
             patterns: list[dict]) -> dict:
    """Per node sent/received bytes per window (small multiples), straggler scores, period and phase bands."""
    nodes = list(layout.jobs.get(job, []))
    nodes += sorted({s["node"] for s in scores} - set(nodes))
    series: dict[str, dict] = {n: {"node": n, "t": [], "sent_bps": [], "recv_bps": [], "score": [], "straggler": []}
                               for n in nodes}
    for s in sorted(scores, key=lambda s: s["window_start_ms"]):
        d = series.get(s["node"])
        if d is None:
            continue
        dur = max(1e-3, (s["window_end_ms"] - s["window_start_ms"]) / 1000.0)
        d["t"].append(s["window_start_ms"])
        d["sent_bps"].append(s["sent_bytes"] * 8 / dur)
        d["recv_bps"].append(s["recv_bytes"] * 8 / dur)
        d["score"].append(s.get("score"))
        d["straggler"].append(bool(s.get("straggler")))
    bands = phase_bands(phases, bin_ms)
    baseline = next((p.get("baseline_period_ms") for p in reversed(patterns) if p.get("baseline_period_ms")), None)
    current = next((p.get("current_period_ms") for p in reversed(patterns) if p.get("current_period_ms")), None)
    return {"job": job, "nodes": list(series.values()), "bands": bands, "bin_ms": bin_ms,
            "iteration_period_ms": period_ms, "pattern_period_ms": {"baseline": baseline, "current": current}}


def phase_bands(phases: list[dict], bin_ms: int, threshold: float = 0.2) -> list[dict]:
    """Contiguous time bins where a phase's rate is above ``threshold`` x its peak: [{phase, start_ms, end_ms, bytes_est}]."""
    out: list[dict] = []
    by_phase: dict[str, dict[int, int]] = {}
    for r in phases:
        by_phase.setdefault(r["phase"], {})[int(r["t"])] = int(r["bytes_est"])
    for phase, bins in sorted(by_phase.items()):
        peak = max(bins.values(), default=0)
        if peak <= 0:
            continue
        cur = None
        for t in sorted(bins):
            if bins[t] < threshold * peak:
                continue
            if cur is not None and t <= cur["end_ms"]:
                cur["end_ms"] = t + bin_ms
                cur["bytes_est"] += bins[t]
            else:
                cur = {"phase": phase, "start_ms": t, "end_ms": t + bin_ms, "bytes_est": bins[t]}
                out.append(cur)
    return out
