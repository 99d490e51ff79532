"""Training timeline: per job and main window, the phases (communication, dataset reads, checkpoint
writes, idle) at sub-window resolution, the iteration period and the collective structure.

:class:`PhaseAggregator` reduces the main windows' flows per (job, phase, slot of ``slot_ms``);
:class:`TimelineDetector` turns each closed window into phase segments, the iteration period (the
autocorrelation peak of the communication slots) and the structure (ring, tree, all_to_all) from the
pattern detector's peer pairs, as ``pattern_timeline`` records on ``patterns.v1``. The rules, the
parameters and what flow data cannot show: docs/detectors.md, "Training timeline".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner
from ..windows.tumbling import ChunkedAggregator, concat_chunks
from .pattern import PatternDetector, acf_peak, collective_structure

__all__ = ["TimelineConfig", "PhaseAggregator", "TimelineDetector", "PHASES"]

PHASES = ("communication", "dataset_read", "checkpoint_write")


@detector_params
class TimelineConfig:
    """Training timeline parameters (docs/detectors.md, "Training timeline")."""

    slot_ms: int = Field(250, ge=1, description="Resolution of the phase segments (ms; a window not a multiple of it ends with a shorter slot)")
    active_fraction: float = Field(0.2, gt=0, le=1, description="A slot is active for a phase at this share of the phase's busiest slot in the window")
    min_slot_bps: float = Field(100e6, ge=0, description="Bit/s a slot of a phase needs to be active")
    period_windows: int = Field(3, ge=1, description="Windows of communication slots the iteration period is estimated over")
    min_acf: float = Field(0.3, gt=0, le=1, description="Autocorrelation an iteration period needs to be accepted")
    close_gaps: bool = Field(True, description="Count one quiet slot between two active ones as active (sampling misses a slot now and then)")


class PhaseAggregator(ChunkedAggregator):
    """Main-window aggregator of byte sums per (job code, phase x slots + slot)."""

    def __init__(self, slot_ms: int, window_ms: int):
        self.slot_ms = int(slot_ms)
        self.nslots = max(1, -(-int(window_ms) // self.slot_ms))

    def chunk(self, rows: dict, window_start: int) -> dict:
        slot = np.clip((rows["t"] - window_start) // self.slot_ms, 0, self.nslots - 1)
        return {"job": rows["job"], "key": rows["phase"].astype(np.int64) * self.nslots + slot, "bytes": rows["bytes"]}

    def reduce(self, chunks: list[dict]) -> dict:
        cat = concat_chunks(chunks)
        keys, sums, _ = group_reduce([cat["job"], cat["key"]], [cat["bytes"]])
        return {"job": keys[0], "key": keys[1], "bytes": sums[0]}


def _runs(active: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) slot ranges of the True runs of a boolean array."""
    d = np.diff(np.r_[0, active.astype(np.int8), 0])
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


class TimelineDetector:
    def __init__(self, config: TimelineConfig = TimelineConfig(), window_ms: int = 10_000):
        self.config = config
        self.window_ms = int(window_ms)
        self.nslots = PhaseAggregator(config.slot_ms, window_ms).nslots
        self.jobs: dict[str, dict] = {}  # job -> {"last_ws", "comm": [slot bytes of the last period_windows]}

    def on_window(self, ws: int, we: int, res: dict | None, interner: Interner,
                  pattern: PatternDetector | None = None, judge_iterations: bool = True) -> list[dict]:
        cfg = self.config
        ws, we = int(ws), int(we)
        ns = self.nslots
        per_job: dict[str, np.ndarray] = {}
        if res is not None and len(res["job"]):
            for j, k, b in zip(interner.lookup(res["job"]).tolist(), res["key"].tolist(), res["bytes"].tolist()):
                per_job.setdefault(j, np.zeros(3 * ns, dtype=np.int64))[k] += b
        out = []
        for job in sorted(set(per_job) | set(self.jobs)):
            st = self.jobs.setdefault(job, {"last_ws": ws - self.window_ms, "comm": []})
            gap = min(max(0, (ws - st["last_ws"]) // self.window_ms - 1), cfg.period_windows)
            arr = per_job.get(job)
            st["comm"] = (st["comm"] + [0] * (gap * ns) + (arr[:ns].tolist() if arr is not None else [0] * ns)
                          )[-cfg.period_windows * ns:]
            st["last_ws"] = ws
            if arr is None:
                if not any(st["comm"]):
                    del self.jobs[job]
                continue
            rec, acf = self._record(job, ws, we, arr.reshape(3, ns), st, pattern)
            out.append(rec)
            if pattern is not None and judge_iterations:  # the pattern detector judges the iteration period over time
                out.extend(pattern.observe_iteration(job, ws, we, rec["iteration_period_ms"], acf))
        return out

    def _record(self, job: str, ws: int, we: int, arr: np.ndarray, st: dict,
                pattern: PatternDetector | None) -> tuple[dict, float]:
        """The window's ``pattern_timeline`` record and the autocorrelation of its iteration period (0: none)."""
        cfg = self.config
        slot = cfg.slot_ms
        floor = cfg.min_slot_bps / 8 * slot / 1000
        segs = []
        any_active = np.zeros(arr.shape[1], dtype=bool)
        for p, name in enumerate(PHASES):
            row = arr[p]
            active = (row >= max(cfg.active_fraction * int(row.max()), floor)) & (row > 0)
            if cfg.close_gaps and len(active) > 2:  # one quiet slot between active ones: a sampling gap
                active[1:-1] |= active[:-2] & active[2:]
            any_active |= active
            for a, b in _runs(active):
                segs.append({"phase": name, "start_ms": ws + a * slot, "end_ms": min(we, ws + b * slot),
                             "bytes_est": int(row[a:b].sum())})
        for a, b in _runs(~any_active):
            segs.append({"phase": "idle", "start_ms": ws + a * slot, "end_ms": min(we, ws + b * slot), "bytes_est": 0})
        segs.sort(key=lambda s: (s["start_ms"], PHASES.index(s["phase"]) if s["phase"] in PHASES else 3))
        peak = acf_peak(np.array(st["comm"], dtype=np.float64), cfg.min_acf) if any(st["comm"]) else None
        lag, acf = (None, 0.0) if peak is None else peak
        peers = pattern.peers(job) if pattern is not None else {}
        return {
            "kind": "pattern_timeline", "state": "", "job": job, "deviation": "",
            "window_start_ms": ws, "window_end_ms": we, "detail": "",
            "baseline_period_ms": -1, "current_period_ms": -1, "added_pairs": [], "removed_pairs": [],
            "peers": peers, "structure": collective_structure(peers),
            "iteration_period_ms": -1 if lag is None else int(lag * slot), "slot_ms": int(slot),
            "phases": segs,
            "communication_bytes": int(arr[0].sum()), "dataset_read_bytes": int(arr[1].sum()),
            "checkpoint_write_bytes": int(arr[2].sum()),
        }, acf

    def snapshot(self) -> dict:
        return {"jobs": {j: {"last_ws": s["last_ws"], "comm": list(s["comm"])} for j, s in sorted(self.jobs.items())}}

    def restore(self, snap: dict) -> None:
        self.jobs = {j: {"last_ws": int(s["last_ws"]), "comm": [int(x) for x in s["comm"]]}
                     for j, s in snap["jobs"].items()}
