"""Scores ``fabricflow compare`` on scenarios whose simulation has a change mid-run (bench/detection.py).

The truth comes from the scenario, not from compare: a change mark on a job at ``at_s`` where one of the job's
faults ends at that moment removed a fault, so compare around that marker must say ``improved`` on at least one
metric of the job and ``worse`` on none; a fault starting there, ``worse`` and nothing improved; neither, no verdict
at all. Every other job of the scenario, compared over the same two periods, must come out ``no significant
change`` on every metric (a false verdict otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CHANGED = ("improved", "worse")


@dataclass
class CompareOutcome:
    """One job compared around one change marker of a scenario run."""

    job: str
    expected: str  # improved | worse | no significant change
    changed: dict[str, list[str]] = field(default_factory=dict)  # verdict -> ["entity metric", ...]
    metrics: int = 0
    error: str | None = None

    @property
    def correct(self) -> bool:
        if self.error:
            return False
        if self.expected == "no significant change":
            return not self.changed
        other = "worse" if self.expected == "improved" else "improved"
        return bool(self.changed.get(self.expected)) and not self.changed.get(other)

    def line(self) -> str:
        got = "; ".join(f"{v}: {', '.join(ms)}" for v, ms in sorted(self.changed.items())) or "no significant change"
        if self.error:
            got = f"error: {self.error}"
        mark = "ok" if self.correct else "WRONG"
        return f"{self.job:<10} expected {self.expected:<22} got {got} ({self.metrics} metrics) [{mark}]"

    def as_dict(self) -> dict:
        return {"job": self.job, "expected": self.expected, "changed": self.changed, "metrics": self.metrics,
                "error": self.error, "correct": self.correct}


def expected_verdict(doc: dict, change: dict) -> str:
    """What compare should say about the job of ``change``, from the scenario's faults on that job."""
    at = float(change["at_s"])
    job = change.get("job")
    faults = [f for f in doc["simulation"].get("faults") or [] if f.get("job") == job]
    if any(abs(float(f.get("end_s", -1)) - at) < 1e-6 for f in faults):
        return "improved"
    if any(abs(float(f.get("start_s", -1)) - at) < 1e-6 for f in faults):
        return "worse"
    return "no significant change"


def _outcome(q, job: str, expected: str, before=None, after=None) -> tuple[CompareOutcome, dict | None]:
    from query.compare.report import CompareError, CompareRequest, build_report

    out = CompareOutcome(job, expected)
    try:
        rep = build_report(q, CompareRequest("job", job, before, after))
    except CompareError as e:
        out.error = str(e)
        return out, None
    out.metrics = sum(1 for r in rep["metrics"] if r["verdict"] != "no verdict")
    for r in rep["metrics"]:
        if r["verdict"] in CHANGED:
            out.changed.setdefault(r["verdict"], []).append(f"{r['entity']} {r['metric']}")
    return out, rep


def score_changes(doc: dict, archive: Path) -> list[CompareOutcome]:
    """Compare every job of the scenario around each of its job change markers (archive: a local directory)."""
    import fsspec

    from query.reports import ArchiveQuery

    q = ArchiveQuery(fsspec.filesystem("file"), str(archive))
    jobs = [j["name"] for j in doc.get("jobs") or []]
    outcomes: list[CompareOutcome] = []
    for change in doc["simulation"].get("changes") or []:
        job = change.get("job")
        if not job:
            continue
        first, rep = _outcome(q, job, expected_verdict(doc, change))
        outcomes.append(first)
        if rep is None:
            continue
        before = (rep["before"]["from_ms"], rep["before"]["to_ms"])
        after = (rep["after"]["from_ms"], rep["after"]["to_ms"])
        outcomes.extend(_outcome(q, other, "no significant change", before, after)[0] for other in jobs if other != job)
    return outcomes


def compare_scenario(path: Path, seed: int | None, state_dir: Path) -> list[tuple[str, CompareOutcome]]:
    """A scenario file with job change marks: backfilled into ``state_dir``, then :func:`score_changes`.
    ``[]`` for a scenario without them. Each outcome is labelled ``name@seed``."""
    import yaml

    from devtools.scenario_archive import backfill_scenario

    doc = yaml.safe_load(Path(path).read_text())
    if not any(c.get("job") for c in doc["simulation"].get("changes") or []):
        return []
    archive, _inv = backfill_scenario(doc, state_dir / f"compare-{seed}", seed)
    label = Path(path).stem + (f"@{seed}" if seed is not None else "")
    return [(label, o) for o in score_changes(doc, archive)]
