"""``lb_skew`` alert: per inference job, a replica gets far more than its even share of the frontends' requests.

Per closed main window and job, the request bytes each replica gets from frontends (nodes of the
``frontend_groups``, outside the job) against an even split, with a sampling lower bound; persistent
skew raises the rule ``lb_skew`` (dedup key ``lb_skew|job|replica``) naming the frontends that send
most of their requests to the replica. Requests only: their destination is in the job, so one detector
shard sees all of them (responses go to the frontend's shard). The rule, the parameters and what flow
data cannot show: docs/detectors.md, "Inference load skew".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from statistics import median

import math
from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import Condition
from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner
from .baseline import OneRuleDetector

__all__ = ["LbSkewConfig", "LbSkewDetector"]

RULE = "lb_skew"


@detector_params
class LbSkewConfig:
    """Inference load-skew parameters (docs/detectors.md, "Inference load skew")."""

    frontend_groups: tuple[str, ...] = Field(("frontend",), description="Inventory groups whose nodes are frontends (load balancers) sending requests")
    categories: tuple[str, ...] = Field((), description="App categories of the request traffic (empty: any)")
    min_replicas: int = Field(2, ge=2, description="Replicas a job needs before its split is judged")
    skew_ratio: float = Field(1.5, gt=1, description="A replica's share at or above this many times the even share is skewed")
    min_samples: int = Field(30, ge=1, description="Sampled request packets of the job a window needs to count (fewer: neither adds nor resets evidence)")
    persist_windows: int = Field(3, ge=1, description="Consecutive skewed windows before the alert fires")
    smoothing_windows: int = Field(3, ge=1, description="Windows whose median share must still be above the limit")
    membership_windows: int = Field(6, ge=1, description="Windows a node stays a replica after its last frontend request (a starved replica counts with 0 bytes)")
    resolve_windows: int = Field(3, ge=1, description="Quiet windows before the alert resolves")
    max_sources: int = Field(3, ge=0, description="Frontend sources named in the alert's evidence")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Alert severity")


class LbSkewDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: LbSkewConfig = LbSkewConfig(), window_ms: int = 10_000):
        super().__init__(config, window_ms)
        self.members: dict[str, dict[str, int]] = {}  # job -> replica -> last window start with traffic
        self.nodes: dict[str, dict] = {}  # "job\x00replica" -> {"shares": [..], "evidence": int}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        empty = interner.code("")
        fronts = interner.known(cfg.frontend_groups)
        n = len(cells["sn"])
        if fronts and n:
            mask = np.ones(n, bool)
            if cfg.categories:
                mask &= np.isin(cells["cat"], interner.known(cfg.categories))
            inbound = mask & np.isin(cells["sg"], fronts) & (cells["dj"] != empty) & (cells["dj"] != cells["sj"])
            inbound &= cells["dn"] != empty
            # one row per (job, replica, frontend): the requests
            keys, sums, _ = group_reduce([cells[k][inbound] for k in ("dj", "dn", "sn")],
                                         [cells[k][inbound] for k in ("bytes_est", "samples", "flow_records")])
        else:
            keys, sums = [np.zeros(0, np.int32)] * 3, [np.zeros(0, np.int64)] * 3
        per_job: dict[str, dict[str, dict[str, list[int]]]] = {}  # job -> replica -> frontend -> [bytes, samples, records]
        names = [interner.lookup(k).tolist() for k in keys]
        for j, r, f, b, s, c in zip(*names, *(x.tolist() for x in sums)):
            per_job.setdefault(j, {}).setdefault(r, {})[f] = [b, s, c]
        for job in sorted(set(per_job) | set(self.members)):
            mem = self.members.setdefault(job, {})
            active = per_job.get(job, {})
            for r in active:
                mem[r] = ws
            for r in [r for r, last in mem.items() if ws - last >= cfg.membership_windows * self.window_ms]:
                del mem[r]
                self.nodes.pop(f"{job}\x00{r}", None)
            if not mem:
                del self.members[job]
                continue
            if active and len(mem) >= cfg.min_replicas:
                self._score(ws, we, job, sorted(mem), active)
        return self.alerts.evaluate(we)

    def _score(self, ws: int, we: int, job: str, replicas: list[str], active: dict) -> None:
        cfg = self.config
        rb = {r: sum(v[0] for v in active.get(r, {}).values()) for r in replicas}
        total = sum(rb.values())
        samples = sum(v[1] for fr in active.values() for v in fr.values())
        if total <= 0 or samples < cfg.min_samples:
            return  # too little evidence this window: neither adds nor resets
        even = 1.0 / len(replicas)
        limit = cfg.skew_ratio * even
        fe_total: dict[str, int] = {}
        for fr in active.values():
            for f, v in fr.items():
                fe_total[f] = fe_total.get(f, 0) + v[0]
        for r in replicas:
            share = rb[r] / total
            low = share - 1.96 * math.sqrt(max(share * (1 - share), 0.0) / samples)
            st = self.nodes.setdefault(f"{job}\x00{r}", {"shares": [], "evidence": 0})
            st["shares"] = (st["shares"] + [share])[-cfg.smoothing_windows:]
            skewed = share >= limit and low > even
            st["evidence"] = st["evidence"] + 1 if skewed else 0
            if st["evidence"] < cfg.persist_windows or float(median(st["shares"])) < limit:
                continue
            fr = active.get(r, {})
            top = sorted(fr.items(), key=lambda kv: (-kv[1][0], kv[0]))[: cfg.max_sources]
            sources = ",".join(f"{f}:{v[0] / fe_total[f]:.2f}" for f, v in top if fe_total.get(f))
            self.alerts.observe(Condition(
                rule=RULE, key=(job, r),
                summary=(f"job {job}: replica {r} gets {share:.0%} of the frontend requests "
                         f"(even split {even:.0%} over {len(replicas)} replicas) for {st['evidence']} windows; "
                         f"top sources {sources or '-'}"),
                entities={"job": job, "replica": r, "share": f"{share:.3f}", "even_share": f"{even:.3f}",
                          "replicas": str(len(replicas)), "evidence_windows": str(st["evidence"]),
                          "sources": sources},
                first_seen_ms=ws, last_seen_ms=we, bytes_est=int(rb[r]),
                flows=int(sum(v[2] for v in fr.values())),
            ))

    def snapshot(self) -> dict:
        return {
            "members": {j: dict(sorted(m.items())) for j, m in sorted(self.members.items())},
            "nodes": {k: {"shares": list(v["shares"]), "evidence": v["evidence"]} for k, v in sorted(self.nodes.items())},
            "alerts": self.alerts.snapshot(),
        }

    def restore(self, snap: dict) -> None:
        self.members = {j: {r: int(t) for r, t in m.items()} for j, m in snap["members"].items()}
        self.nodes = {k: {"shares": [float(x) for x in v["shares"]], "evidence": int(v["evidence"])}
                      for k, v in snap["nodes"].items()}
        self.alerts.restore(snap["alerts"])
