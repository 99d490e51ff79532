"""``job_spread`` alert: a job's collective traffic crosses more racks (and so spines) than its placement needs.

Per closed main window and job, the job's own collective traffic (both ends in the job, categories
``categories``): the racks its nodes are in, against the fewest racks that could hold that many nodes
(per rack: its nodes of the job's node groups, e.g. ``gpu``, that are in no other job at that time, from the
inventory: a management host or a load balancer in the rack cannot hold a rank); and the share of its bytes that leaves a rack (crosses the spine layer of a
two-tier fabric), with its Wilson bounds on the sampled packets. A job spread over more racks than it
needs whose cross-rack share's lower bound is at least ``min_cross_share``, for ``persist_windows``
windows, raises ``job_spread`` (dedup key ``job_spread|job``). The rule, parameters and limits:
docs/detectors.md, "Job placement spread". Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import Condition
from ..diagnosis.catalog import wilson
from ..params import detector_params
from ..windows.interning import Interner
from .baseline import OneRuleDetector

__all__ = ["JobSpreadConfig", "JobSpreadDetector", "racks_needed"]

RULE = "job_spread"


@detector_params
class JobSpreadConfig:
    """Job placement spread parameters (docs/detectors.md, "Job placement spread")."""

    categories: tuple[str, ...] = Field(("collective", "rocev2"), description="App categories of a job's collective traffic")
    slack_racks: int = Field(0, ge=0, description="Racks a job may use beyond the fewest that could hold its nodes")
    min_cross_share: float = Field(0.2, ge=0, le=1, description="Lower 95 % bound of the job's cross-rack byte share needed to count a window")
    min_samples: int = Field(50, ge=1, description="Sampled packets of the job's collective traffic a window needs (fewer: neither adds nor resets evidence)")
    persist_windows: int = Field(3, ge=1, description="Consecutive spread windows before the alert fires")
    resolve_windows: int = Field(6, ge=1, description="Quiet windows before the alert resolves")
    max_racks: int = Field(8, ge=1, description="Racks named in the alert's evidence")
    severity: Literal["info", "warning", "critical"] = Field("info", description="Alert severity (a placement to review, not an outage)")


JobsOf = Callable[[list[str], int], list[str]]  # (node names, time ms) -> the job of each ("" when none)


def racks_needed(nodes: int, rack_sizes: dict[str, int]) -> int:
    """The fewest racks whose node counts add up to ``nodes`` (largest racks first); 0 without rack sizes."""
    total = 0
    for k, size in enumerate(sorted(rack_sizes.values(), reverse=True), 1):
        total += size
        if total >= nodes:
            return k
    return len(rack_sizes)


class JobSpreadDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: JobSpreadConfig = JobSpreadConfig(), window_ms: int = 10_000,
                 rack_nodes: dict[str, list[str]] | None = None, jobs_of: JobsOf | None = None,
                 node_group: dict[str, str] | None = None):
        super().__init__(config, window_ms)
        self.evidence: dict[str, int] = {}
        self.set_racks(rack_nodes or {}, jobs_of, node_group)

    def set_racks(self, rack_nodes: dict[str, list[str]], jobs_of: JobsOf | None = None,
                  node_group: dict[str, str] | None = None) -> None:
        """The nodes of every rack, the job each node is in at a time (None: every node free) and each node's
        group (None: every node could hold any job)."""
        self.rack_nodes = {r: list(ns) for r, ns in rack_nodes.items() if ns}
        self.jobs_of = jobs_of
        self.node_group = dict(node_group or {})

    def free_sizes(self, job: str, t_ms: int, groups: set[str] | None = None) -> dict[str, int]:
        """Per rack, its nodes of ``groups`` (None: any) that are in no job other than ``job`` at ``t_ms``."""
        out = {}
        for r, ns in self.rack_nodes.items():
            if groups is not None:
                ns = [n for n in ns if self.node_group.get(n, "") in groups]
            jobs = self.jobs_of(ns, t_ms) if self.jobs_of is not None and ns else [""] * len(ns)
            out[r] = sum(1 for j in jobs if j in ("", job))
        return out

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        empty = interner.code("")
        cats = interner.known(cfg.categories)
        if self.rack_nodes and cats and len(cells["sn"]):
            m = np.isin(cells["cat"], cats) & (cells["sj"] == cells["dj"]) & (cells["sj"] != empty)
            m &= (cells["sr"] != empty) & (cells["dr"] != empty)
            for job_code in np.unique(cells["sj"][m]).tolist():
                rows = np.flatnonzero(m & (cells["sj"] == job_code))
                self._score(ws, we, interner.lookup(np.array([job_code]))[0], rows, cells, interner)
        return self.alerts.evaluate(we)

    def _score(self, ws: int, we: int, job: str, rows: np.ndarray, cells: dict, interner: Interner) -> None:
        cfg = self.config
        samples = int(cells["samples"][rows].sum())
        if samples < cfg.min_samples:
            return
        cross = cells["sr"][rows] != cells["dr"][rows]
        cross_samples = int(cells["samples"][rows][cross].sum())
        total = int(cells["bytes_est"][rows].sum())
        cross_bytes = int(cells["bytes_est"][rows][cross].sum())
        nodes = set(interner.lookup(np.concatenate([cells["sn"][rows], cells["dn"][rows]])).tolist())
        rack_bytes: dict[str, int] = {}
        for col in ("sr", "dr"):
            for r, b in zip(interner.lookup(cells[col][rows]).tolist(), cells["bytes_est"][rows].tolist()):
                rack_bytes[r] = rack_bytes.get(r, 0) + b
        groups = {self.node_group.get(n, "") for n in nodes} if self.node_group else None
        need = racks_needed(len(nodes), self.free_sizes(job, ws, groups)) + cfg.slack_racks
        share = cross_bytes / total if total > 0 else 0.0
        low, high = wilson(cross_samples, samples, 1.96)
        spread = len(rack_bytes) > need and low >= cfg.min_cross_share
        self.evidence[job] = self.evidence.get(job, 0) + 1 if spread else 0
        if self.evidence[job] < cfg.persist_windows:
            return
        racks = sorted(rack_bytes, key=lambda r: (-rack_bytes[r], r))
        listed = ",".join(racks[: cfg.max_racks])
        self.alerts.observe(Condition(
            rule=RULE, key=(job,),
            summary=(f"job {job}: collective traffic of {len(nodes)} nodes spans {len(racks)} racks where "
                     f"{need - cfg.slack_racks} with free nodes could hold them; {share:.0%} of its bytes cross "
                     f"racks (spine layer), 95 % bounds {low:.0%}-{high:.0%} from {samples} sampled packets, for {self.evidence[job]} windows"),
            entities={"job": job, "nodes": str(len(nodes)), "racks": str(len(racks)),
                      "racks_needed": str(need - cfg.slack_racks), "rack_list": listed, "cross_share": f"{share:.3f}",
                      "low": f"{low:.3f}", "high": f"{high:.3f}", "samples": str(samples),
                      "evidence_windows": str(self.evidence[job])},
            first_seen_ms=ws, last_seen_ms=we, bytes_est=cross_bytes, flows=int(cells["flow_records"][rows].sum()),
        ))

    def snapshot(self) -> dict:
        return {"evidence": dict(sorted(self.evidence.items())), "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.evidence = {k: int(v) for k, v in snap["evidence"].items()}
        self.alerts.restore(snap["alerts"])
