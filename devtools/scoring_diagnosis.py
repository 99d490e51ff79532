"""Score the diagnoses of detections against the simulator's truth labels: per class correct / wrong / undetermined.

Each fault of the truth carries ``diagnosis``: the bottleneck class it physically is
(:func:`devtools.simulator.faults.expected_diagnosis`), or none. A detection matched to a fault by
:func:`devtools.scoring.score_detections` (hit, duplicate, or explained as its consequence) is scored
when its kind is one whose diagnosis can name that fault's class (:data:`SCORED`): its final verdict is
``correct`` when it names the fault's class, ``undetermined`` when it says so, ``wrong`` otherwise (and
``none`` when it carried no diagnosis at all). Pure: records in, counts out. docs/detection-quality.md,
"Diagnosis".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from .scoring import ScoreReport, add_counts

__all__ = ["SCORED", "DiagnosisScore", "score_diagnoses", "merge_diagnoses", "diagnosis_table"]

#: (detection kind, fault kind) pairs whose diagnosis is scored. A discard burst (counters alone cannot tell
#: congestion classes apart) and a straggler caused by an incast's bytes (no class of its own) are not.
SCORED = {
    ("incast", "incast"), ("congestion", "incast"), ("congestion", "congestion"),
    ("straggler", "straggler"), ("straggler", "link_downgrade"), ("straggler", "link_flap"),
    ("link_downgrade", "link_downgrade"), ("error_burst", "link_downgrade"), ("oper_down", "link_flap"),
}  # fmt: skip


@dataclass
class DiagnosisScore:
    expected: str
    correct: int = 0
    wrong: int = 0
    undetermined: int = 0
    none: int = 0
    wrong_as: list[str] = field(default_factory=list)  # "kind entity: said"

    @property
    def scored(self) -> int:
        return self.correct + self.wrong + self.undetermined + self.none

    def add(self, other: "DiagnosisScore") -> None:
        add_counts(self, other)

    def as_dict(self) -> dict:
        return {"expected": self.expected, "correct": self.correct, "wrong": self.wrong,
                "undetermined": self.undetermined, "none": self.none, "wrong_as": list(self.wrong_as)}


def score_diagnoses(report: ScoreReport) -> dict[str, DiagnosisScore]:
    """Per expected class, how the matched detections' final diagnoses came out."""
    out: dict[str, DiagnosisScore] = {}
    for o in report.outcomes:
        f = o.fault
        if o.status not in ("hit", "duplicate", "explained") or f is None or not f.diagnosis:
            continue
        if (o.detection.kind, f.kind) not in SCORED:
            continue
        sc = out.setdefault(f.diagnosis, DiagnosisScore(f.diagnosis))
        said = o.detection.diagnosis
        if not said:
            sc.none += 1
        elif said == f.diagnosis:
            sc.correct += 1
        elif said == "undetermined":
            sc.undetermined += 1
        else:
            sc.wrong += 1
            sc.wrong_as.append(f"{o.detection.kind} {o.detection.entity}: {said}")
    return out


def merge_diagnoses(parts: Iterable[dict[str, DiagnosisScore]]) -> dict[str, DiagnosisScore]:
    tot: dict[str, DiagnosisScore] = defaultdict(lambda: DiagnosisScore(""))
    for part in parts:
        for name, s in part.items():
            t = tot[name]
            t.expected = name
            t.add(s)
    return dict(tot)


def diagnosis_table(scores: dict[str, DiagnosisScore]) -> list[str]:
    """Text table: per expected class, the diagnoses scored and how they came out."""
    lines = [f"    {'expected diagnosis':<34}{'scored':>7}{'correct':>9}{'wrong':>7}{'undet.':>8}{'none':>6}"]
    for name in sorted(scores):
        s = scores[name]
        lines.append(f"    {name:<34}{s.scored:>7}{s.correct:>9}{s.wrong:>7}{s.undetermined:>8}{s.none:>6}")
    return lines
