"""The metrics ``fabricflow compare`` reports: what each measures, its unit, its good direction and the smallest
change that matters in practice. docs/closed-loop.md, "What compare measures", is the same list in prose."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRICS", "Metric", "metrics_for"]


@dataclass(frozen=True)
class Metric:
    """``higher_is_better``: True/False, or None for a metric whose good direction is ambiguous (no verdict).
    A change counts only when ``|change| >= max(min_abs, min_rel * |before|)``."""

    id: str
    label: str
    unit: str
    higher_is_better: bool | None
    min_abs: float
    min_rel: float
    scopes: tuple[str, ...]  # job, node, link, pair
    source: str  # the archive dataset(s) it comes from
    doc: str

    def min_effect(self, before: float | None) -> float:
        return max(self.min_abs, self.min_rel * abs(before or 0.0))


METRICS: tuple[Metric, ...] = (
    Metric("step_time_ms", "step time (step marks)", "ms", False, 20.0, 0.05, ("job",), "step_marks",
           "mean time from one step_start to the next, from the job's step marks"),
    Metric("iteration_period_ms", "iteration period", "ms", False, 50.0, 0.05, ("job",), "patterns",
           "the training timeline's iteration period (autocorrelation of the communication slots), median per window"),
    Metric("comm_bytes_per_s", "communication volume", "B/s", None, 0.0, 0.0, ("job", "node", "pair"),
           "matrix_windows",
           "collective + RoCEv2 bytes inside the job (a node: that it sends) per second; a group pair: all its bytes"),
    Metric("comm_rate_bps", "communication rate while communicating", "bit/s", True, 0.0, 0.10, ("job", "node"),
           "matrix_windows + patterns", "communication bytes over the time the job spends in communication phases"),
    Metric("comm_share", "time in communication", "share", False, 0.02, 0.10, ("job",), "patterns",
           "share of the window in communication phases (training timeline)"),
    Metric("read_share", "time in dataset reads", "share", False, 0.02, 0.10, ("job",), "patterns",
           "share of the window in dataset reads (storage -> job nodes)"),
    Metric("checkpoint_share", "time in checkpoint writes", "share", False, 0.02, 0.10, ("job",), "patterns",
           "share of the window in checkpoint writes (job nodes -> storage)"),
    Metric("step_comm_ms", "communication time per step", "ms", False, 20.0, 0.10, ("job",),
           "step_marks + patterns", "time in communication phases within each step (steps from the marks)"),
    Metric("ecn_ce_share", "ECN-CE share", "share", False, 0.002, 0.20, ("job", "node", "link", "pair"),
           "matrix_windows", "packets marked congestion-experienced / packets (a node: those it receives)"),
    Metric("cnp_share", "CNP share", "share", False, 0.0005, 0.20, ("job", "node", "pair"), "matrix_windows",
           "RoCEv2 congestion notifications / packets (a node: CNPs it sends / packets it receives)"),
    Metric("discards_per_s", "port discards", "1/s", False, 1.0, 0.20, ("job", "node", "link"), "link_health",
           "in + out discards per second on the ports (a job: summed over its nodes' ports)"),
    Metric("errors_per_s", "port errors", "1/s", False, 0.1, 0.20, ("job", "node", "link"), "link_health",
           "in + out errors per second on the ports"),
    Metric("util", "port utilisation", "share", None, 0.0, 0.0, ("link",), "link_health",
           "the larger of in and out utilisation of the port's speed"),
    Metric("incasts_per_min", "incast count", "1/min", False, 0.2, 0.20, ("job", "node", "link"), "incast_events",
           "incast events opened per minute with the job's nodes (the node) as destination"),
    Metric("straggler_score", "straggler score", "z", True, 1.0, 0.0, ("job", "node"), "straggler_scores",
           "the straggler detector's robust z (negative = sends less than its peers); a job: its lowest node"),
    Metric("cross_rack_share", "cross-rack share", "share", False, 0.03, 0.10, ("job", "node"), "matrix_windows",
           "share of the communication bytes between nodes in different racks"),
)

BY_ID = {m.id: m for m in METRICS}


def metrics_for(scope: str) -> list[Metric]:
    """The metrics reported for an entity of ``scope`` (job, node, link, pair), in report order."""
    return [m for m in METRICS if scope in m.scopes]
