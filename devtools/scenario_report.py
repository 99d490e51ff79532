"""Printing and the JSON report of bench/detection.py's scored runs (``RunResult`` of devtools/scenario_run.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from devtools.scoring import MatrixReport
from devtools.scoring_diagnosis import diagnosis_table

__all__ = ["pct", "detector_table", "matrix_line", "print_run", "report_json"]


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _f(x, nd=1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def detector_table(scores: dict) -> list[str]:
    head = (f"    {'detector':<22}{'TP':>4}{'FP':>4}{'FN':>4}{'dup':>5}{'expl':>6}"
            f"{'precision':>11}{'recall':>9}{'ttd(win)':>10}")
    lines = [head]
    for name in sorted(scores):
        s = scores[name]
        lines.append(
            f"    {name:<22}{s.tp:>4}{s.fp:>4}{s.fn:>4}{s.duplicates:>5}{s.explained:>6}"
            f"{pct(s.precision):>11}{pct(s.recall):>9}{_f(s.median_ttd_windows):>10}"
        )
    return lines


def matrix_line(m: MatrixReport) -> str:
    return (
        f"    matrix: {m.cells} cells >= {m.min_expected_samples:g} expected samples, "
        f"median |err| {pct(m.median_rel_error)} "
        f"(median 95% bound {pct(m.median_bound95)}), within bound {pct(m.within_bound95)}, "
        f"median |z| {_f(m.median_abs_z, 2)}, bias {pct(m.bias)}, missing {m.missing}"
        + (f", {m.skipped_windows} windows skipped (exporter loss)" if m.skipped_windows else "")
        + (" OK" if m.ok else " OUTSIDE BOUND")
    )


def print_run(run) -> None:
    seed = f" seed {run.seed}" if run.seed is not None else ""
    print(f"== {run.scenario}{seed}: {run.datagrams} datagrams, {run.wall_s:.0f}s wall, sFlow offsets {run.offsets_ms} ms")
    for line in detector_table(run.score.detectors):
        print(line)
    if run.diagnosis_score:
        for line in diagnosis_table(run.diagnosis_score):
            print(line)
        for s in run.diagnosis_score.values():
            for w in s.wrong_as:
                print(f"    wrong diagnosis (expected {s.expected}): {w}")
    for o in run.score.outcomes:
        if o.status in ("explained", "false_positive"):
            why = f" ({o.reason})" if o.reason else ""
            print(f"    {o.status}: {o.detection.kind} {o.detection.entity} @{o.detection.time_ms}{why}")
    for s in run.score.detectors.values():
        for m in s.missed:
            print(f"    missed: {m}")
    if run.score.uncovered:
        kinds = ", ".join(sorted({f.kind for f in run.score.uncovered}))
        print(f"    not scored (no detector on the output topics): {kinds}")
    print(matrix_line(run.matrix))


def report_json(runs: list, totals: dict) -> dict:
    return {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "scenarios": {
            r.scenario + (f"@{r.seed}" if r.seed is not None else ""): {
                "speed": r.speed, "wall_s": round(r.wall_s, 1), "datagrams": r.datagrams,
                "sflow_offsets_ms": r.offsets_ms,
                "score": r.score.as_dict(), "matrix": r.matrix.as_dict(),
                "diagnoses": {k: v.as_dict() for k, v in sorted((r.diagnosis_score or {}).items())},
                "detections": [{"kind": s.detection.kind, "entity": s.detection.entity, "evidence_ms": s.evidence_ms,
                                "summary": s.detection.summary,
                                "diagnosis": r.diagnoses.get(s.detection.ref)} for s in r.seen],
                "matrix_cells": {str(ws): {f"{a}>{b}": v for (a, b), v in sorted(c.items())}
                                 for ws, c in sorted(r.cells.items())},
            }
            for r in runs
        },
        "totals": {k: v.as_dict() for k, v in sorted(totals.items())},
    }  # fmt: skip
