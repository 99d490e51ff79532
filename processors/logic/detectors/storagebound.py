"""``storage_bound`` verdict: a job's storage I/O fell far below its own baseline while the network had room.

Per closed main window, job and storage node, from the window's cells: dataset reads (storage -> job)
against their median baseline, checkpoint-write bursts (job -> storage) against the peaks of earlier
bursts. A persistent drop raises the rule ``storage_bound`` (one alert per signal, ``dataset_reads``
or ``checkpoint_writes``) only when every port that carried the I/O was sampled, is below
``max_link_util`` and has no open link event: the network is not the bottleneck. The rules, the
parameters, sharding and what flow data cannot show: docs/detectors.md, "Storage-bound verdict".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from statistics import median

from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import Condition
from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner
from .baseline import LinkState, OneRuleDetector

__all__ = ["StorageBoundConfig", "StorageBoundDetector"]

RULE = "storage_bound"


@detector_params
class StorageBoundConfig:
    """storage_bound verdict parameters (docs/detectors.md, "Storage-bound verdict")."""

    storage_groups: tuple[str, ...] = Field(("storage",), description="Inventory groups whose nodes are storage nodes")
    categories: tuple[str, ...] = Field(("storage",), description="App categories of the storage traffic")
    drop_ratio: float = Field(0.5, gt=0, lt=1, description="Throughput below this share of the baseline is low")
    baseline_windows: int = Field(12, ge=1, description="Normal windows of dataset reads whose median is the baseline")
    min_baseline: int = Field(6, ge=1, description="Normal windows needed before reads are judged")
    rebaseline_windows: int = Field(60, ge=1, description="Low windows in a row after which the baseline restarts (the new level is normal)")
    persist_windows: int = Field(3, ge=1, description="Low windows in a row (reads) or first windows of a burst (writes) before the verdict")
    burst_min_bytes: int = Field(100_000_000, ge=1, description="Checkpoint-write bytes in a window that make it part of a burst")
    max_link_util: float = Field(0.5, gt=0, le=1, description="Every port that carried the I/O must be below this utilisation (headroom)")
    resolve_windows: int = Field(3, ge=1, description="Quiet windows before the alert resolves")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Alert severity")


def _bps(v: float) -> str:
    for unit, div in (("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.2f} {unit}"
    return f"{v:.0f} b/s"


_REF_TEXT = {"baseline": "their baseline", "rated": "the storage node's rated per-client write throughput for its clients",
             "declared": "the job's declared dataset-read throughput for its reading nodes"}


def _new_state() -> dict:
    return {"reads": [], "low": 0, "bursts": [], "burst": [], "slow_burst": False, "slow_ref": ""}


class StorageBoundDetector(OneRuleDetector):
    RULE = RULE

    def __init__(self, config: StorageBoundConfig = StorageBoundConfig(), window_ms: int = 10_000,
                 link_state: LinkState | None = None):
        super().__init__(config, window_ms, link_state)
        self.pairs: dict[str, dict] = {}  # "job\x00storage" -> state
        self.rated_write: dict[str, float] = {}  # storage node -> rated write bits/s per client (inventory)
        self.dataset_read: dict[str, float] = {}  # job -> declared dataset-read bits/s per node (inventory)

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        empty = interner.code("")
        groups = interner.known(cfg.storage_groups)
        cats = interner.known(cfg.categories)
        flows: dict[tuple[str, str], dict] = {}  # (job, storage) -> {"reads": b, "writes": b, "nodes": set}
        if groups and cats and len(cells["sn"]):
            base = np.isin(cells["cat"], cats)
            for direction, sto, peer, job, grp in (("reads", "sn", "dn", "dj", "sg"), ("writes", "dn", "sn", "sj", "dg")):
                m = base & np.isin(cells[grp], groups) & (cells[job] != empty) & (cells[peer] != empty)
                m &= cells[sto] != empty
                keys, sums, _ = group_reduce([cells[job][m], cells[sto][m], cells[peer][m]], [cells["bytes_est"][m]])
                names = [interner.lookup(k).tolist() for k in keys]
                for j, s, p, b in zip(*names, sums[0].tolist()):
                    e = flows.setdefault((j, s), {"reads": 0, "writes": 0, "nodes": set(), "readers": set()})
                    e[direction] += b
                    e["nodes"].add(p)
                    if direction == "reads":
                        e["readers"].add(p)
        for j, s in sorted(set(flows) | {tuple(k.split("\x00")) for k in self.pairs}):
            e = flows.get((j, s), {"reads": 0, "writes": 0, "nodes": set(), "readers": set()})
            self._pair(ws, we, j, s, e)
        # forget pairs without traffic for a long time
        for k in [k for k, st in self.pairs.items() if ws - st.get("last", ws) > cfg.rebaseline_windows * self.window_ms]:
            del self.pairs[k]
        return self.alerts.evaluate(we)

    def _pair(self, ws: int, we: int, job: str, storage: str, e: dict) -> None:
        cfg = self.config
        st = self.pairs.setdefault(f"{job}\x00{storage}", _new_state())
        if e["reads"] or e["writes"]:
            st["last"] = ws
        size_s = self.window_ms / 1000
        # dataset reads
        reads, why = e["reads"], []
        base = float(median(st["reads"])) if len(st["reads"]) >= cfg.min_baseline else None
        low = base is not None and 0 < reads < cfg.drop_ratio * base
        declared = self._declared_window(job, e)
        low_declared = declared is not None and 0 < reads < cfg.drop_ratio * declared
        st["low_declared"] = st.get("low_declared", 0) + 1 if low_declared else 0
        if low:
            st["low"] += 1
            if st["low"] >= cfg.rebaseline_windows:
                st["reads"], st["low"] = [], 0
        else:
            st["low"] = 0
            if reads > 0 and not low_declared:  # reads below the job's declared rate never become its normal
                st["reads"] = (st["reads"] + [reads])[-cfg.baseline_windows:]
        if low and st["low"] >= cfg.persist_windows:
            why.append(("dataset reads", reads, base, st["low"], "baseline"))
        elif low_declared and st["low_declared"] >= cfg.persist_windows:
            why.append(("dataset reads", reads, declared, st["low_declared"], "declared"))
        # checkpoint writes
        writes = e["writes"]
        peak = float(median(st["bursts"])) if st["bursts"] else None
        rated = self._rated_window(storage, e)
        if writes >= cfg.burst_min_bytes:
            st["burst"].append(writes)
            first = st["burst"][: cfg.persist_windows]
            if len(first) >= cfg.persist_windows and not st["slow_burst"]:
                if peak is not None and max(first) < cfg.drop_ratio * peak:
                    st["slow_burst"], st["slow_ref"] = True, "baseline"
                elif rated is not None and max(first) < cfg.drop_ratio * rated:
                    st["slow_burst"], st["slow_ref"] = True, "rated"
            if st["slow_burst"]:
                ref = peak if st.get("slow_ref") == "baseline" else rated
                if ref:
                    why.append(("checkpoint writes", writes, ref, len(st["burst"]), st.get("slow_ref", "baseline")))
        elif st["burst"]:  # a burst ended
            if not st["slow_burst"]:
                st["bursts"] = (st["bursts"] + [max(st["burst"])])[-3:]
            st["burst"], st["slow_burst"], st["slow_ref"] = [], False, ""
        for what, got, ref, windows, reference in why:
            self._verdict(ws, we, job, storage, e, what, got, ref, windows, reference)

    def _declared_window(self, job: str, e: dict) -> float | None:
        """Bytes a window of dataset reads by ``e``'s reading nodes would carry at the job's declared per-node
        read throughput (inventory ``dataset_read``), or None without a declaration."""
        rate = self.dataset_read.get(job)
        if not rate or not e["readers"]:
            return None
        return rate / 8 * self.window_ms / 1000 * len(e["readers"])

    def _rated_window(self, storage: str, e: dict) -> float | None:
        """Bytes a window of checkpoint writes from ``e``'s clients would carry at the storage node's rated
        per-client write throughput (inventory ``rated_write``), or None without a rating."""
        rate = self.rated_write.get(storage)
        if not rate or not e["nodes"]:
            return None
        return rate / 8 * self.window_ms / 1000 * len(e["nodes"])

    def _verdict(self, ws: int, we: int, job: str, storage: str, e: dict, what: str, got: int, ref: float,
                 windows: int, reference: str) -> None:
        cfg = self.config
        size_s = self.window_ms / 1000
        ports = sorted(e["nodes"]) + [storage]
        states = {n: self.link_state(n, we) for n in ports}
        if any(v is None for v in states.values()):
            return  # headroom unknown: no verdict
        if any(v["event"] for v in states.values()):
            return  # a link event is open: the network may be the cause
        top = max(states.values(), key=lambda v: v["util"])
        if top["util"] >= cfg.max_link_util:
            return
        sport = states[storage]
        ent = {
            "job": job, "storage": storage, "signal": what.replace(" ", "_"),
            "throughput_bps": f"{got * 8 / size_s:.0f}", "baseline_bps": f"{ref * 8 / size_s:.0f}",
            "ratio": f"{got / ref:.3f}", "windows": str(windows), "reference": reference,
            "max_link_util": f"{top['util']:.3f}", "link_headroom": f"{1 - top['util']:.3f}",
            "storage_port": sport["port"], "storage_port_util": f"{sport['util']:.3f}",
            "ports_checked": str(len(ports)),
        }
        self.alerts.observe(Condition(
            rule=RULE, key=(job, storage, what.replace(" ", "_")),
            summary=(f"job {job}: {what} with {storage} at {_bps(got * 8 / size_s)}, {got / ref:.0%} of {_REF_TEXT[reference]} "
                     f"{_bps(ref * 8 / size_s)} for {windows} windows, while the {len(ports)} ports involved stay at "
                     f"<= {top['util']:.0%} utilisation with no link event: the network is not the bottleneck"),
            entities=ent, first_seen_ms=ws, last_seen_ms=we, bytes_est=int(got),
        ))

    def snapshot(self) -> dict:
        return {"pairs": {k: {**v, "reads": list(v["reads"]), "bursts": list(v["bursts"]), "burst": list(v["burst"])}
                          for k, v in sorted(self.pairs.items())},
                "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.pairs = {k: {**v, "reads": [int(x) for x in v["reads"]], "bursts": [int(x) for x in v["bursts"]],
                          "burst": [int(x) for x in v["burst"]]} for k, v in snap["pairs"].items()}
        self.alerts.restore(snap["alerts"])
