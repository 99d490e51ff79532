"""Straggler scoring: per job and window, each node's collective bytes against its peers'.

For every closed window and job, each member node gets a StragglerScore dict (straggler_score.avsc):
its link bytes against the peer median, a robust z score smoothed over a few windows, and a
straggler flag that needs several low windows in a row. Method and limits: docs/detectors.md,
"Stragglers". Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import Field

from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner

__all__ = ["StragglerConfig", "StragglerDetector", "leave_one_out_median"]


@detector_params
class StragglerConfig:
    """Straggler detector parameters (docs/detectors.md, "Stragglers")."""

    categories: tuple[str, ...] = Field(("collective", "rocev2"), description="App categories whose bytes a node sends to its job peers")
    min_peers: int = Field(3, ge=2, description="Nodes a job needs before its nodes are scored")
    ratio_threshold: float = Field(0.7, gt=0, description="Sent / peer median below which a window is evidence")
    z_threshold: float = Field(-3.0, description="Robust z below which a window is evidence (and the score must stay)")
    persist_windows: int = Field(3, ge=1, description="Consecutive evidence windows that flag a straggler")
    smoothing_windows: int = Field(3, ge=1, description="Windows of the rolling median that gives the score")
    membership_windows: int = Field(6, ge=1, description="A node counts as a job member for this many windows after it was last seen")
    mad_floor_fraction: float = Field(0.05, gt=0, description="Floor of the MAD as a fraction of the peer median (identical peers)")
    z_clip: float = Field(10.0, gt=0, description="Raw z values are clipped to +- this")


def leave_one_out_median(values: np.ndarray) -> np.ndarray:
    """For each element, the median of all the other elements (vectorised)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    if n < 2:
        return np.zeros(n)
    order = np.argsort(v, kind="stable")
    s = v[order]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    m = n - 1
    a, b = (m - 1) // 2, m // 2
    ia = np.where(a < rank, a, a + 1)
    ib = np.where(b < rank, b, b + 1)
    return (s[ia] + s[ib]) / 2.0


def _median(values: list[float]) -> float:
    """Median of a short list of floats (same value as ``float(np.median(values))``, without numpy's overhead)."""
    v = sorted(values)
    n = len(v)
    if n == 0 or any(x != x for x in v):
        return float(np.median(values))  # empty or NaN: numpy's answer
    m = n // 2
    return float(v[m]) if n % 2 else float(np.mean([v[m - 1], v[m]]))


class StragglerDetector:
    def __init__(self, config: StragglerConfig = StragglerConfig()):
        self.config = config
        # (job, node, time ms) -> key of an open link event on the node's port or its busiest destination's, or "":
        # such nodes are scored, but left out of the peer statistics (the engine sets it; None: no port is known)
        self.link_cause: Callable[[str, str, int], str] | None = None
        # job -> node -> last window start seen
        self.members: dict[str, dict[str, int]] = {}
        # "job\x00node" -> {"z": [..], "evidence": int}
        self.nodes: dict[str, dict] = {}
        # "job\x00node" -> busiest destination node in the last window the node sent (ring: its successor)
        self.successor: dict[str, str] = {}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        size = we - ws
        empty = interner.code("")
        mask = np.isin(cells["cat"], interner.known(cfg.categories))
        sel = {k: v[mask] for k, v in cells.items()}
        per_job: dict[str, dict[str, list[int]]] = {}  # job -> node -> [sent, received, busiest link]

        def named(keys):  # (job, node) names of group keys
            return zip(interner.lookup(keys[0]).tolist(), interner.lookup(keys[1]).tolist())

        ok = (sel["sj"] != empty) & (sel["sn"] != empty)
        # bytes per (job, source, destination node), then per source: total sent and busiest link
        pk, psum, _ = group_reduce([sel["sj"][ok], sel["sn"][ok], sel["dn"][ok]], [sel["bytes_est"][ok]])
        keys, sent, link = group_reduce(pk[:2], psum, psum)
        # busiest destination per (job, source): largest bytes, ties to the lowest destination code; a destination
        # in the same job first (the ring successor, not the node a burst into another job went to), else any
        same = ok & (sel["dj"] == sel["sj"])
        sk, ssum, _ = group_reduce([sel["sj"][same], sel["sn"][same], sel["dn"][same]], [sel["bytes_est"][same]])
        for keys3, sums3 in ((pk, psum), (sk, ssum)):
            if not len(keys3[0]):
                continue
            order = np.lexsort((keys3[2], -sums3[0], keys3[1], keys3[0]))
            j_, n_, d_ = keys3[0][order], keys3[1][order], keys3[2][order]
            head = np.r_[True, (j_[1:] != j_[:-1]) | (n_[1:] != n_[:-1])]
            strings = interner.strings
            for j, n, d in zip(j_[head].tolist(), n_[head].tolist(), d_[head].tolist()):
                self.successor[f"{strings[j]}\x00{strings[n]}"] = strings[d]
        for (j, n), b, most in zip(named(keys), sent[0].tolist(), link[0].tolist()):
            node = per_job.setdefault(j, {}).setdefault(n, [0, 0, 0])
            node[0], node[2] = b, most
        ok = (sel["dj"] != empty) & (sel["dn"] != empty)
        keys, recv, _ = group_reduce([sel["dj"][ok], sel["dn"][ok]], [sel["bytes_est"][ok]])
        for (j, n), b in zip(named(keys), recv[0].tolist()):
            per_job.setdefault(j, {}).setdefault(n, [0, 0, 0])[1] = b

        out: list[dict] = []
        for job in sorted(set(per_job) | set(self.members)):
            mem = self.members.setdefault(job, {})
            active = per_job.get(job, {})
            for n in active:
                mem[n] = ws
            for n in [n for n, last in mem.items() if ws - last >= cfg.membership_windows * size]:
                del mem[n]
                self.nodes.pop(f"{job}\x00{n}", None)
            for n in [k for k in self.successor if k.startswith(f"{job}\x00") and k.split("\x00", 1)[1] not in mem]:
                del self.successor[n]
            if not mem:
                del self.members[job]
                continue
            if not active:
                continue  # job silent this window: no scores, evidence kept
            names = sorted(mem)
            if len(names) - 1 < cfg.min_peers:
                continue
            sent = np.array([active.get(n, [0, 0, 0])[0] for n in names], dtype=np.int64)
            recv = np.array([active.get(n, [0, 0, 0])[1] for n in names], dtype=np.int64)
            link = np.array([active.get(n, [0, 0, 0])[2] for n in names], dtype=np.int64)
            out.extend(self._score(ws, we, job, names, sent, recv, link))
        return out

    def _score(self, ws, we, job, names, sent, recv, link) -> list[dict]:
        cfg = self.config
        s = link.astype(np.float64)
        med_s = leave_one_out_median(s)
        med_r = leave_one_out_median(recv.astype(np.float64))
        ref = self._reference(job, names, we)
        if ref is not None:  # nodes behind an open link event are no peers: the peer statistics without them
            med_s = np.where(ref, 0.0, float(np.median(s[ref])))
            med_s[ref] = leave_one_out_median(s[ref])
            mad = float(np.median(np.abs(s[ref] - np.median(s[ref]))))
        else:
            mad = float(np.median(np.abs(s - np.median(s))))
        scale = 1.4826 * np.maximum(mad, cfg.mad_floor_fraction * med_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(scale > 0, (s - med_s) / scale, 0.0)
            ratio = np.where(med_s > 0, s / med_s, 1.0)
        z = np.clip(z, -cfg.z_clip, cfg.z_clip)
        out = []
        peers = len(names) - 1
        ws, we = int(ws), int(we)
        # Python values per node, column by column (one output dict per node, no numpy scalar per field)
        cols = zip(names, z.tolist(), ratio.tolist(), sent.tolist(), recv.tolist(), med_s.tolist(), med_r.tolist())
        for node, zi, ri, si, rv, ms_, mr in cols:
            key = f"{job}\x00{node}"
            st = self.nodes.setdefault(key, {"z": [], "evidence": 0})
            st["z"] = (st["z"] + [zi])[-cfg.smoothing_windows :]
            low = ri < cfg.ratio_threshold and zi < cfg.z_threshold
            st["evidence"] = st["evidence"] + 1 if low else 0
            score = _median(st["z"])
            out.append(
                {
                    "window_start_ms": ws,
                    "window_end_ms": we,
                    "job": job,
                    "node": node,
                    "sent_bytes": si,
                    "recv_bytes": rv,
                    "peer_median_sent": ms_,
                    "peer_median_recv": mr,
                    "ratio_sent": ri,
                    "score": score,
                    "evidence_windows": int(st["evidence"]),
                    "straggler": bool(st["evidence"] >= cfg.persist_windows and score < cfg.z_threshold),
                    "peers": int(peers),
                    "explained_by": "",
                    "diagnosis": None,  # the engine diagnoses flagged nodes (processors/logic/diagnosis)
                }
            )
        return out

    def _reference(self, job: str, names: list[str], we: int) -> np.ndarray | None:
        """Mask of the nodes the peer statistics use: those without an open link event on their own port or on
        their busiest destination's (``link_cause``); None when that leaves every node or fewer than ``min_peers``
        + 1 (then all nodes are peers, as without link state)."""
        if self.link_cause is None:
            return None
        ref = np.array([not self.link_cause(job, n, int(we)) for n in names], dtype=bool)
        if ref.all() or int(ref.sum()) < self.config.min_peers + 1:
            return None
        return ref

    def snapshot(self) -> dict:
        return {
            "members": {j: dict(sorted(m.items())) for j, m in sorted(self.members.items())},
            "nodes": {k: {"z": list(v["z"]), "evidence": v["evidence"]} for k, v in sorted(self.nodes.items())},
            "successor": dict(sorted(self.successor.items())),
        }

    def restore(self, snap: dict) -> None:
        self.members = {j: {n: int(t) for n, t in m.items()} for j, m in snap["members"].items()}
        self.nodes = {k: {"z": [float(x) for x in v["z"]], "evidence": int(v["evidence"])} for k, v in snap["nodes"].items()}
        self.successor = dict(snap.get("successor", {}))
