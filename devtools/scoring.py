"""Score detections against simulator ground truth: per-detector TP/FP/FN and traffic-matrix error.

Pure: plain records in, plain records out (no Kafka, sockets, clock or files). Used by
``bench/detection.py`` and the end-to-end tests; the truth is the JSON-lines file of
:mod:`devtools.simulator.truth` (:func:`devtools.simulator.truth.read_truth`).
:func:`expected_detections` says what each labelled fault should raise, a detection matches when kind,
entity and evidence time fit (first match TP, later ones duplicates), :func:`explain` applies the
consequence rules to the rest (explained, else FP); :func:`matrix_error` compares estimated node-pair
bytes per window with the truth against the sampling bound 1.96 / sqrt(expected samples). The
fault -> detection table, the matching and consequence rules and the metrics: docs/detection-quality.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

__all__ = [
    "Observed",
    "Fault",
    "Expected",
    "Outcome",
    "DetectorScore",
    "ScoreReport",
    "MatrixReport",
    "UNCOVERED_KINDS",
    "faults_from_truth",
    "expected_detections",
    "entity_tokens",
    "explain",
    "score_detections",
    "truth_matrix",
    "matrix_error",
    "matrix_total_error",
    "merge_scores",
]

# fault kinds no detection topic reports: exporter_loss and clock_skew show in ingest metrics only
UNCOVERED_KINDS = {"exporter_loss", "clock_skew"}


@dataclass(frozen=True)
class Observed:
    """One detection to score. ``time_ms``: evidence time on the scenario clock (event time)."""

    kind: str
    entity: str
    time_ms: int
    summary: str = ""
    explained_by: str = ""  # the product's own cause link (straggler: key ``exporter|if_index`` of a link event)
    diagnosis: str = ""  # the verdict of the detection's final diagnosis ("" when it carried none)


@dataclass(frozen=True)
class Fault:
    index: int
    kind: str
    start_ms: int
    end_ms: int
    entities: Mapping[str, Any]
    params: Mapping[str, Any]
    diagnosis: str | None = None  # the bottleneck class the fault is (truth label), None when none applies


@dataclass(frozen=True)
class Expected:
    """A detection the fault should produce: ``detector`` kind whose entity names all ``tokens``."""

    detector: str
    fault: Fault
    tokens: frozenset[str]

    @property
    def label(self) -> str:
        return f"{self.detector}:{','.join(sorted(self.tokens))}"


@dataclass(frozen=True)
class Outcome:
    """What one detection was: ``hit``, ``duplicate``, ``explained`` or ``false_positive``."""

    detection: Observed
    status: str
    expected: Expected | None = None
    fault: Fault | None = None
    reason: str = ""


def add_counts(into, other) -> None:
    """Add ``other``'s counts and lists to the score ``into`` (same dataclass): every field but the first, its key."""
    for f in fields(into)[1:]:
        setattr(into, f.name, getattr(into, f.name) + getattr(other, f.name))


@dataclass
class DetectorScore:
    detector: str
    tp: int = 0
    fn: int = 0
    fp: int = 0
    duplicates: int = 0
    explained: int = 0
    ttd_windows: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        correct = self.tp + self.duplicates
        return None if correct + self.fp == 0 else correct / (correct + self.fp)

    @property
    def recall(self) -> float | None:
        return None if self.tp + self.fn == 0 else self.tp / (self.tp + self.fn)

    @property
    def median_ttd_windows(self) -> float | None:
        return _median(self.ttd_windows)

    def add(self, other: "DetectorScore") -> None:
        add_counts(self, other)

    def as_dict(self) -> dict:
        return {
            "detector": self.detector, "tp": self.tp, "fp": self.fp, "fn": self.fn,
            "duplicates": self.duplicates, "explained": self.explained,
            "precision": self.precision, "recall": self.recall,
            "median_ttd_windows": self.median_ttd_windows, "ttd_windows": list(self.ttd_windows),
            "missed": list(self.missed), "false_positives": list(self.false_positives),
        }  # fmt: skip


@dataclass
class ScoreReport:
    window_ms: int
    detectors: dict[str, DetectorScore]
    outcomes: list[Outcome]
    expected: list[Expected]
    uncovered: list[Fault]

    def as_dict(self) -> dict:
        return {
            "window_ms": self.window_ms,
            "detectors": {k: v.as_dict() for k, v in sorted(self.detectors.items())},
            "outcomes": [
                {"kind": o.detection.kind, "entity": o.detection.entity, "time_ms": o.detection.time_ms,
                 "status": o.status, "expected": o.expected.label if o.expected else None,
                 "fault": None if o.fault is None else f"{o.fault.kind}#{o.fault.index}", "reason": o.reason}
                for o in self.outcomes
            ],
            "uncovered": [{"kind": f.kind, "start_ms": f.start_ms, "end_ms": f.end_ms} for f in self.uncovered],
        }  # fmt: skip


def _median(xs: Iterable[float]) -> float | None:
    v = sorted(xs)
    if not v:
        return None
    m = len(v) // 2
    return float(v[m]) if len(v) % 2 else (v[m - 1] + v[m]) / 2.0


# --------------------------------------------------------------------------- truth


def _scenario(truth: list[dict]) -> dict:
    for line in truth:
        if line.get("type") == "scenario":
            return line
    raise ValueError("truth has no 'scenario' line")


def faults_from_truth(truth: list[dict]) -> list[Fault]:
    out = []
    for line in truth:
        if line.get("type") == "fault":
            out.append(Fault(len(out), line["kind"], int(line["start_ms"]), int(line["end_ms"]),
                             dict(line.get("entities") or {}), dict(line.get("params") or {}),
                             line.get("diagnosis")))  # fmt: skip
    return out


class _Inventory:
    """Node -> group and job -> nodes from the truth's inventory."""

    def __init__(self, inv: Mapping | None):
        inv = inv or {}
        self.group = {n["name"]: n.get("group", "") for n in inv.get("nodes", [])}
        self.jobs = {j["name"]: list(j.get("nodes", [])) for j in inv.get("jobs", [])}
        self.agent = {s["name"]: s.get("agent", "") for s in inv.get("switches", [])}

    def port_key(self, switch: str, if_index) -> str:
        """The link output key ``exporter|if_index`` of a switch port."""
        return f"{self.agent.get(switch, switch)}|{if_index}"

    def group_of(self, name: str) -> str:
        return self.group.get(name, "unknown")


def entity_tokens(kind: str, entity: str) -> frozenset[str]:
    """Tokens a detection's entity names: alert dedup keys split on ``|`` (rule dropped), else the entity."""
    if "|" in entity:
        parts = entity.split("|")
        if parts and parts[0] == kind:
            parts = parts[1:]
        return frozenset(p for p in parts if p)
    return frozenset([entity])


#: fault kind -> (the detection it should raise, the fault entity that detection names); other kinds: below
_ONE_ENTITY = {
    "straggler": ("straggler", "node"), "incast": ("incast", "destination"), "exfiltration": ("exfiltration", "dst_ip"),
    "off_hours_transfer": ("off_hours_transfer", "src"), "unregistered_host": ("unregistered_host", "src"),
    "lb_skew": ("lb_skew", "node"), "congestion": ("congestion", "job"), "syn_storm": ("conn_storm", "node"),
    "ecmp_polarised": ("uplink_imbalance", "switch"), "placement_spread": ("job_spread", "job"),
    "collectives_invisible": ("collectives_not_visible", "job"),
}


def expected_detections(
    faults: list[Fault], inventory: Mapping | None = None, *, error_burst_per_s: float = 10.0
) -> tuple[list[Expected], list[Fault]]:
    """(expected detections, faults no detection topic covers)."""
    inv = _Inventory(inventory)
    exp: list[Expected] = []
    uncovered: list[Fault] = []
    for f in faults:
        e, p = f.entities, f.params
        if f.kind in _ONE_ENTITY:
            detector, key = _ONE_ENTITY[f.kind]
            exp.append(Expected(detector, f, frozenset([e[key]])))
        elif f.kind == "link_downgrade":
            port = f"{e['switch']}/if{e['if_index']}"
            exp.append(Expected("link_downgrade", f, frozenset([port])))
            if float(p.get("crc_errors_per_s", 0) or 0) >= error_burst_per_s:
                exp.append(Expected("error_burst", f, frozenset([port])))
        elif f.kind == "link_flap":
            exp.append(Expected("oper_down", f, frozenset([f"{e['switch']}/if{e['if_index']}"])))
        elif f.kind == "segmentation_violation":
            exp.append(Expected("segmentation", f, frozenset([inv.group_of(e["src"]), inv.group_of(e["dst"])])))
        elif f.kind == "storage_slowdown":
            if not e.get("network_fault"):  # with a link fault on the storage port: no verdict expected
                exp.append(Expected("storage_bound", f, frozenset([e["node"]])))
        elif f.kind == "rail_degraded":
            exp.append(Expected("rail_imbalance", f, frozenset([e["node"], e["nic"]])))
        else:
            uncovered.append(f)
    return exp, uncovered


def _fault_nodes(f: Fault) -> set[str]:
    e = f.entities
    nodes = set()
    for k in ("node", "destination", "src", "dst"):
        if isinstance(e.get(k), str):
            nodes.add(e[k])
    nodes.update(e.get("sources") or [])
    return nodes


def explain(
    det: Observed,
    faults: list[Fault],
    truth: list[dict],
    inventory: Mapping | None,
    *,
    grace_ms: int,
    consequence_grace_ms: int,
) -> tuple[Fault, str] | None:
    """The injected fault a non-matching detection is a consequence of, and why (None: a false positive).

    Rules (detection time within ``[fault start, fault end + consequence grace]``):
    - ``straggler`` of a node in the job of a ``rail_degraded`` node (its NIC and its peers' sends to it carry
      less);
    - ``straggler`` whose own ``explained_by`` (the product's cause link: an open link event on
      the node's port or on its ring successor's) names the port of a ``link_downgrade`` fault;
    - ``discard_burst`` on the destination port of an ``incast`` fault (the burst overflows it);
    - ``sustained_utilisation`` of a port that a ``link_downgrade`` or ``incast`` fault is on;
    - ``pattern_deviation`` of job J: any fault naming a node of J, or J itself;
    - ``checkpoint_late`` / ``checkpoint_missing``: a ``storage_slowdown`` fault, or a ``clock_skew``
      fault (an exporter whose clock runs ahead pushes the policy watermark, so checkpoint bytes
      from the other exporters land in buckets already final);
    - ``off_hours_transfer`` from node S: an ``exfiltration`` / ``segmentation_violation``
      fault from S (a bulk transfer at night is off-hours too);
    - ``external_dependency`` / ``segmentation`` naming an address or ``unknown`` group that an
      ``exfiltration`` / ``unregistered_host`` fault introduces.
    """
    inv = _Inventory(inventory)
    toks = entity_tokens(det.kind, det.entity)
    t = det.time_ms
    for f in faults:
        lo, hi = f.start_ms, f.end_ms + consequence_grace_ms
        if not lo <= t <= hi:
            continue
        e = f.entities
        if det.kind == "straggler" and f.kind in ("link_downgrade", "link_flap"):
            if det.explained_by and det.explained_by == inv.port_key(e["switch"], e["if_index"]):
                what = "was downgraded" if f.kind == "link_downgrade" else "flapped"
                return f, f"explained_by {det.explained_by}: link {e['switch']}/if{e['if_index']} of {e['node']} {what}"
        elif det.kind == "straggler" and f.kind == "incast" and f.params.get("transport") == "roce":
            members = next((set(m) for m in inv.jobs.values() if det.entity in m), set())
            if e["destination"] in members and set(e["sources"]) & members:
                return f, (f"the RoCEv2 incast of its job into {e['destination']} inflates its peers' busiest-link "
                           "bytes (the straggler detector compares busiest links)")
        elif det.kind == "straggler" and f.kind == "rail_degraded":
            members = next((set(m) for m in inv.jobs.values() if e["node"] in m), set())
            if det.entity in members:
                return f, (f"{e['node']}'s rail-{e['rail']} NIC carries less: the node, and its job peers sending to it on "
                           "that rail, send less")
        elif det.kind == "congestion" and f.kind == "incast" and float(f.params.get("ce_fraction", 0) or 0) > 0:
            members = set(inv.jobs.get(next(iter(toks - {"ecn_ce", "cnp"}), ""), []))
            if e["destination"] in members:
                return f, f"the incast into {e['destination']} is CE-marked: its job's ECN-CE / CNP shares rise"
        elif det.kind == "discard_burst" and f.kind == "incast":
            if det.entity == f"{e.get('switch')}/if{e.get('if_index')}":
                return f, f"the incast to {e['destination']} overflows its port"
        elif det.kind == "sustained_utilisation" and f.kind in ("link_downgrade", "incast"):
            if det.entity == f"{e.get('switch')}/if{e.get('if_index')}":
                return f, f"port carries the {f.kind} fault"
        elif det.kind == "pattern_deviation":
            members = set(inv.jobs.get(det.entity, []))
            if e.get("job") == det.entity or members & _fault_nodes(f):
                return f, f"{f.kind} touches job {det.entity}"
        elif det.kind in ("checkpoint_late", "checkpoint_missing") and f.kind == "storage_slowdown":
            return f, "storage slowed down"
        elif det.kind in ("checkpoint_late", "checkpoint_missing") and f.kind == "clock_skew":
            return f, f"exporter {e.get('exporter')}'s clock is off: record times (and the watermark) move"
        elif det.kind == "off_hours_transfer" and f.kind in ("exfiltration", "segmentation_violation"):
            if e.get("src") in toks:
                return f, f"the {f.kind} transfer from {e.get('src')} runs off hours"
        elif det.kind in ("external_dependency", "segmentation") and f.kind in ("exfiltration", "unregistered_host"):
            if (e.get("dst_ip") in toks) or (e.get("src") in toks) or ("unknown" in toks):
                return f, f"address introduced by the {f.kind} fault"
    return None


# --------------------------------------------------------------------------- scoring


def score_detections(
    detections: Iterable[Observed],
    truth: list[dict],
    *,
    window_ms: int | None = None,
    early_ms: int | None = None,
    grace_windows: float = 3.0,
    consequence_grace_windows: float = 6.0,
    error_burst_per_s: float = 10.0,
) -> ScoreReport:
    """Match detections (on the scenario clock) to the truth's faults (rules: docs/detection-quality.md).

    ``window_ms``: the unit of time to detect (default: the truth's window).
    ``early_ms``: how far before a fault's start a detection may lie (default one window:
    windowed detectors stamp the window start). ``grace_windows``: how long after a fault's
    end a detection still matches it.
    """
    scen = _scenario(truth)
    window_ms = int(window_ms or scen.get("window_ms") or 10_000)
    early = window_ms if early_ms is None else int(early_ms)
    grace = int(grace_windows * window_ms)
    cgrace = int(consequence_grace_windows * window_ms)
    inventory = scen.get("inventory")
    faults = faults_from_truth(truth)
    expected, uncovered = expected_detections(faults, inventory, error_burst_per_s=error_burst_per_s)
    scores: dict[str, DetectorScore] = {}

    def sc(name: str) -> DetectorScore:
        return scores.setdefault(name, DetectorScore(name))

    for e in expected:
        sc(e.detector)
    first: dict[int, Observed] = {}
    outcomes: list[Outcome] = []
    for d in sorted(detections, key=lambda d: (d.time_ms, d.kind, d.entity)):
        toks = entity_tokens(d.kind, d.entity)
        cands = [
            (i, e) for i, e in enumerate(expected)
            if e.detector == d.kind and e.tokens <= toks
            and e.fault.start_ms - early <= d.time_ms <= e.fault.end_ms + grace
        ]  # fmt: skip
        fresh = [(i, e) for i, e in cands if i not in first]
        if fresh:
            i, e = fresh[0]
            first[i] = d
            outcomes.append(Outcome(d, "hit", e, e.fault))
            s = sc(d.kind)
            s.tp += 1
            s.ttd_windows.append(max(0.0, (d.time_ms - e.fault.start_ms) / window_ms))
            continue
        if cands:
            i, e = cands[0]
            outcomes.append(Outcome(d, "duplicate", e, e.fault))
            sc(d.kind).duplicates += 1
            continue
        why = explain(d, faults, truth, inventory, grace_ms=grace, consequence_grace_ms=cgrace)
        if why is not None:
            outcomes.append(Outcome(d, "explained", None, why[0], why[1]))
            sc(d.kind).explained += 1
        else:
            outcomes.append(Outcome(d, "false_positive"))
            s = sc(d.kind)
            s.fp += 1
            s.false_positives.append(f"{d.entity}@{d.time_ms}")
    for i, e in enumerate(expected):
        if i not in first:
            s = sc(e.detector)
            s.fn += 1
            s.missed.append(f"{e.label} ({e.fault.kind} {e.fault.start_ms}-{e.fault.end_ms})")
    return ScoreReport(window_ms, scores, outcomes, expected, uncovered)


# --------------------------------------------------------------------------- traffic matrix


@dataclass
class MatrixReport:
    sampling_rate: int
    min_expected_samples: float
    cells: int = 0                 # (window, src, dst) cells above the floor
    missing: int = 0               # of those, cells with no estimate at all
    median_rel_error: float | None = None
    p90_rel_error: float | None = None
    median_bound95: float | None = None
    within_bound95: float | None = None   # share of cells with |error| <= their own 95 % bound
    median_abs_z: float | None = None     # |error| / sigma; ~0.67 for pure sampling noise
    bias: float | None = None             # sum(estimate) / sum(truth) - 1 over the cells
    skipped_windows: int = 0
    worst: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Errors consistent with sampling noise: >= 90 % of cells inside their 95 % bound."""
        return self.within_bound95 is not None and self.within_bound95 >= 0.90

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in (
            "sampling_rate", "min_expected_samples", "cells", "missing", "median_rel_error", "p90_rel_error",
            "median_bound95", "within_bound95", "median_abs_z", "bias", "skipped_windows", "worst")}  # fmt: skip
        d["ok"] = self.ok
        return d


def truth_matrix(truth: list[dict]) -> dict[int, dict[tuple[str, str], tuple[int, int]]]:
    """window start -> (src, dst) -> (bytes, packets), endpoints as in the truth."""
    out: dict[int, dict[tuple[str, str], tuple[int, int]]] = {}
    for line in truth:
        if line.get("type") == "window":
            pairs = line["pairs"]
            out[int(line["start_ms"])] = {(p["src"], p["dst"]): (int(p["bytes"]), int(p["packets"])) for p in pairs}
    return out


def matrix_error(
    estimated: Mapping[int, Mapping[tuple[str, str], float]],
    truth: list[dict],
    *,
    sampling_rate: int | None = None,
    min_expected_samples: float = 100.0,
    exclude: Iterable[tuple[int, int]] = (),
    nodes_only: bool = True,
    worst: int = 5,
) -> MatrixReport:
    """Relative error of estimated node -> node bytes per window against the truth.

    ``estimated``: window start (ms, aligned like the truth's windows) -> (src, dst) -> bytes.
    ``sampling_rate``: 1-in-N of the estimate (default: the truth's sFlow rate).
    ``min_expected_samples``: volume floor, truth packets / N (100 -> 95 % bound 19.6 %).
    ``exclude``: ``(start_ms, end_ms)`` intervals whose windows are skipped (e.g. exporter loss).
    ``nodes_only``: compare only pairs of inventory nodes (the matrix folds the rest into 'unknown').
    """
    scen = _scenario(truth)
    n = int(sampling_rate or scen.get("sflow_sampling_rate") or 1)
    nodes = set(_Inventory(scen.get("inventory")).group)
    excl = list(exclude)
    rep = MatrixReport(n, float(min_expected_samples))
    errs: list[float] = []
    bounds: list[float] = []
    zs: list[float] = []
    inside = 0
    sum_est = 0.0
    sum_true = 0.0
    rows = []
    for ws, cells in sorted(truth_matrix(truth).items()):
        we = ws + int(scen.get("window_ms") or 10_000)
        if any(ws < b and we > a for a, b in excl):
            rep.skipped_windows += 1
            continue
        est = estimated.get(ws, {})
        for (src, dst), (b, pk) in cells.items():
            if nodes_only and (src not in nodes or dst not in nodes):
                continue
            c = pk / n
            if b <= 0 or c < min_expected_samples:
                continue
            e = float(est.get((src, dst), 0.0))
            rel = (e - b) / b
            sigma = 1.0 / math.sqrt(c)
            rep.cells += 1
            rep.missing += int(e == 0.0)
            errs.append(abs(rel))
            bounds.append(1.96 * sigma)
            zs.append(abs(rel) / sigma)
            inside += int(abs(rel) <= 1.96 * sigma)
            sum_est += e
            sum_true += b
            rows.append({"window_start_ms": ws, "src": src, "dst": dst, "truth": b, "estimate": e,
                         "rel_error": rel, "bound95": 1.96 * sigma})  # fmt: skip
    if rep.cells:
        rep.median_rel_error = _median(errs)
        rep.p90_rel_error = sorted(errs)[min(len(errs) - 1, int(0.9 * len(errs)))]
        rep.median_bound95 = _median(bounds)
        rep.within_bound95 = inside / rep.cells
        rep.median_abs_z = _median(zs)
        rep.bias = sum_est / sum_true - 1.0 if sum_true else None
        rep.worst = sorted(rows, key=lambda r: -abs(r["rel_error"]) / r["bound95"])[:worst]
    return rep


def matrix_total_error(
    estimated: Mapping[tuple[str, str], float],
    truth: list[dict],
    *,
    min_expected_samples: float = 100.0,
    exclude: Iterable[tuple[int, int]] = (),
    worst: int = 5,
) -> MatrixReport:
    """:func:`matrix_error` of whole-run node -> node totals: ``estimated`` is (src, dst) -> bytes over the
    run (e.g. the final values of a counter), compared with the truth's bytes summed over all its windows.

    One cell per pair; ``min_expected_samples`` applies to the pair's packets over the run / N, so the
    95 % bound (1.96 / sqrt(expected samples)) is tighter than per window. Summing over the run also
    removes the window-edge effects of an accelerated replay (events shifted across a window boundary
    still count once). ``exclude`` windows are left out of the truth (their estimates cannot be
    separated from a total: use it only where the estimate has none either).
    """
    scen = _scenario(truth)
    window_ms = int(scen.get("window_ms") or 10_000)
    excl = list(exclude)
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for ws, cells in truth_matrix(truth).items():
        if any(ws < b and ws + window_ms > a for a, b in excl):
            continue
        for key, (b, pk) in cells.items():
            totals[key][0] += b
            totals[key][1] += pk
    start = int(scen.get("start_ms") or 0)
    one_window = [scen, {"type": "window", "start_ms": start, "end_ms": start + window_ms,
                         "pairs": [{"src": s, "dst": d, "bytes": b, "packets": pk}
                                   for (s, d), (b, pk) in sorted(totals.items())]}]  # fmt: skip
    return matrix_error({start: estimated}, one_window, min_expected_samples=min_expected_samples, worst=worst)


def merge_scores(reports: Iterable[ScoreReport]) -> dict[str, DetectorScore]:
    """Per-detector totals over several scenario reports."""
    tot: dict[str, DetectorScore] = defaultdict(lambda: DetectorScore(""))
    for r in reports:
        for name, s in r.detectors.items():
            t = tot[name]
            t.detector = name
            t.add(s)
    return dict(tot)

