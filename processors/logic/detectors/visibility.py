"""``collectives_not_visible`` alert: a job's members are active but the flows show none of its collectives.

Per closed main window and job (the job of a cell's destination, which is the job whose detector shard holds it):
*active* members are the job's nodes in any node cell of the window with the job at that end (the enricher's
membership at the flow's time); *seen* members are those sending category ``collective`` or ``rocev2``
(``categories``) to another member. A job with at least ``min_active`` active members and none seen, for
``persist_windows`` windows in a row, raises ``collectives_not_visible`` (dedup key ``collectives_not_visible|job``):
its collectives run where the telemetry cannot see them (InfiniBand, RDMA on a fabric that is not sampled,
NetFlow-only exporters), so the job's silence in the matrix, straggler and pattern answers is *not measured*, not
idle. A job that a node of ``serving_groups`` sends to (an inference job behind a frontend) is not judged: it
has no collectives to see. It resolves after ``resolve_windows`` windows with collectives seen (or with the job gone quiet). The same
rule as the metrics sink's ``job_collective_visibility_state`` (docs/metrics.md, "Collective visibility");
docs/detectors.md, "Collective visibility". Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import Condition
from ..params import detector_params
from ..windows.interning import Interner
from .baseline import OneRuleDetector

__all__ = ["VisibilityConfig", "VisibilityDetector", "NOT_VISIBLE"]

RULE = "collectives_not_visible"
NOT_VISIBLE = "collectives not visible (InfiniBand, or this fabric is not sampled)"


@detector_params
class VisibilityConfig:
    """Collective visibility parameters (docs/detectors.md, "Collective visibility")."""

    categories: tuple[str, ...] = Field(("collective", "rocev2"), description="App categories of a job's collective traffic")
    serving_groups: tuple[str, ...] = Field(("frontend",), description="Inventory groups of frontends: a job they send to serves requests (inference) and is not judged")
    min_active: int = Field(2, ge=1, description="Active member nodes a window needs to be judged (fewer: neither adds nor resets evidence)")
    persist_windows: int = Field(6, ge=1, description="Consecutive windows with active members and no collective seen before the alert fires")
    resolve_windows: int = Field(3, ge=1, description="Windows without the condition before the alert resolves")
    max_nodes: int = Field(8, ge=1, description="Active member nodes named in the alert's evidence")
    severity: Literal["info", "warning", "critical"] = Field("info", description="Alert severity (a blind spot of the telemetry, not a fault)")


class VisibilityDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: VisibilityConfig = VisibilityConfig(), window_ms: int = 10_000):
        super().__init__(config, window_ms)
        self.evidence: dict[str, int] = {}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        empty = interner.code("")
        judged: set[str] = set()
        if len(cells["sn"]):
            cats = interner.known(cfg.categories)
            fronts = interner.known(cfg.serving_groups)
            served = np.isin(cells["sg"], fronts) & (cells["sj"] != cells["dj"])
            in_job = cells["dj"] != empty
            coll = in_job & (cells["sj"] == cells["dj"]) & (cells["sn"] != cells["dn"]) & np.isin(cells["cat"], cats)
            for job_code in np.unique(cells["dj"][in_job]).tolist():
                rows = np.flatnonzero(cells["dj"] == job_code)
                src_in = cells["sj"][rows] == job_code
                active = set(cells["dn"][rows].tolist()) | set(cells["sn"][rows][src_in].tolist())
                active.discard(empty)
                if len(active) < cfg.min_active or served[rows].any():  # too few, or an inference job
                    continue
                job = interner.lookup(np.array([job_code]))[0]
                judged.add(job)
                seen = set(cells["sn"][rows][coll[rows]].tolist())
                self._judge(ws, we, job, active, seen, rows, cells, interner)
        for job in [j for j in self.evidence if j not in judged]:
            self.evidence.pop(job)  # quiet or too few members: nothing to judge, the evidence starts again
        return self.alerts.evaluate(we)

    def _judge(self, ws: int, we: int, job: str, active: set[int], seen: set[int], rows: np.ndarray, cells: dict,
               interner: Interner) -> None:
        cfg = self.config
        if seen & active:
            self.evidence.pop(job, None)
            return
        self.evidence[job] = self.evidence.get(job, 0) + 1
        if self.evidence[job] < cfg.persist_windows:
            return
        names = sorted(interner.lookup(np.array(sorted(active), dtype=np.int64)).tolist())
        cats = sorted(set(interner.lookup(np.unique(cells["cat"][rows])).tolist()))
        self.alerts.observe(Condition(
            rule=RULE, key=(job,),
            summary=(f"job {job}: {NOT_VISIBLE}: {len(names)} member nodes are active (categories "
                     f"{', '.join(cats)}) and none sends collective or RoCEv2 traffic to another member, for "
                     f"{self.evidence[job]} windows; its silence in the matrix and straggler answers is not idle"),
            entities={"job": job, "active_nodes": str(len(names)), "seen_nodes": "0", "share": "0.000",
                      "nodes": ",".join(names[: cfg.max_nodes]), "categories": ",".join(cats),
                      "evidence_windows": str(self.evidence[job])},
            first_seen_ms=ws, last_seen_ms=we, bytes_est=int(cells["bytes_est"][rows].sum()),
            flows=int(cells["flow_records"][rows].sum()),
        ))

    def snapshot(self) -> dict:
        return {"evidence": dict(sorted(self.evidence.items())), "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.evidence = {k: int(v) for k, v in snap["evidence"].items()}
        self.alerts.restore(snap["alerts"])
