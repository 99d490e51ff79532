"""The JSON behind each view, from cell tables, events and port states. Pure: no I/O, no web framework.

Matrices are dense and flat (row-major ``values``, ``n x n``) so a page can draw
512 x 512 cells from one array; a cell's category split and sampling
uncertainty come from :func:`cell_detail` when the pointer rests on it.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .layout import UNKNOWN, Layout

LEVELS = ("node", "rack", "group")
ERROR_BURST_PER_S = 10.0  # same default as the link-health detector's error_burst_per_s
DISCARDS_PER_S = 10.0
OTHERS = "(others)"  # top-N: everything below the top n, folded (not the app category "other")


def _as_level(cells: pa.Table, level: str, layout: Layout) -> pa.Table:
    """Node cells -> rack cells by the inventory (rack level); other levels unchanged (small tables only)."""
    if level != "rack" or cells.num_rows == 0:
        return cells
    racks = {n.name: (n.rack or UNKNOWN) for n in layout.nodes}
    out = cells
    for name in ("src", "dst"):
        col = pa.array([racks.get(x, UNKNOWN) for x in _plain(cells.column(name)).to_pylist()], pa.string())
        out = out.set_column(out.schema.get_field_index(name), name, col)
    return out


def _plain(col) -> pa.Array:
    """A string column as plain strings (dictionary columns decoded)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col


def filter_cells(cells: pa.Table, level: str, categories: list[str] | None) -> pa.Table:
    if "level" in cells.column_names:
        cells = cells.filter(pc.equal(_plain(cells.column("level")), "group" if level == "group" else "node"))
    if categories:
        cells = cells.filter(pc.is_in(_plain(cells.column("category")), pa.array(categories, pa.string())))
    return cells


def _chunk_codes(col) -> list[tuple[np.ndarray, list[str]]]:
    """Per chunk of a string column: (int codes, the names they index), via dictionary encoding (no per-row Python)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = []
    for ch in chunks:
        d = ch if pa.types.is_dictionary(ch.type) else pc.dictionary_encode(ch)
        codes = d.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = d.dictionary.to_pylist()
        if len(names) > 1 and len(codes):  # a filtered table keeps its whole dictionary: drop unused names
            used = np.flatnonzero(np.bincount(codes, minlength=len(names)))
            if len(used) < len(names):
                remap = np.zeros(len(names), dtype=np.int64)
                remap[used] = np.arange(len(used))
                codes, names = remap[codes], [names[i] for i in used.tolist()]
        elif not len(codes):
            names = []
        out.append((codes, names))
    return out


def _indexed(chunks: list[tuple[np.ndarray, list[str]]], to_label, index: dict[str, int]) -> np.ndarray:
    """Row -> label index from :func:`_chunk_codes` output (names mapped by ``to_label``)."""
    parts = [np.array([index[to_label(x)] for x in names], dtype=np.int64)[codes] if len(names) else
             np.zeros(0, dtype=np.int64) for codes, names in chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _label_fn(level: str, layout: Layout):
    if level != "rack":
        return lambda x: x
    racks = {n.name: (n.rack or UNKNOWN) for n in layout.nodes}
    return lambda x: racks.get(x, UNKNOWN)


def pair_sums(cells: pa.Table, layout: Layout, level: str, extra_names=()) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(labels in display order, n*n summed bytes_est, n*n summed samples) of filtered cells.

    Vectorised: names are dictionary-encoded per chunk, mapped to label indices, and summed with
    ``np.bincount`` on ``src * n + dst`` (262k cells in a few tens of ms; a string group-by takes ~1 s).
    """
    to_label = _label_fn(level, layout)
    names = set(extra_names)
    coded = {c: _chunk_codes(cells.column(c)) for c in ("src", "dst")}
    for chunks in coded.values():
        for _codes, ns in chunks:
            names.update(to_label(x) for x in ns)
    labels = layout.order(names, level)
    index = {x: i for i, x in enumerate(labels)}
    n = len(labels)
    if cells.num_rows == 0:
        return labels, np.zeros(n * n, dtype=np.int64), np.zeros(n * n, dtype=np.int64)
    flat = _indexed(coded["src"], to_label, index) * n + _indexed(coded["dst"], to_label, index)
    b = cells.column("bytes_est").to_numpy().astype(np.float64)
    smp = cells.column("samples").to_numpy().astype(np.float64)
    return (labels, np.bincount(flat, weights=b, minlength=n * n).astype(np.int64),
            np.bincount(flat, weights=smp, minlength=n * n).astype(np.int64))


def matrix(cells: pa.Table, layout: Layout, level: str, categories: list[str] | None, start_ms: int, end_ms: int,
           windows: int = 1, encoding: str = "list") -> dict:
    """Dense matrix of estimated bytes over [start_ms, end_ms); rows = sources, columns = destinations.

    ``encoding``: ``list`` puts the n*n values in ``values`` as a JSON list; ``b64`` puts them in
    ``values_b64`` as base64 of little-endian float64 (exact up to 2^53 bytes; 512 nodes: 2.8 MB of
    text built in ~5 ms instead of a 262k-number list built and parsed in ~100 ms).
    """
    cells = filter_cells(cells, level, categories)
    duration_s = max(1e-3, (end_ms - start_ms) / 1000.0)
    # every inventory node / rack / group gets its row, with traffic or without
    inv = {n.name if level == "node" else (n.rack or UNKNOWN) if level == "rack" else n.group for n in layout.nodes}
    labels, values, _samples = pair_sums(cells, layout, level, inv)
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
        "switches": layout.switch_blocks(labels) if level == "node" else [],
        **({"values_b64": base64.b64encode(values.astype("<f8").tobytes()).decode("ascii")} if encoding == "b64"
           else {"values": values.tolist()}),
        "nonzero": len(nz),
        "max_bytes": int(nz.max()) if len(nz) else 0,
        "min_bytes": int(nz.min()) if len(nz) else 0,
        "total_bytes": int(values.sum()),
    }


def rel95(samples: int) -> float | None:
    return None if not samples else 1.96 / math.sqrt(samples)


def cell_detail(cells: pa.Table, layout: Layout, level: str, src: str, dst: str, start_ms: int, end_ms: int) -> dict:
    cells = filter_cells(cells, level, None)
    if level == "rack":  # the nodes of those racks first, then relabel the few rows left
        nodes = [n.name for n in layout.nodes]
        s_nodes = [x for x in nodes if layout.rack_of(x) == src] if src != UNKNOWN else None
        d_nodes = [x for x in nodes if layout.rack_of(x) == dst] if dst != UNKNOWN else None
        if s_nodes is not None:
            cells = cells.filter(pc.is_in(_plain(cells.column("src")), pa.array(s_nodes, pa.string())))
        if d_nodes is not None:
            cells = cells.filter(pc.is_in(_plain(cells.column("dst")), pa.array(d_nodes, pa.string())))
        cells = _as_level(cells, level, layout)
    cells = cells.filter(pc.and_(pc.equal(_plain(cells.column("src")), src), pc.equal(_plain(cells.column("dst")), dst)))
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
    """Group-to-group (or rack/node) flows by category for a Sankey, and the top talkers; the rest folded into
    one ``(others)`` entry (named apart from the app category ``other``)."""
    duration_s = max(1e-3, (end_ms - start_ms) / 1000.0)
    flows = filter_cells(cells, level, categories)
    links: list[dict] = []
    if flows.num_rows:
        per_cat = []
        for cat in pc.unique(_plain(flows.column("category"))).to_pylist():
            sub = flows.filter(pc.equal(_plain(flows.column("category")), cat))
            labels, b, _smp = pair_sums(sub, layout, level)
            k = len(labels)
            for f in np.flatnonzero(b):
                per_cat.append((int(b[f]), labels[f // k], labels[f % k], cat))
        per_cat.sort(key=lambda r: (-r[0], r[1], r[2], r[3]))
        for b, src, dst, cat in per_cat[:n]:
            links.append({"src": src, "dst": dst, "category": cat, "bytes_est": b, "rate_bps": b * 8 / duration_s})
        rest = per_cat[n:]
        if rest:
            b = sum(r[0] for r in rest)
            links.append({"src": OTHERS, "dst": OTHERS, "category": OTHERS, "bytes_est": b,
                          "rate_bps": b * 8 / duration_s, "folded": len(rest)})
    talkers: list[dict] = []
    node = filter_cells(cells, "node", categories)
    if node.num_rows:
        labels, b, _smp = pair_sums(node, layout, "node")
        k = len(labels)
        nzi = np.flatnonzero(b)
        order = nzi[np.lexsort((nzi, -b[nzi]))]  # by bytes descending, then by (src, dst) display order
        for f in order[:n]:
            talkers.append({"src": labels[f // k], "dst": labels[f % k], "bytes_est": int(b[f]),
                            "rate_bps": int(b[f]) * 8 / duration_s})
        if len(order) > n:
            rest = int(b[order[n:]].sum())
            talkers.append({"src": OTHERS, "dst": OTHERS, "bytes_est": rest, "rate_bps": rest * 8 / duration_s,
                            "folded": int(len(order) - n)})
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


def port_entry(layout: Layout, key: tuple[str, int], s: dict, recent: dict[str, int] | None) -> dict:
    """One port as the topology shows it: the node behind it, utilisation vs its negotiated speed, health flags.

    ``s``: its latest state (switch, if_index, time_ms, if_speed, oper_up, util_in, util_out, errors_per_s,
    discards_per_s; empty when none), ``recent``: link event kind -> time of its latest recent event."""
    p = layout.port_by_key.get(key)
    speed_cfg = p.speed_bps if p else None
    if_speed = int(s.get("if_speed") or 0)
    util = max((u for u in (s.get("util_in"), s.get("util_out")) if u is not None), default=None)
    flags = port_health(speed_cfg, if_speed, s.get("oper_up"), s.get("errors_per_s"), s.get("discards_per_s"), recent)
    return {"switch": key[0], "if_index": key[1], "node": p.node if p else "", "speed_bps": speed_cfg,
            "if_speed": if_speed or None, "oper_up": s.get("oper_up"), "util_in": s.get("util_in"),
            "util_out": s.get("util_out"), "util": util, "errors_per_s": s.get("errors_per_s"),
            "discards_per_s": s.get("discards_per_s"), "time_ms": s.get("time_ms") or None, "health": flags,
            "events": sorted((recent or {}).keys())}


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
        switches.setdefault(key[0], []).append(port_entry(layout, key, by_key.get(key, {}), recent_events.get(key)))
    return {"switches": [{"name": name, "ports": ports} for name, ports in switches.items()],
            "thresholds": {"errors_per_s": ERROR_BURST_PER_S, "discards_per_s": DISCARDS_PER_S}}


def node_sums(cells: pa.Table) -> dict[str, tuple[int, int]]:
    """{node: (bytes it sent, bytes it received)} over the node-level cells of ``cells``: every category and
    every peer (in the job or not, named or ``unknown``). A node's cell to itself counts in both.

    Vectorised as :func:`pair_sums`: names dictionary-encoded per chunk, summed with ``np.bincount``.
    """
    cells = filter_cells(cells, "node", None)
    if cells.num_rows == 0:
        return {}
    coded = {c: _chunk_codes(cells.column(c)) for c in ("src", "dst")}
    names = sorted({x for chunks in coded.values() for _codes, ns in chunks for x in ns})
    index = {x: i for i, x in enumerate(names)}
    b = cells.column("bytes_est").to_numpy().astype(np.float64)
    sent = np.bincount(_indexed(coded["src"], str, index), weights=b, minlength=len(names))
    recv = np.bincount(_indexed(coded["dst"], str, index), weights=b, minlength=len(names))
    return {x: (int(sent[i]), int(recv[i])) for i, x in enumerate(names)}


def job_nodes(layout: Layout, job: str, scores: list[dict]) -> list[str]:
    """A job's nodes in inventory (ring) order, then nodes only its straggler scores name, sorted."""
    nodes = list(layout.jobs.get(job, []))
    return nodes + sorted({s["node"] for s in scores} - set(nodes))


def window_traffic(nodes: list[str], windows: list[tuple[int, int, dict[str, tuple[int, int]]]]) -> dict:
    """Each of ``nodes``' send and receive rate per live matrix window, from :meth:`LiveStore.node_totals`
    ((start, end, {node: (sent, received bytes)}) per window held): all the node's traffic, 0 in a held window
    without any. ``t``: window starts; each rate is over its own window's duration."""
    t = [int(s) for s, _e, _tot in windows]
    out = []
    for n in nodes:
        sent, recv = [], []
        for s, e, tot in windows:
            dur = max(1e-3, (e - s) / 1000.0)
            b = tot.get(n, (0, 0))
            sent.append(b[0] * 8 / dur)
            recv.append(b[1] * 8 / dur)
        out.append({"node": n, "sent_bps": sent, "recv_bps": recv})
    bin_ms = int(windows[-1][1] - windows[-1][0]) if windows else None
    return {"scope": "all", "t": t, "bin_ms": bin_ms, "nodes": out}


def binned_traffic(nodes: list[str], rows: list[dict], lo: int, hi: int, bin_ms: int, bucket_ms: int = 1) -> dict:
    """Each of ``nodes``' send and receive rate per time bin over [lo, hi) from the archive's per-(bin, node)
    byte sums (``rows``: {t, node, sent, recv}, :meth:`History.node_traffic`); every bin of the range, 0 where
    a node has no row. The data covers the buckets starting in [lo, hi) (``bucket_ms``: the rollup's bucket,
    1 for the raw flows), so a bin at an edge of the range is divided by the part of it that is covered."""
    c_lo, c_hi = -(-lo // bucket_ms) * bucket_ms, -(-hi // bucket_ms) * bucket_ms
    first, last = c_lo // bin_ms * bin_ms, (c_hi - 1) // bin_ms * bin_ms
    t = list(range(first, last + 1, bin_ms)) if c_hi > c_lo else []
    k = {x: i for i, x in enumerate(t)}
    dur = np.array([(min(x + bin_ms, c_hi) - max(x, c_lo)) / 1000.0 for x in t], dtype=np.float64)
    index = {n: i for i, n in enumerate(nodes)}
    sent = np.zeros((len(nodes), len(t)))
    recv = np.zeros((len(nodes), len(t)))
    for r in rows:
        i, j = index.get(r["node"]), k.get(int(r["t"]))
        if i is None or j is None:
            continue
        sent[i, j] += r["sent"]
        recv[i, j] += r["recv"]
    sent = sent * 8 / dur if len(t) else sent
    recv = recv * 8 / dur if len(t) else recv
    return {"scope": "all", "t": t, "bin_ms": int(bin_ms),
            "nodes": [{"node": n, "sent_bps": sent[i].tolist(), "recv_bps": recv[i].tolist()}
                      for i, n in enumerate(nodes)]}


def job_view(layout: Layout, job: str, scores: list[dict], phases: list[dict], bin_ms: int, period_ms: float | None,
             patterns: list[dict], traffic: dict | None = None) -> dict:
    """Per node sent/received bytes per window (small multiples), straggler scores, period and phase bands.

    ``nodes``: the rates the straggler scores carry (collective/RoCEv2 traffic to the job's peers; none for a
    job the straggler detector does not score); ``traffic`` (:func:`window_traffic` or :func:`binned_traffic`):
    each node's send and receive rate over all its traffic, for every job with nodes."""
    nodes = job_nodes(layout, job, scores)
    series: dict[str, dict] = {n: {"node": n, "t": [], "sent_bps": [], "recv_bps": [], "score": [], "straggler": []}
                               for n in nodes}
    latest: dict[tuple[str, int], dict] = {}  # a window scored twice (a re-delivered output): the last one
    for s in scores:
        latest[(s["node"], s["window_start_ms"])] = s
    for s in sorted(latest.values(), key=lambda s: s["window_start_ms"]):
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
            "iteration_period_ms": period_ms, "pattern_period_ms": {"baseline": baseline, "current": current},
            "traffic": traffic if traffic is not None else window_traffic(nodes, [])}


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
