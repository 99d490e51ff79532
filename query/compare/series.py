"""The compare metrics of each scope, window by window, from the readers of :mod:`query.compare.data`."""

from __future__ import annotations

import numpy as np

from .data import (COMM, Cells, Period, Series, Topology, incast_counts, per_second, port_values, ratio,
                   straggler_values, timeline_values)
from .steps import step_series

__all__ = ["job_series", "link_series", "node_series", "pair_series", "series_for"]

Result = dict[tuple[str, str], dict[str, Series]]


def _sum_ports(ports: dict, node: str | None, column: str, n: int) -> np.ndarray:
    """Per window: ``column`` summed over the ports of ``node`` (all ports when None); NaN where none had a sample."""
    arrs = [d[column] for (_sw, _if, nd), d in ports.items() if node is None or nd == node]
    if not arrs:
        return np.full(n, np.nan)
    stack = np.vstack(arrs)
    out = np.nansum(stack, axis=0)
    return np.where(np.all(np.isnan(stack), axis=0), np.nan, out)


def _incast_rate(counts: np.ndarray, p: Period) -> Series:
    minutes = p.w / 60_000
    return Series(counts / minutes, counts / (minutes * minutes))


def _rate_while(bytes_: np.ndarray, samples: np.ndarray, comm_ms: np.ndarray) -> Series:
    """bit/s over the time in communication phases (NaN where there was none)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(comm_ms > 0, 8.0 * bytes_ / (comm_ms / 1000.0), np.nan)
        var = np.where(samples > 0, rate * rate / np.maximum(samples, 1), 0.0)
    return Series(rate, np.nan_to_num(var))


def _traffic_metrics(cells: Cells, p: Period, sent, received, cnp_cells, rack_of: dict, comm_ms) -> dict[str, Series]:
    """Volume, rate, ECN-CE, CNP and cross-rack share of one entity from its cell filters."""
    seconds = p.w / 1000.0
    s = cells.sums(sent)
    r = cells.sums(received)
    c = cells.sums(cnp_cells)
    cross = cells.sums(lambda a, b, cat: sent(a, b, cat) and rack_of.get(a, "") != rack_of.get(b, ""))
    out = {
        "comm_bytes_per_s": per_second(s["bytes"], s["samples"], seconds, cells.have),
        "ecn_ce_share": ratio(r["ce"], r["packets"], r["samples"]),
        "cnp_share": ratio(c["cnp"], r["packets"], r["samples"]),
        "cross_rack_share": ratio(cross["bytes"], s["bytes"], s["samples"]),
    }
    if comm_ms is not None:
        out["comm_rate_bps"] = _rate_while(s["bytes"], s["samples"], comm_ms)
    return out


def _port_metrics(ports: dict, node: str | None, p: Period, counts: np.ndarray | None) -> dict[str, Series]:
    z = np.zeros(p.n)
    out = {"discards_per_s": Series(_sum_ports(ports, node, "discards", p.n), z),
           "errors_per_s": Series(_sum_ports(ports, node, "errors", p.n), z)}
    if counts is not None:
        out["incasts_per_min"] = _incast_rate(counts, p)
    return out


def job_series(q, p: Period, job: str, topo: Topology) -> Result:
    """The job as a whole and each of its nodes."""
    nodes = topo.nodes_of(job)
    if not nodes:
        return {}
    members = set(nodes)
    cells = Cells(q, p, nodes)
    tl = timeline_values(q, p, job)
    comm_ms = tl["_comm_ms"].values
    ports = port_values(q, p, nodes)
    incasts = incast_counts(q, p, nodes)
    scores = straggler_values(q, p, job)

    def inside(a, b, cat):
        return cat in COMM and a in members and b in members

    job_m = _traffic_metrics(cells, p, inside, inside, inside, topo.rack, comm_ms)
    job_m.update({k: v for k, v in tl.items() if not k.startswith("_")})
    job_m.update(_port_metrics(ports, None, p, sum(incasts.values(), np.zeros(p.n))))
    job_m["straggler_score"] = scores.get("", Series.empty(p.n))
    job_m.update(step_series(q, p, job, tl))
    out: Result = {("job", job): job_m}
    for n in nodes:
        out[("node", n)] = _node_metrics(cells, p, n, members, topo, comm_ms, ports, incasts, scores)
    return out


def _node_metrics(cells: Cells, p: Period, n: str, peers: set | None, topo: Topology, comm_ms, ports, incasts,
                  scores) -> dict[str, Series]:
    def peer(x):
        return peers is None or x in peers

    m = _traffic_metrics(
        cells, p,
        sent=lambda a, b, cat: cat in COMM and a == n and peer(b),
        received=lambda a, b, cat: cat in COMM and b == n and peer(a),
        cnp_cells=lambda a, b, cat: cat in COMM and a == n and peer(b),
        rack_of=topo.rack, comm_ms=comm_ms)
    m.update(_port_metrics(ports, n, p, incasts.get(n, np.zeros(p.n))))
    m["straggler_score"] = scores.get(n, Series.empty(p.n))
    return m


def node_series(q, p: Period, node: str, topo: Topology) -> Result:
    """One node: its traffic with its job's peers (any peer when it has no job)."""
    job = topo.job.get(node, "")
    peers = set(topo.nodes_of(job)) if job else None
    cells = Cells(q, p, sorted(peers | {node}) if peers else [node])
    tl = timeline_values(q, p, job) if job else None
    scores = straggler_values(q, p, job) if job else {}
    ports = port_values(q, p, [node])
    incasts = incast_counts(q, p, [node])
    return {("node", node): _node_metrics(cells, p, node, peers, topo, None if tl is None else tl["_comm_ms"].values,
                                          ports, incasts, scores)}


def link_series(q, p: Period, link: str, topo: Topology) -> Result:
    """One switch port (``switch/ifIndex``): its counters and the node behind it."""
    switch, _, idx = link.rpartition("/")
    ports = port_values(q, p, [], switch, int(idx))
    nodes = sorted({nd for (_s, _i, nd) in ports if nd})
    node = nodes[0] if nodes else ""
    m = _port_metrics(ports, None, p, incast_counts(q, p, [node]).get(node, np.zeros(p.n)) if node else None)
    m["util"] = Series(_sum_ports(ports, None, "util", p.n), np.zeros(p.n))
    if node:
        cells = Cells(q, p, [node])
        r = cells.sums(lambda a, b, cat: b == node)
        m["ecn_ce_share"] = ratio(r["ce"], r["packets"], r["samples"])
    return {("link", link): m}


def pair_series(q, p: Period, pair: str) -> Result:
    """A group pair (``A>B``): its group-level matrix cells."""
    a, _, b = pair.partition(">")
    cells = Cells(q, p, [a, b], level="group")
    s = cells.sums(lambda x, y, cat: x == a and y == b)
    return {("pair", pair): {
        "comm_bytes_per_s": per_second(s["bytes"], s["samples"], p.w / 1000.0, cells.have),
        "ecn_ce_share": ratio(s["ce"], s["packets"], s["samples"]),
        "cnp_share": ratio(s["cnp"], s["packets"], s["samples"]),
    }}


def series_for(q, p: Period, scope: str, name: str, topo: Topology) -> Result:
    """(entity kind, entity) -> metric id -> :class:`Series` for one period of one comparison ``scope``:
    ``job`` (the job and each of its nodes), ``node``, ``link`` (``switch/ifIndex``) or ``pair`` (``A>B`` groups)."""
    if scope == "pair":
        return pair_series(q, p, name)
    by_topology = {"job": job_series, "node": node_series, "link": link_series}.get(scope)
    if by_topology is None:
        raise ValueError(f"unknown scope {scope!r}")
    return by_topology(q, p, name, topo)
