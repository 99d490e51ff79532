"""Training steps aligned with the flows: each step (from the job's step marks) gets the time and bytes it spent
in communication and in I/O (dataset reads, checkpoint writes), from the training timeline's phase segments.

A step whose communication phase stretched is flagged by a robust rule over the steps compared together: its
communication time exceeds the median step's by more than ``max(STRETCH_REL x median, STRETCH_Z x 1.4826 x MAD,
2 x the timeline's slot)`` (a phase's edges are known to a slot each)
(docs/closed-loop.md, "Steps"). Without step marks nothing here applies and the timeline stands alone.
"""

from __future__ import annotations

import numpy as np

from .data import Period, Series, query_rows

__all__ = ["STRETCH_REL", "STRETCH_Z", "align", "flag_stretched", "phase_segments", "step_intervals", "step_series",
           "step_table"]

STRETCH_REL = 0.25
STRETCH_Z = 3.0
IO_PHASES = ("dataset_read", "checkpoint_write")

_SEGMENTS = """
    SELECT window_start_ms, slot_ms, phases FROM patterns
    WHERE kind = 'pattern_timeline' AND job = $job AND window_start_ms >= $t0 AND window_start_ms < $t1
    ORDER BY window_start_ms"""
_MARKS = """
    SELECT time_ms, event, step FROM step_marks
    WHERE job = $job AND time_ms >= $t0 AND time_ms < $t1 ORDER BY time_ms, step"""


def step_intervals(marks: list[dict]) -> list[dict]:
    """``[{"step", "start_ms", "end_ms"}]`` from step_start / step_end marks, by start time. A step ends at its
    step_end, else at the next step's start; a step with neither is left out."""
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for m in marks:
        step = m.get("step", -1)
        if step is None or step < 0:
            continue
        if m["event"] == "step_start":
            starts.setdefault(int(step), int(m["time_ms"]))
        elif m["event"] == "step_end":
            ends[int(step)] = int(m["time_ms"])
    order = sorted(starts.items(), key=lambda kv: (kv[1], kv[0]))
    out = []
    for i, (step, t) in enumerate(order):
        end = ends.get(step)
        if end is None and i + 1 < len(order):
            end = order[i + 1][1]
        if end is not None and end > t:
            out.append({"step": step, "start_ms": t, "end_ms": end})
    return out


def phase_segments(q, job: str, lo: int, hi: int) -> tuple[list[tuple[str, int, int, int]], int]:
    """((phase, start, end, bytes) of the job's timeline segments in [lo, hi), the timeline's slot ms)."""
    out = []
    slot = 0
    for r in query_rows(q, _SEGMENTS, lo, hi, {"t0": lo, "t1": hi, "job": job}):
        slot = max(slot, int(r["slot_ms"] or 0))
        for s in r["phases"] or []:
            if s["phase"] != "idle":
                out.append((s["phase"], int(s["start_ms"]), int(s["end_ms"]), int(s["bytes_est"])))
    return out, slot


def _union_ms(spans: list[tuple[int, int]]) -> int:
    total, cur = 0, None
    for a, b in sorted(spans):
        if cur is None or a > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0)


def align(steps: list[dict], segments: list[tuple[str, int, int, int]]) -> list[dict]:
    """Each step with ``comm_ms``, ``comm_bytes``, ``io_ms``, ``io_bytes`` (a segment's bytes are shared out in
    proportion to its overlap with the step)."""
    segs = sorted(segments, key=lambda s: s[1])
    starts = np.array([s[1] for s in segs], dtype=np.int64)
    out = []
    for st in steps:
        a, b = st["start_ms"], st["end_ms"]
        i = max(0, int(np.searchsorted(starts, a, side="right")) - 64)  # segments are short: look a little back
        comm, io = [], []
        comm_b = io_b = 0.0
        for ph, s0, s1, nb in segs[i:]:
            if s0 >= b:
                break
            lo, hi = max(a, s0), min(b, s1)
            if hi <= lo:
                continue
            share = nb * (hi - lo) / max(1, s1 - s0)
            if ph == "communication":
                comm.append((lo, hi))
                comm_b += share
            elif ph in IO_PHASES:
                io.append((lo, hi))
                io_b += share
        out.append({**st, "duration_ms": b - a, "comm_ms": _union_ms(comm), "comm_bytes": int(round(comm_b)),
                    "io_ms": _union_ms(io), "io_bytes": int(round(io_b))})
    return out


def flag_stretched(rows: list[dict], resolution_ms: int = 0) -> list[dict]:
    """Set ``stretched`` on each aligned step (the robust rule of this module's docstring); returns ``rows``.
    ``resolution_ms``: the phase segments' slot; a step's phase edges are only known to a slot each, so the
    limit is at least two slots above the median."""
    comm = np.array([r["comm_ms"] for r in rows if r["comm_ms"] > 0], dtype=float)
    if len(comm) < 5:
        for r in rows:
            r["stretched"] = False
        return rows
    med = float(np.median(comm))
    mad = float(np.median(np.abs(comm - med)))
    limit = med + max(STRETCH_REL * med, STRETCH_Z * 1.4826 * mad, 2.0 * resolution_ms)
    for r in rows:
        r["stretched"] = bool(r["comm_ms"] > limit)
        r["comm_limit_ms"] = limit
    return rows


def step_table(q, job: str, lo: int, hi: int) -> list[dict]:
    """The job's steps in [lo, hi), aligned and flagged (empty without step marks)."""
    steps = step_intervals(query_rows(q, _MARKS, lo, hi, {"t0": lo, "t1": hi, "job": job}))
    if not steps:
        return []
    segs, slot = phase_segments(q, job, lo, hi)
    return flag_stretched(align(steps, segs), slot)


def step_series(q, p: Period, job: str, timeline_values: dict | None = None) -> dict[str, Series]:
    """``step_time_ms`` and ``step_comm_ms`` per window (mean over the steps starting in it); nothing without marks."""
    rows = step_table(q, job, p.lo, p.end)
    if not rows:
        return {}
    n = p.n
    dur = [[] for _ in range(n)]
    comm = [[] for _ in range(n)]
    for r in rows:
        k = (r["start_ms"] - p.lo) // p.w
        if 0 <= k < n and r["end_ms"] <= p.end:
            dur[k].append(r["duration_ms"])
            comm[k].append(r["comm_ms"])
    z = np.zeros(n)
    return {"step_time_ms": Series(np.array([np.mean(x) if x else np.nan for x in dur]), z),
            "step_comm_ms": Series(np.array([np.mean(x) if x else np.nan for x in comm]), z)}
