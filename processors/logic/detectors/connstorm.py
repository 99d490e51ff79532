"""``conn_storm`` alert: a node opens (or gets refused) far more TCP connections than it usually does.

A hint to start a packet capture, not a measurement. Per closed main window and node, from the
window's cells (:func:`processors.logic.windows.matrix.signal_columns`): the SYN rate it sends and the RST
rate it receives, each against two references with a Poisson lower bound: the node's median of its last
normal windows (``baseline``) and a fixed rate no node of a training cluster reaches in normal work
(``floor``: a node that storms from its first window has no normal past); persistent storm windows raise the rule ``conn_storm`` through an
:class:`~processors.logic.alerts.AlertManager`. The rules, the parameters, sharding and what
sampled headers can and cannot show: docs/detectors.md, "Connection storms".
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
from .baseline import LinkState, NodePort, OneRuleDetector

__all__ = ["ConnStormConfig", "ConnStormDetector"]

RULE = "conn_storm"


@detector_params
class ConnStormConfig:
    """Connection-storm (SYN / RST rate) parameters (docs/detectors.md, "Connection storms")."""

    min_samples: int = Field(20, ge=1, description="Sampled SYN (or RST) packets a window needs before it can be a storm")
    min_rate_per_s: float = Field(200.0, gt=0, description="Estimated SYN (RST) packets/s a storm adds at least to the node's baseline")
    ratio: float = Field(5.0, gt=1, description="A rate at or above this many times the node's baseline is a storm")
    z: float = Field(1.96, gt=0, description="Normal quantile of the Poisson bound on the sampled count")
    baseline_windows: int = Field(12, ge=1, description="Normal windows whose median rate is the node's baseline")
    min_baseline: int = Field(3, ge=1, description="Normal windows with traffic needed before a node is judged")
    floor_per_s: float = Field(5000.0, gt=0, description="Floor reference: a SYN (RST) rate whose lower bound reaches this is a storm whatever the node's past (raise it for nodes that open this many connections in normal work)")
    persist_windows: int = Field(2, ge=1, description="Storm windows in a row before the alert fires")
    rebaseline_windows: int = Field(60, ge=1, description="Storm windows in a row after which the baseline restarts (the new level is normal)")
    resolve_windows: int = Field(3, ge=1, description="Quiet windows before the alert resolves")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Alert severity")


# signal -> (cell column, node column: the node it is attributed to)
_SIGNALS = {"syn": ("syn_packets_est", "sn"), "rst": ("rst_packets_est", "dn")}


class ConnStormDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: ConnStormConfig = ConnStormConfig(), window_ms: int = 10_000,
                 link_state: LinkState | None = None, node_port: NodePort | None = None):
        super().__init__(config, window_ms, link_state, node_port)
        self.nodes: dict[str, dict] = {}  # node -> {"syn": [rates], "rst": [rates], "storm": int, "last": ws}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        size_s = self.window_ms / 1000
        empty = interner.code("")
        if len(cells["sn"]):
            # every node's traffic in either direction: packets and samples (the sampling rate behind its signals)
            ends = np.concatenate([cells["sn"], cells["dn"]])
            vals = [np.concatenate([cells[c], cells[c]]) for c in ("packets_est", "samples")]
            keep = ends != empty
            nk, ns, _ = group_reduce([ends[keep]], [v[keep] for v in vals])
            traffic = dict(zip(interner.lookup(nk[0]).tolist(), zip(*(x.tolist() for x in ns))))
            sig: dict[str, dict[str, int]] = {}
            for name, (col, node_col) in _SIGNALS.items():
                m = (cells[col] > 0) & (cells[node_col] != empty)
                k, s, _ = group_reduce([cells[node_col][m]], [cells[col][m]])
                sig[name] = dict(zip(interner.lookup(k[0]).tolist(), s[0].tolist()))
            m = (cells["syn_packets_est"] > 0) & (cells["sn"] != empty)
            pk, _, _ = group_reduce([cells["sn"][m], cells["dn"][m]], [cells["syn_packets_est"][m]])
            peers: dict[str, int] = {}
            for nd in interner.lookup(pk[0]).tolist():
                peers[nd] = peers.get(nd, 0) + 1
            for node in sorted(traffic):
                self._judge(ws, we, node, traffic[node], {s: sig[s].get(node, 0) for s in _SIGNALS},
                            peers.get(node, 0), size_s)
        for k in [k for k, st in self.nodes.items() if ws - st["last"] > cfg.rebaseline_windows * self.window_ms]:
            del self.nodes[k]
        return self.alerts.evaluate(we)

    def _judge(self, ws: int, we: int, node: str, traffic: tuple[int, int], est: dict[str, int], peers: int,
               size_s: float) -> None:
        cfg = self.config
        packets, samples = traffic
        per_sample = packets / samples if samples else 1.0  # estimated packets per sampled one
        st = self.nodes.setdefault(node, {"syn": [], "rst": [], "storm": 0, "last": ws})
        st["last"] = ws
        rates = {s: est[s] / size_s for s in _SIGNALS}
        ready = len(st["syn"]) >= cfg.min_baseline
        judged, refs = {}, set()
        for s in _SIGNALS:
            base = float(median(st[s])) if st[s] else 0.0
            k = est[s] / per_sample if per_sample > 0 else 0.0  # sampled packets behind the estimate
            limit = max(cfg.ratio * base, base + cfg.min_rate_per_s)
            low = rates[s] * max(0.0, (k - cfg.z * math.sqrt(k)) / k) if k > 0 else 0.0
            enough = k >= cfg.min_samples
            over_base = ready and enough and rates[s] >= limit and low > base + cfg.min_rate_per_s / 2
            over_floor = enough and low >= cfg.floor_per_s
            refs |= {r for r, hit in (("baseline", over_base), ("floor", over_floor)) if hit}
            judged[s] = (over_base or over_floor, base, k, low)
        if not refs:
            st["storm"] = 0
            for s in _SIGNALS:
                st[s] = (st[s] + [rates[s]])[-cfg.baseline_windows:]
            return
        st["storm"] += 1
        if st["storm"] >= cfg.rebaseline_windows and "floor" not in refs:  # a floor storm never becomes normal
            st["syn"], st["rst"], st["storm"] = [], [], 0
            return
        if st["storm"] < cfg.persist_windows:
            return
        port_text = self.port_text(node, we)
        which = [s for s in _SIGNALS if judged[s][0]]
        parts = []
        for s in _SIGNALS:
            _storm, base, k, _low = judged[s]
            verb = "sends" if s == "syn" else "receives"
            parts.append(f"{verb} ~{rates[s]:.0f} {s.upper()}/s (baseline "
                         + (f"{base:.0f}/s" if ready else "not yet known") + f", {k:.0f} sampled)")
        reference = ",".join(sorted(refs))
        above = " and ".join(("its own baseline" if r == "baseline" else f"the floor of {cfg.floor_per_s:.0f}/s")
                             for r in sorted(refs))
        self.alerts.observe(Condition(
            rule=RULE, key=(node,),
            summary=(f"connection storm at {node}: " + ", ".join(parts)
                     + f" to {peers} peers for {st['storm']} windows, above {above}"
                     + (f"; capture on port {port_text}" if port_text else "")
                     + ". Sampled SYN/RST counts are a hint, not a measurement: confirm with a packet capture"),
            entities={"node": node, "signals": ",".join(which), "reference": reference,
                      "syn_per_s": f"{rates['syn']:.1f}", "syn_baseline_per_s": f"{judged['syn'][1]:.1f}",
                      "syn_sampled": f"{judged['syn'][2]:.0f}", "syn_per_s_low": f"{judged['syn'][3]:.1f}",
                      "rst_per_s": f"{rates['rst']:.1f}", "rst_baseline_per_s": f"{judged['rst'][1]:.1f}",
                      "rst_sampled": f"{judged['rst'][2]:.0f}", "rst_per_s_low": f"{judged['rst'][3]:.1f}",
                      "syn_peers": str(peers), "evidence_windows": str(st["storm"]), "port": port_text},
            first_seen_ms=ws - (st["storm"] - 1) * self.window_ms, last_seen_ms=we,  # the first storm window
        ))

    def snapshot(self) -> dict:
        return {"nodes": {k: {"syn": list(v["syn"]), "rst": list(v["rst"]), "storm": v["storm"], "last": v["last"]}
                          for k, v in sorted(self.nodes.items())},
                "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.nodes = {k: {"syn": [float(x) for x in v["syn"]], "rst": [float(x) for x in v["rst"]],
                          "storm": int(v["storm"]), "last": int(v["last"])} for k, v in snap["nodes"].items()}
        self.alerts.restore(snap["alerts"])
