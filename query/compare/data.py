"""Per-window values of the compare metrics, read from the archive through the query layer (:mod:`query`).

One :class:`Period` is cut into windows of ``w`` ms; every series is an array with one value per window (NaN where
the window has nothing to measure) and one with the sampling variance of that value. The inputs are the
processors' outputs, not the raw flows: ``matrix_windows`` (node- and group-level cells with their sampled-packet
counts and ECN-CE / CNP estimates), ``patterns`` (the per-window training timeline), ``straggler_scores``,
``incast_events``, ``link_health`` samples and ``step_marks``. Every SQL text is a constant; names and times are
DuckDB parameters.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from query.errors import ArchiveError

__all__ = ["COMM", "Cells", "Period", "Series", "Topology", "incast_counts", "per_second", "port_values", "query_rows",
           "ratio", "read_topology", "straggler_values", "timeline_values"]

COMM = ("collective", "rocev2")

_CELLS = """
    SELECT (window_start_ms - $t0) // $w AS k, src, dst, category, sum(bytes_est)::DOUBLE AS bytes,
           sum(packets_est)::DOUBLE AS packets, sum(samples)::DOUBLE AS samples,
           sum(ecn_ce_packets_est)::DOUBLE AS ce, sum(cnp_packets_est)::DOUBLE AS cnp
    FROM matrix_windows
    WHERE level = $level AND window_start_ms >= $t0 AND window_start_ms < $t1
      AND (list_contains($names, src) OR list_contains($names, dst))
    GROUP BY ALL"""
_WINDOWS = """
    SELECT DISTINCT (window_start_ms - $t0) // $w AS k FROM matrix_windows
    WHERE window_start_ms >= $t0 AND window_start_ms < $t1"""
_TIMELINE = """
    SELECT window_start_ms, window_end_ms, iteration_period_ms, slot_ms, phases, communication_bytes
    FROM patterns WHERE kind = 'pattern_timeline' AND job = $job AND window_start_ms >= $t0 AND window_start_ms < $t1
    ORDER BY window_start_ms"""
_SCORES = """
    SELECT window_start_ms, node, score FROM straggler_scores
    WHERE job = $job AND window_start_ms >= $t0 AND window_start_ms < $t1"""
_INCASTS = """
    SELECT destination, event_id, min(window_start_ms) AS t FROM incast_events
    WHERE state = 'open' AND list_contains($names, destination) AND window_start_ms >= $t0 AND window_start_ms < $t1
    GROUP BY ALL"""
_PORTS = """
    SELECT (time_ms - $t0) // $w AS k, node, switch, if_index,
           avg(in_discards_per_s + out_discards_per_s) AS discards, avg(in_errors_per_s + out_errors_per_s) AS errors,
           avg(greatest(util_in, util_out)) AS util
    FROM link_health
    WHERE kind = 'sample' AND time_ms >= $t0 AND time_ms < $t1
      AND (list_contains($names, node) OR (switch = $switch AND if_index = $if_index))
    GROUP BY ALL"""
_TOPO = """
    SELECT node, job, rack, grp, sum(b) AS b FROM (
      SELECT src_node AS node, src_job AS job, src_rack AS rack, src_group AS grp, bytes_est AS b FROM {dataset}
      UNION ALL
      SELECT dst_node, dst_job, dst_rack, dst_group, bytes_est FROM {dataset})
    WHERE node <> '' GROUP BY ALL"""


@dataclass(frozen=True)
class Period:
    """[lo, hi) cut into windows of ``w`` ms (a last partial window is left out)."""

    lo: int
    hi: int
    w: int

    @property
    def n(self) -> int:
        return max(0, (self.hi - self.lo) // self.w)

    @property
    def end(self) -> int:
        return self.lo + self.n * self.w


@dataclass
class Series:
    """One value per window (NaN = nothing to measure) and its sampling variance."""

    values: np.ndarray
    var: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Series:
        return cls(np.full(n, np.nan), np.zeros(n))


@dataclass
class Topology:
    """Node -> job, rack and group, as the enriched flows name them (the busiest assignment of each node)."""

    job: dict[str, str]
    rack: dict[str, str]
    group: dict[str, str]

    def nodes_of(self, job: str) -> list[str]:
        return sorted(n for n, j in self.job.items() if j == job)


def query_rows(q, query: str, lo: int, hi: int, params: dict):
    """Rows (a list of dicts) or [] when the dataset is missing or has nothing in range."""
    try:
        return q.sql(query, lo, hi, params).to_pylist()
    except ArchiveError:
        return []


def read_topology(q, lo: int, hi: int) -> Topology:
    """Each node's job, rack and group over [lo, hi), from the traffic rollups (else the enriched flows)."""
    dataset = "traffic_1m" if "traffic_1m" in q.datasets else "flows_enriched"
    best: dict[str, tuple[float, str, str, str]] = {}
    for r in query_rows(q, _TOPO.format(dataset=dataset), lo, hi, {}):
        cur = best.get(r["node"])
        if cur is None or r["b"] > cur[0]:
            best[r["node"]] = (r["b"] or 0.0, r["job"] or "", r["rack"] or "", r["grp"] or "")
    return Topology({n: v[1] for n, v in best.items()}, {n: v[2] for n, v in best.items()},
                    {n: v[3] for n, v in best.items()})


def ratio(num: np.ndarray, den: np.ndarray, samples: np.ndarray) -> Series:
    """num/den per window (NaN where den is 0) with the binomial sampling variance p(1-p)/samples."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(den > 0, num / den, np.nan)
        var = np.where((den > 0) & (samples > 0), p * (1 - p) / np.maximum(samples, 1), 0.0)
    return Series(p, np.nan_to_num(var))


def per_second(x: np.ndarray, samples: np.ndarray, seconds: float, have: np.ndarray) -> Series:
    """x per second with the relative sampling error 1/sqrt(samples); NaN in windows without data."""
    v = np.where(have, x / seconds, np.nan)
    var = np.where(samples > 0, v * v / np.maximum(samples, 1), 0.0)
    return Series(v, np.nan_to_num(var))


class Cells:
    """Node-level (or group-level) matrix cells of one period summed per window and (src, dst, category)."""

    def __init__(self, q, p: Period, names: list[str], level: str = "node"):
        self.p = p
        self.rows = query_rows(q, _CELLS, p.lo, p.end, {"t0": p.lo, "t1": p.end, "w": p.w, "level": level,
                                                  "names": names}) if names else []
        self.have = np.zeros(p.n, dtype=bool)
        for r in query_rows(q, _WINDOWS, p.lo, p.end, {"t0": p.lo, "t1": p.end, "w": p.w}):
            if 0 <= r["k"] < p.n:
                self.have[int(r["k"])] = True

    def sums(self, keep) -> dict[str, np.ndarray]:
        """Per-window sums of the cells ``keep(src, dst, category)`` accepts."""
        n = self.p.n
        out = {c: np.zeros(n) for c in ("bytes", "packets", "samples", "ce", "cnp")}
        for r in self.rows:
            k = int(r["k"])
            if 0 <= k < n and keep(r["src"], r["dst"], r["category"]):
                for c in out:
                    out[c][k] += r[c] or 0.0
        return out


def timeline_values(q, p: Period, job: str) -> dict[str, Series]:
    """iteration period, phase shares and communication time per window from the job's timeline records."""
    n = p.n
    periods: list[list[float]] = [[] for _ in range(n)]
    phase_ms = {ph: np.zeros(n) for ph in ("communication", "dataset_read", "checkpoint_write")}
    covered = np.zeros(n)
    slot = np.zeros(n)
    comm_bytes = np.zeros(n)
    for r in query_rows(q, _TIMELINE, p.lo, p.end, {"t0": p.lo, "t1": p.end, "job": job}):
        k = (int(r["window_start_ms"]) - p.lo) // p.w
        if not 0 <= k < n:
            continue
        covered[k] += int(r["window_end_ms"]) - int(r["window_start_ms"])
        slot[k] = max(slot[k], r["slot_ms"] or 0)
        comm_bytes[k] += r["communication_bytes"] or 0
        if (r["iteration_period_ms"] or -1) > 0:
            periods[k].append(float(r["iteration_period_ms"]))
        for seg in r["phases"] or []:
            if seg["phase"] in phase_ms:
                phase_ms[seg["phase"]][k] += int(seg["end_ms"]) - int(seg["start_ms"])
    have = covered > 0
    out = {}
    per = np.array([np.median(x) if x else np.nan for x in periods])
    out["iteration_period_ms"] = Series(per, np.where(np.isfinite(per), slot * slot / 12.0, 0.0))
    for metric, ph in (("comm_share", "communication"), ("read_share", "dataset_read"),
                       ("checkpoint_share", "checkpoint_write")):
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(have, phase_ms[ph] / np.maximum(covered, 1), np.nan)
            nslots = np.where(slot > 0, covered / np.maximum(slot, 1), 1.0)
            var = np.where(have, share * (1 - share) / np.maximum(nslots, 1), 0.0)
        out[metric] = Series(share, np.nan_to_num(var))
    out["_comm_ms"] = Series(np.where(have, phase_ms["communication"], np.nan), np.zeros(n))
    out["_comm_bytes"] = Series(np.where(have, comm_bytes, np.nan), np.zeros(n))
    return out


def straggler_values(q, p: Period, job: str) -> dict[str, Series]:
    """Straggler score per node (mean over the window's detector windows) and the job's lowest node."""
    n = p.n
    per_node: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in range(n)])
    lowest: dict[int, dict[int, float]] = defaultdict(dict)  # k -> detector window -> lowest score
    for r in query_rows(q, _SCORES, p.lo, p.end, {"t0": p.lo, "t1": p.end, "job": job}):
        k = (int(r["window_start_ms"]) - p.lo) // p.w
        s = r["score"]
        if not 0 <= k < n or s is None or not np.isfinite(s):
            continue
        per_node[r["node"]][k].append(float(s))
        ws = int(r["window_start_ms"])
        lowest[k][ws] = min(lowest[k].get(ws, s), s)
    out = {node: Series(np.array([np.mean(x) if x else np.nan for x in ks]), np.zeros(n))
           for node, ks in per_node.items()}
    out[""] = Series(np.array([np.mean(list(lowest[k].values())) if lowest.get(k) else np.nan for k in range(n)]),
                     np.zeros(n))
    return out


def incast_counts(q, p: Period, names: list[str]) -> dict[str, np.ndarray]:
    """Incast events opened per window, by destination."""
    out: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(p.n))
    for r in query_rows(q, _INCASTS, p.lo, p.end, {"t0": p.lo, "t1": p.end, "names": names}) if names else []:
        k = (int(r["t"]) - p.lo) // p.w
        if 0 <= k < p.n:
            out[r["destination"]][k] += 1
    return out


def port_values(q, p: Period, names: list[str], switch: str = "", if_index: int = -1) -> dict[tuple, dict[str, np.ndarray]]:
    """Per port (switch, if_index, node): discards/s, errors/s and utilisation per window (NaN without samples)."""
    out: dict[tuple, dict[str, np.ndarray]] = {}
    rows = query_rows(q, _PORTS, p.lo, p.end, {"t0": p.lo, "t1": p.end, "w": p.w, "names": names, "switch": switch,
                                           "if_index": int(if_index)})
    for r in rows:
        k = int(r["k"])
        if not 0 <= k < p.n:
            continue
        key = (r["switch"], int(r["if_index"]), r["node"] or "")
        d = out.setdefault(key, {c: np.full(p.n, np.nan) for c in ("discards", "errors", "util")})
        for c in d:
            d[c][k] = r[c] if r[c] is not None else np.nan
    return out
