"""``fabricflow compare``: before vs after a change, per metric, with intervals and verdicts (the report as data).

:func:`build_report` picks the periods (given, or around the latest change marker of the entity), reads the
per-window series of both (:mod:`query.compare.data`), compares each metric of each entity (:mod:`.stats`) with
one Bonferroni family per report, and returns a JSON-ready dict; :mod:`.render` prints it. The events of the two
periods are listed beside the metrics with whatever explanation their records carry (``diagnosis``), so a
verdict and the detections behind it are read together.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from query.errors import ArchiveError
from query.timerange import parse_time

from . import stats
from .data import Period, query_rows, read_topology
from .series import series_for
from .metrics import BY_ID, metrics_for
from .steps import step_table

__all__ = ["CompareError", "CompareRequest", "build_report", "latest_marker", "parse_entity", "SCOPES"]

SCOPES = ("job", "node", "link", "pair")
DEFAULT_MAX_PERIOD_MS = 30 * 60_000
TARGET_WINDOWS = 12
DAY_MS = 86_400_000

_CHANGES = """
    SELECT * EXCLUDE (dt, hour) FROM changes
    WHERE time_ms >= $t0 AND time_ms < $t1 ORDER BY time_ms, mark_id"""
_SPAN = """SELECT min(window_start_ms) AS lo, max(window_end_ms) AS hi FROM matrix_windows"""
# whole records (SELECT *): a column the detectors add later (a ``diagnosis``) comes along without a change here
_EVENTS = {
    "incast": """SELECT * EXCLUDE (dt, hour) FROM incast_events WHERE list_contains($nodes, destination)
                 AND window_start_ms >= $t0 AND window_start_ms < $t1 ORDER BY window_start_ms""",
    "straggler": """SELECT * EXCLUDE (dt, hour) FROM straggler_scores WHERE straggler AND list_contains($nodes, node)
                    AND window_start_ms >= $t0 AND window_start_ms < $t1 ORDER BY window_start_ms""",
    "link": """SELECT * EXCLUDE (dt, hour) FROM link_health WHERE kind <> 'sample' AND list_contains($nodes, node)
               AND time_ms >= $t0 AND time_ms < $t1 ORDER BY time_ms""",
}


class CompareError(Exception):
    """A comparison that cannot be made (one line: no marker, no data, a bad range)."""


@dataclass
class CompareRequest:
    """What to compare. ``before``/``after``: [from, to) in unix ms, or None for the defaults around the latest
    change marker of the entity (or ``at_ms``). ``window_ms``: the comparison window (default: about
    :data:`TARGET_WINDOWS` per period, a multiple of ``base_window_ms``). ``settle_ms``: time after the change
    left out of the after period (default 3 processor windows)."""

    scope: str
    name: str
    before: tuple[int, int] | None = None
    after: tuple[int, int] | None = None
    window_ms: int | None = None
    settle_ms: int | None = None
    base_window_ms: int = 10_000
    at_ms: int | None = None


def parse_entity(scope: str, name: str) -> str:
    """Validate an entity name of ``scope`` (a link is ``switch/ifIndex``, a group pair ``A>B``)."""
    if scope not in SCOPES:
        raise CompareError(f"scope must be one of {', '.join(SCOPES)}")
    if not name or len(name) > 200:
        raise CompareError(f"a {scope} name is required")
    if scope == "link" and not re.fullmatch(r".+/\d+", name):
        raise CompareError(f"--link {name!r}: use SWITCH/IFINDEX, e.g. tor1/4")
    if scope == "pair" and not re.fullmatch(r"[^>]+>[^>]+", name):
        raise CompareError(f"--groups {name!r}: use SRC_GROUP>DST_GROUP, e.g. gpu>storage")
    return name


def _matches(mark: dict, scope: str, name: str, q) -> bool:
    if scope == "job":
        return mark.get("job") == name
    if scope == "node":
        if mark.get("node"):
            return mark["node"] == name
        if not mark.get("job"):
            return False
        t = int(mark["time_ms"])  # a change of the node's job, where the node belonged to it then
        return read_topology(q, t - 3_600_000, t + 3_600_000).job.get(name) == mark["job"]
    if scope == "link":
        sw, _, idx = name.rpartition("/")
        return mark.get("switch") == sw and int(mark.get("if_index", -1)) in (-1, int(idx))
    return f"{mark.get('src_group')}>{mark.get('dst_group')}" == name


def changes_in(q, lo: int, hi: int) -> list[dict]:
    """Every change marker in [lo, hi)."""
    return query_rows(q, _CHANGES, lo, hi, {"t0": lo, "t1": hi})


def latest_marker(q, scope: str, name: str, at_ms: int | None = None) -> dict | None:
    """The latest change marker of the entity (at or before ``at_ms`` when given), looking back 30 days."""
    if "changes" not in q.datasets:
        return None
    hi = at_ms + 1 if at_ms is not None else None
    if hi is None:
        have = q.available("changes")
        if not have:
            return None
        hi = parse_time(have[1]) + DAY_MS
    for m in reversed(changes_in(q, hi - 30 * DAY_MS, hi)):
        if _matches(m, scope, name, q):
            return m
    return None


def _data_span(q, lo: int, hi: int) -> tuple[int, int] | None:
    rows = query_rows(q, _SPAN, lo, hi, {})
    if not rows or rows[0]["lo"] is None:
        return None
    return int(rows[0]["lo"]), int(rows[0]["hi"])


def _periods(q, req: CompareRequest, marker: dict | None) -> tuple[Period, Period, int]:
    base = req.base_window_ms
    settle = req.settle_ms if req.settle_ms is not None else 3 * base
    if req.before and req.after:
        (b0, b1), (a0, a1) = req.before, req.after
        if b1 <= b0 or a1 <= a0:
            raise CompareError("a period's end must be after its start")
        length = min(b1 - b0, a1 - a0)
    else:
        if marker is None:
            raise CompareError(f"no change marker for {req.scope} {req.name}: record one with `fabricflow mark` or "
                               "give --before FROM..TO and --after FROM..TO")
        m = int(marker["time_ms"])
        span = _data_span(q, m - DAY_MS, m + DAY_MS)
        if span is None:
            raise CompareError(f"no matrix windows around the marker at {_iso(m)}")
        length = min(DEFAULT_MAX_PERIOD_MS, m - span[0], span[1] - m - settle)
        if length < 3 * base:
            raise CompareError(f"too little data around the marker at {_iso(m)} (the archive has {_iso(span[0])} .. "
                               f"{_iso(span[1])}); give --before and --after")
        b0, b1 = m - length, m
        a0, a1 = m + settle, m + settle + length
    w = req.window_ms or max(base, (length // TARGET_WINDOWS) // base * base)
    if w <= 0:
        raise CompareError("--window must be positive")
    before = Period(b1 - (b1 - b0) // w * w, b1, w)  # whole windows ending at the change
    after = Period(a0, a0 + (a1 - a0) // w * w, w)
    if before.n < stats.MIN_WINDOWS or after.n < stats.MIN_WINDOWS:
        raise CompareError(f"each period needs at least {stats.MIN_WINDOWS} windows of {w // 1000} s "
                           f"(before has {before.n}, after {after.n}); give longer periods or a smaller --window")
    return before, after, settle


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def _events(q, p: Period, nodes: list[str]) -> list[dict]:
    """Detections of the period on the entity's nodes (an incast per event, a straggler episode per node), with
    the ``diagnosis`` their records carry, if any (the latest one)."""
    if not nodes:
        return []
    merged: dict[tuple, dict] = {}
    for kind, sql in _EVENTS.items():
        for r in query_rows(q, sql, p.lo, p.end, {"nodes": nodes, "t0": p.lo, "t1": p.end}):
            if kind == "incast":
                key, entity, t0, t1 = (kind, r["event_id"]), r["destination"], r["window_start_ms"], r["window_end_ms"]
            elif kind == "straggler":
                key, entity, t0, t1 = (kind, r["node"]), r["node"], r["window_start_ms"], r["window_end_ms"]
            else:
                entity = f"{r.get('switch')}/{r.get('if_index')}"
                key, t0, t1 = (kind, entity, r.get("kind"), r["time_ms"]), r["time_ms"], r["time_ms"]
            e = merged.setdefault(key, {"type": kind, "entity": entity, "start_ms": t0, "end_ms": t1})
            e["start_ms"], e["end_ms"] = min(e["start_ms"], t0), max(e["end_ms"], t1)
            if kind == "link":
                e["subtype"], e["node"] = r.get("kind"), r.get("node")
            if r.get("diagnosis"):
                e["diagnosis"] = r["diagnosis"]
    return sorted(merged.values(), key=lambda e: (e["start_ms"], e["type"], e["entity"]))


def _step_summary(rows: list[dict]) -> dict | None:
    if not rows:
        return None
    dur = [r["duration_ms"] for r in rows]
    comm = [r["comm_ms"] for r in rows]
    return {"steps": len(rows), "median_step_ms": float(sorted(dur)[len(dur) // 2]),
            "median_comm_ms": float(sorted(comm)[len(comm) // 2]),
            "comm_bytes_per_step": sum(r["comm_bytes"] for r in rows) / len(rows),
            "io_ms_per_step": sum(r["io_ms"] for r in rows) / len(rows),
            "io_bytes_per_step": sum(r["io_bytes"] for r in rows) / len(rows),
            "stretched": [r["step"] for r in rows if r.get("stretched")]}


def build_report(q, req: CompareRequest, alpha: float = stats.ALPHA) -> dict:
    """The comparison as a JSON-ready dict (docs/closed-loop.md, "compare --format json")."""
    parse_entity(req.scope, req.name)
    try:
        marker = None
        if not (req.before and req.after):
            marker = latest_marker(q, req.scope, req.name, req.at_ms)
        before, after, settle = _periods(q, req, marker)
        topo = read_topology(q, before.lo, after.end)
    except ArchiveError as e:
        raise CompareError(str(e)) from None
    if req.scope == "job" and not topo.nodes_of(req.name):
        raise CompareError(f"job {req.name!r} has no traffic in the archive between {_iso(before.lo)} and "
                           f"{_iso(after.end)}")
    sb = series_for(q, before, req.scope, req.name, topo)
    sa = series_for(q, after, req.scope, req.name, topo)
    rows = []
    for key in sb.keys() | sa.keys():
        kind, ent = key
        mb, ma = sb.get(key, {}), sa.get(key, {})
        for metric in metrics_for(kind):
            if metric.id not in mb and metric.id not in ma:
                continue
            b = mb.get(metric.id)
            a = ma.get(metric.id)
            c = stats.compare(b.values if b else [], a.values if a else [], b.var if b else None, a.var if a else None)
            rows.append((kind, ent, metric, c))
    family = sum(1 for _k, _e, m, c in rows if m.higher_is_better is not None and c.se is not None)
    out_rows = []
    order = {"job": 0, "link": 0, "pair": 0, "node": 1}
    for kind, ent, metric, c in sorted(rows, key=lambda r: (order[r[0]], r[1], _metric_rank(r[2].id))):
        eff = metric.min_effect(c.before)
        stats.decide(c, family, metric.higher_is_better, eff, alpha)
        out_rows.append({
            "entity_kind": kind, "entity": ent, "metric": metric.id, "label": metric.label, "unit": metric.unit,
            "better": None if metric.higher_is_better is None else ("higher" if metric.higher_is_better else "lower"),
            "before": _num(c.before), "after": _num(c.after), "change": _num(c.change), "relative": _num(c.relative),
            "interval": None if c.low is None else [_num(c.low), _num(c.high)], "level": c.level,
            "verdict": c.verdict, "windows": [c.n_before, c.n_after], "min_effect": eff,
            "autocorr": round(c.autocorr, 3), "df": _num(c.df),
        })
    nodes = _entity_nodes(req, topo, sb)
    steps_b = step_table(q, req.name, before.lo, before.end) if req.scope == "job" else []
    steps_a = step_table(q, req.name, after.lo, after.end) if req.scope == "job" else []
    return {
        "scope": req.scope, "entity": req.name, "marker": marker,
        "before": {"from_ms": before.lo, "to_ms": before.end, "windows": before.n},
        "after": {"from_ms": after.lo, "to_ms": after.end, "windows": after.n},
        "window_ms": before.w, "settle_ms": settle, "alpha": alpha, "family": family,
        "rule": ("interval: Welch t over per-window values (variance >= sampling variance, windows discounted by "
                 f"lag-1 autocorrelation), Bonferroni over {family} comparisons; verdict when the interval excludes "
                 "0 and |change| >= the metric's minimum effect"),
        "metrics": out_rows,
        "steps": None if not (steps_b or steps_a) else {"before": _step_summary(steps_b),
                                                         "after": _step_summary(steps_a)},
        "events": {"before": _events(q, before, nodes), "after": _events(q, after, nodes)},
        "changes": [m for m in changes_in(q, before.lo, after.end)] if "changes" in q.datasets else [],
    }


def _metric_rank(mid: str) -> int:
    return list(BY_ID).index(mid)


def _entity_nodes(req: CompareRequest, topo, series: dict) -> list[str]:
    if req.scope == "job":
        return topo.nodes_of(req.name)
    if req.scope == "node":
        return [req.name]
    return []
