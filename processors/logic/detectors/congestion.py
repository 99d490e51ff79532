"""``congestion`` alert: a job's share of ECN-CE marked packets or of RoCEv2 CNPs rose well above its own baseline.

Per closed main window and job, from the window's cells (the signal columns of
:func:`processors.logic.windows.matrix.signal_columns`) over the job's internal traffic: each share
against the job's median of its last normal windows, with a sampling lower bound; the nodes
named are the congested receivers with their switch ports. Persistent windows raise the rule
``congestion`` through an :class:`~processors.logic.alerts.AlertManager`. The rules, the
parameters and what sampled headers can and cannot show: docs/detectors.md, "Congestion signals".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from statistics import median

import math
from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import Condition
from ..diagnosis.catalog import DiagnosisConfig
from ..diagnosis.rules import diagnose_congestion
from ..diagnosis.signals import FlowSignals, PortFacts, cell_signals
from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner
from .baseline import LinkState, NodePort, OneRuleDetector

__all__ = ["CongestionConfig", "CongestionDetector", "SIGNALS"]

RULE = "congestion"
# signal -> (cell column, column naming the congested receiver, text)
SIGNALS = {
    "ecn_ce": ("ecn_ce_packets_est", "dn", "ECN-CE marked packets"),
    "cnp": ("cnp_packets_est", "sn", "RoCEv2 CNPs"),
}


@detector_params
class CongestionConfig:
    """Congestion (ECN-CE / CNP share) parameters (docs/detectors.md, "Congestion signals")."""

    signals: tuple[Literal["ecn_ce", "cnp"], ...] = Field(("ecn_ce", "cnp"), description="Signals judged (ecn_ce, cnp)")
    min_samples: int = Field(200, ge=1, description="Sampled packets of the job's internal traffic a window needs to count (fewer: neither adds nor resets evidence)")
    baseline_windows: int = Field(12, ge=1, description="Normal windows whose median share is the job's baseline")
    min_baseline: int = Field(6, ge=1, description="Normal windows needed before a job's share is judged")
    ratio: float = Field(3.0, gt=1, description="A share at or above this many times the baseline is elevated")
    min_increase: float = Field(0.01, gt=0, lt=1, description="An elevated ECN-CE share is also at least this much above the baseline (0.01 = 1 % of the packets)")
    cnp_min_increase: float = Field(0.002, gt=0, lt=1, description="The same for the CNP share (a receiver sends far fewer CNPs than it gets marked packets)")
    z: float = Field(1.96, gt=0, description="Normal quantile of the share's sampling bounds (1.96 ~ 95 %); the lower bound must be above the baseline")
    persist_windows: int = Field(2, ge=1, description="Elevated windows in a row before the alert fires")
    rebaseline_windows: int = Field(60, ge=1, description="Elevated windows in a row after which the baseline restarts (the new level is normal)")
    resolve_windows: int = Field(3, ge=1, description="Quiet windows before the alert resolves")
    max_nodes: int = Field(3, ge=0, description="Receiving nodes named in the alert (highest share first)")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Alert severity")


class CongestionDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: CongestionConfig = CongestionConfig(), window_ms: int = 10_000,
                 link_state: LinkState | None = None, node_port: NodePort | None = None,
                 diagnosis: DiagnosisConfig | None = None):
        super().__init__(config, window_ms, link_state, node_port)
        self.diagnosis = diagnosis  # None: alerts carry no diagnosis
        # "job\x00signal" -> {"shares": [..], "elevated": int, "last": ws, "sig": FlowSignals list of the elevated run}
        self.jobs: dict[str, dict] = {}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        empty = interner.code("")
        n = len(cells["sn"])
        seen: set[str] = set()
        if n:
            internal = (cells["sj"] == cells["dj"]) & (cells["sj"] != empty)
            jk, js, _ = group_reduce([cells["sj"][internal]],
                                     [cells[c][internal] for c in ("packets_est", "samples")])
            # per (job, receiving node): packets, samples received
            rk, rs, _ = group_reduce([cells["dj"][internal], cells["dn"][internal]],
                                     [cells[c][internal] for c in ("packets_est", "samples")])
            received = {(j, nd): (p, s) for j, nd, p, s in zip(*(interner.lookup(k).tolist() for k in rk),
                                                                *(x.tolist() for x in rs))}
            jobs = {j: (p, s) for j, p, s in zip(interner.lookup(jk[0]).tolist(), *(x.tolist() for x in js))}
            rocev2 = interner.index.get("rocev2", -1)

            def signals(job: str) -> FlowSignals:  # the job's internal traffic, for the diagnosis
                return cell_signals(cells, internal & (cells["sj"] == interner.index.get(job, -1)), rocev2)
            for signal in cfg.signals:
                col, node_col, _ = SIGNALS[signal]
                m = internal & (cells[col] > 0)
                sk, ss, _ = group_reduce([cells["sj"][m], cells[node_col][m]], [cells[col][m]])
                per_node: dict[str, dict[str, int]] = {}
                for j, nd, v in zip(*(interner.lookup(k).tolist() for k in sk), ss[0].tolist()):
                    per_node.setdefault(j, {})[nd] = v
                for job in sorted(jobs):
                    seen.add(f"{job}\x00{signal}")
                    self._judge(ws, we, job, signal, jobs[job], per_node.get(job, {}), received, signals)
        # forget jobs without internal traffic for a long time
        for k in [k for k, st in self.jobs.items()
                  if k not in seen and ws - st["last"] > cfg.rebaseline_windows * self.window_ms]:
            del self.jobs[k]
        return self.alerts.evaluate(we)

    def _judge(self, ws: int, we: int, job: str, signal: str, total: tuple[int, int], nodes: dict[str, int],
               received: dict, signals) -> None:
        cfg = self.config
        packets, samples = total
        st = self.jobs.setdefault(f"{job}\x00{signal}", {"shares": [], "elevated": 0, "last": ws})
        st["last"] = ws
        if packets <= 0 or samples < cfg.min_samples:
            return  # too little evidence this window: neither adds nor resets
        marked = sum(nodes.values())
        share = marked / packets
        se = math.sqrt(max(share * (1 - share), 0.0) / samples)
        low, high = max(0.0, share - cfg.z * se), min(1.0, share + cfg.z * se)
        if len(st["shares"]) < cfg.min_baseline:
            st["shares"] = (st["shares"] + [share])[-cfg.baseline_windows:]
            return
        base = float(median(st["shares"]))
        limit = max(cfg.ratio * base, base + (cfg.min_increase if signal == "ecn_ce" else cfg.cnp_min_increase))
        if not (share >= limit and low > base):
            st["elevated"] = 0
            st.pop("sig", None)
            st["shares"] = (st["shares"] + [share])[-cfg.baseline_windows:]
            return
        st["elevated"] += 1
        if st["elevated"] >= cfg.rebaseline_windows:
            st["shares"], st["elevated"] = [], 0
            st.pop("sig", None)
            return
        if self.diagnosis is not None:  # the evidence of the elevated run, for the diagnosis
            run = signals(job)
            if "sig" in st:
                run.add(FlowSignals.from_list(st["sig"]))
            st["sig"] = run.as_list()
        if st["elevated"] < cfg.persist_windows:
            return
        _col, _nc, what = SIGNALS[signal]
        rows = []
        for nd, v in nodes.items():
            p, s = received.get((job, nd), (0, 0))
            rows.append((-(v / p if p else 0.0), -v, nd, v / p if p else 0.0))
        rows.sort()
        named = [(nd, sh, self.port_text(nd, we) if nd else "") for _a, _b, nd, sh in rows[: cfg.max_nodes]]
        node_text = ",".join(f"{nd or '?'}:{sh:.3f}" for nd, sh, _p in named)
        ports = ",".join(f"{nd}={p}" for nd, _s, p in named if p)
        where = "; ".join(f"{nd or '?'} {sh:.1%}" + (f" (port {p})" if p else "") for nd, sh, p in named)
        vs = f"{share / base:.1f}x its baseline {base:.2%}" if base > 0 else f"baseline {base:.2%}"
        self.alerts.observe(Condition(
            rule=RULE, key=(job, signal),
            summary=(f"job {job}: {share:.2%} of its packets are {what} (95 % bounds {low:.2%}-{high:.2%}, "
                     f"{samples} sampled packets), {vs}, for {st['elevated']} windows; "
                     f"congested receivers: {where or '-'}"),
            entities={"job": job, "signal": signal, "share": f"{share:.4f}", "baseline": f"{base:.4f}",
                      "fraction_low": f"{low:.4f}", "fraction_high": f"{high:.4f}", "samples": str(samples),
                      "packets_est": str(packets), "signal_packets_est": str(marked),
                      "evidence_windows": str(st["elevated"]), "nodes": node_text, "ports": ports},
            first_seen_ms=ws - (st["elevated"] - 1) * self.window_ms, last_seen_ms=we,  # the first elevated window
            diagnosis=self._diagnosis(job, st, [nd for nd, _s, _p in named if nd], we),
        ))

    def _diagnosis(self, job: str, st: dict, nodes: list[str], we: int) -> dict | None:
        """The alert's diagnosis: the marks and CNPs of its elevated run, the named receivers' ports."""
        if self.diagnosis is None or "sig" not in st:
            return None
        ports = {nd: PortFacts.of(self.link_state(nd, we)) for nd in nodes}
        return diagnose_congestion(job, FlowSignals.from_list(st["sig"]), ports, self.diagnosis)

    def snapshot(self) -> dict:
        return {"jobs": {k: {"shares": list(v["shares"]), "elevated": v["elevated"], "last": v["last"],
                             **({"sig": list(v["sig"])} if "sig" in v else {})}
                         for k, v in sorted(self.jobs.items())},
                "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.jobs = {k: {"shares": [float(x) for x in v["shares"]], "elevated": int(v["elevated"]),
                         "last": int(v["last"]), **({"sig": [float(x) for x in v["sig"]]} if "sig" in v else {})}
                     for k, v in snap["jobs"].items()}
        self.alerts.restore(snap["alerts"])
