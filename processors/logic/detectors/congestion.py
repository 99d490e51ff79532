"""``congestion`` alert: a job's share of ECN-CE marked packets or of RoCEv2 CNPs rose well above its own
baseline, or is above the physical floor of a lossless RoCEv2 fabric whatever the job's past.

Per closed main window and job, from the window's cells (the signal columns of
:func:`processors.logic.windows.matrix.signal_columns`) over the job's internal traffic: each share
against two references, with a sampling lower bound: the job's median of its last normal windows
(``baseline``) and a fixed floor on the RoCEv2 traffic, for the job and for each receiver (``floor``:
a job launched into a congested fabric has no normal past to learn). The nodes named are the
congested receivers with their switch ports. Persistent windows raise the rule
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
    ecn_ce_floor: float = Field(0.03, gt=0, lt=1, description="Floor reference: a RoCEv2 ECN-CE share (of the job, or of the packets one receiver gets) whose lower sampling bound reaches this is congestion on any day, whatever the baseline (a lossless fabric marks rarely)")
    cnp_floor: float = Field(0.005, gt=0, lt=1, description="The same floor for CNPs per RoCEv2 packet received")
    floor_min_samples: int = Field(30, ge=1, description="Sampled RoCEv2 packets a receiver needs in a window for the floor to judge it")
    peer_min_jobs: int = Field(2, ge=1, description="Peer reference: other jobs with min_samples sampled packets of the same transport (RoCEv2, or the rest: TCP) in the same window needed to judge a job's share against their median (ratio, min_increase, lower bound above it)")
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
            roce = internal & (cells["cat"] == rocev2)

            def signals(job: str) -> FlowSignals:  # the job's internal traffic, for the diagnosis
                return cell_signals(cells, internal & (cells["sj"] == interner.index.get(job, -1)), rocev2)
            for signal in cfg.signals:
                col, node_col, _ = SIGNALS[signal]
                m = internal & (cells[col] > 0)
                sk, ss, _ = group_reduce([cells["sj"][m], cells[node_col][m]], [cells[col][m]])
                per_node: dict[str, dict[str, int]] = {}
                for j, nd, v in zip(*(interner.lookup(k).tolist() for k in sk), ss[0].tolist()):
                    per_node.setdefault(j, {})[nd] = v
                floors = self._floor_hits(cells, interner, roce, signal)
                peers = self._peer_hits(cells, interner, internal, roce, signal)
                for job in sorted(jobs):
                    seen.add(f"{job}\x00{signal}")
                    self._judge(ws, we, job, signal, jobs[job], per_node.get(job, {}), received, signals,
                                floors.get(job, []), peers.get(job, []))
        # forget jobs without internal traffic for a long time
        for k in [k for k, st in self.jobs.items()
                  if k not in seen and ws - st["last"] > cfg.rebaseline_windows * self.window_ms]:
            del self.jobs[k]
        return self.alerts.evaluate(we)

    def _floor_hits(self, cells: dict[str, np.ndarray], interner: Interner, roce: np.ndarray,
                    signal: str) -> dict[str, list[tuple[str, float, float]]]:
        """job -> [(receiver or "" for the whole job, share, lower bound)] of the RoCEv2 shares whose lower
        sampling bound reaches the signal's floor (``floor_min_samples`` sampled packets at least)."""
        cfg = self.config
        col, node_col, _ = SIGNALS[signal]
        floor = cfg.ecn_ce_floor if signal == "ecn_ce" else cfg.cnp_floor
        if not roce.any():
            return {}
        # packets and samples a receiver gets; the signal counted at the receiver it names
        rk, rs, _ = group_reduce([cells["dj"][roce], cells["dn"][roce]],
                                 [cells[c][roce] for c in ("packets_est", "samples")])
        mk, ms, _ = group_reduce([cells["sj"][roce], cells[node_col][roce]], [cells[col][roce]])
        marks = {(j, nd): v for j, nd, v in zip(*(interner.lookup(k).tolist() for k in mk), ms[0].tolist())}
        totals: dict[str, list[float]] = {}
        out: dict[str, list[tuple[str, float, float]]] = {}
        for j, nd, p, s in zip(*(interner.lookup(k).tolist() for k in rk), *(x.tolist() for x in rs)):
            v = marks.get((j, nd), 0)
            t = totals.setdefault(j, [0, 0, 0])
            t[0], t[1], t[2] = t[0] + v, t[1] + p, t[2] + s
            hit = _floor_hit(nd, v, p, s, floor, cfg)
            if hit is not None:
                out.setdefault(j, []).append(hit)
        for j, (v, p, s) in totals.items():
            hit = _floor_hit("", v, p, s, floor, cfg)
            if hit is not None:
                out.setdefault(j, []).insert(0, hit)
        return out

    def _peer_hits(self, cells: dict[str, np.ndarray], interner: Interner, internal: np.ndarray, roce: np.ndarray,
                   signal: str) -> dict[str, list[tuple[str, float, float, float, int]]]:
        """job -> [(transport, share, lower bound, peer median, peer jobs)] where the job's share of the signal on
        its internal traffic of one transport (``RoCEv2``, or ``TCP``: everything else) is far above the median
        share of the other jobs on the same fabric in the same window (at least ``peer_min_jobs`` of them with
        ``min_samples`` sampled packets of that transport): the peer reference, which no past of the job enters."""
        cfg = self.config
        col = SIGNALS[signal][0]
        inc = cfg.min_increase if signal == "ecn_ce" else cfg.cnp_min_increase
        out: dict[str, list[tuple[str, float, float, float, int]]] = {}
        for transport, m in (("RoCEv2", internal & roce), ("TCP", internal & ~roce)):
            if not m.any():
                continue
            jk, js, _ = group_reduce([cells["sj"][m]], [cells[c][m] for c in (col, "packets_est", "samples")])
            shares = {j: (v / p, s) for j, v, p, s in zip(interner.lookup(jk[0]).tolist(), *(x.tolist() for x in js))
                      if p > 0 and s >= cfg.min_samples}
            for j, (share, s) in sorted(shares.items()):
                others = [sh for k, (sh, _s) in shares.items() if k != j]
                if len(others) < cfg.peer_min_jobs:
                    continue
                ref = float(median(others))
                low = share - cfg.z * math.sqrt(max(share * (1 - share), 0.0) / s)
                if share >= max(cfg.ratio * ref, ref + inc) and low > ref:
                    out.setdefault(j, []).append((transport, share, low, ref, len(others)))
        return out

    def _judge(self, ws: int, we: int, job: str, signal: str, total: tuple[int, int], nodes: dict[str, int],
               received: dict, signals, floors: list[tuple[str, float, float]],
               peers: list[tuple[str, float, float, float, int]] = ()) -> None:
        cfg = self.config
        packets, samples = total
        st = self.jobs.setdefault(f"{job}\x00{signal}", {"shares": [], "elevated": 0, "last": ws})
        st["last"] = ws
        if (packets <= 0 or samples < cfg.min_samples) and not floors and not peers:
            return  # too little evidence this window: neither adds nor resets
        marked = sum(nodes.values())
        share = marked / packets if packets > 0 else 0.0
        se = math.sqrt(max(share * (1 - share), 0.0) / samples) if samples > 0 else 0.0
        low, high = max(0.0, share - cfg.z * se), min(1.0, share + cfg.z * se)
        ready = len(st["shares"]) >= cfg.min_baseline and samples >= cfg.min_samples
        base = float(median(st["shares"])) if st["shares"] else 0.0
        limit = max(cfg.ratio * base, base + (cfg.min_increase if signal == "ecn_ce" else cfg.cnp_min_increase))
        refs = ((["baseline"] if ready and share >= limit and low > base else []) + (["floor"] if floors else [])
                + (["peer"] if peers else []))
        if not refs:
            st["elevated"] = 0
            st.pop("sig", None)
            if samples >= cfg.min_samples:
                st["shares"] = (st["shares"] + [share])[-cfg.baseline_windows:]
            return
        st["elevated"] += 1
        if st["elevated"] >= cfg.rebaseline_windows and not floors and not peers:
            # a long run above the job's own past only becomes its normal level when no floor or peer says otherwise
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
        floor = cfg.ecn_ce_floor if signal == "ecn_ce" else cfg.cnp_floor
        floor_text = ", ".join(f"{nd or 'the job'} {sh:.1%} (lower bound {lo:.1%})" for nd, sh, lo in floors)
        peer_text = ", ".join(f"its {tr} traffic {sh:.1%} (lower bound {lo:.1%}) against {ref:.2%}, the median of "
                              f"{n} peer jobs" for tr, sh, lo, ref, n in peers)
        texts = {"baseline": vs, "floor": f"above the RoCEv2 floor {floor:.1%}: {floor_text}",
                 "peer": f"far above the other jobs on the fabric: {peer_text}"}
        fired = " and ".join(texts[r] for r in refs)
        self.alerts.observe(Condition(
            rule=RULE, key=(job, signal),
            summary=(f"job {job}: {share:.2%} of its packets are {what} (95 % bounds {low:.2%}-{high:.2%}, "
                     f"{samples} sampled packets), {fired}, for {st['elevated']} windows; "
                     f"congested receivers: {where or '-'}"),
            entities={"job": job, "signal": signal, "reference": ",".join(refs), "share": f"{share:.4f}",
                      "baseline": f"{base:.4f}" if ready else "", "floor": f"{floor:.4f}",
                      "floor_hits": ",".join(f"{nd or '*'}:{lo:.3f}" for nd, _sh, lo in floors),
                      "peer_hits": ",".join(f"{tr}:{lo:.3f}>{ref:.3f}/{n}" for tr, _sh, lo, ref, n in peers),
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


def _floor_hit(node: str, marked: float, packets: float, samples: float, floor: float,
               cfg: CongestionConfig) -> tuple[str, float, float] | None:
    """(node, share, lower bound) when ``marked / packets`` is at or above ``floor`` with its lower bound, else None."""
    if packets <= 0 or samples < cfg.floor_min_samples:
        return None
    share = marked / packets
    low = share - cfg.z * math.sqrt(max(share * (1 - share), 0.0) / samples)
    return (node, share, low) if low >= floor else None
