"""Per-job communication pattern: the period of the compute/communication cycle and the node pairs
carrying the collective, from the closed windows of the traffic matrix.

After ``baseline_windows`` windows the first estimate becomes the job's baseline (``pattern_baseline``);
later windows report a ``pattern_deviation`` (``open`` / ``close``) when the pair set or the period
moves away from it. Method, limits and the output record: docs/detectors.md, "Pattern".
The output dicts follow ``schemas/avro/pattern.avsc``, shared with the ``pattern_timeline`` records of
processors/logic/detectors/timeline.py (their timeline fields stay empty here); ``structure`` comes from
:func:`collective_structure`.
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from statistics import median

import numpy as np
from pydantic import Field

from ..params import detector_params
from ..windows.groupby import group_reduce
from ..windows.interning import Interner

__all__ = ["PatternConfig", "PatternDetector", "estimate_period", "acf_peak", "window_period", "collective_structure"]


@detector_params
class PatternConfig:
    """Job pattern parameters (docs/detectors.md, "Pattern")."""

    categories: tuple[str, ...] = Field(("collective", "rocev2"), description="App categories of the collective traffic whose pattern is tracked")
    baseline_windows: int = Field(30, ge=2, description="Windows of history that make a job's baseline (and the period estimate)")
    recent_windows: int = Field(6, ge=1, description="Recent windows the structure is judged on")
    presence: float = Field(0.5, gt=0, le=1, description="Share of the recent windows a pair must be present in")
    min_pair_share: float = Field(0.01, ge=0, le=1, description="Share of the job's window bytes a pair needs to count")
    min_acf: float = Field(0.3, gt=0, le=1, description="Autocorrelation a period needs to be accepted")
    period_tolerance: float = Field(0.2, gt=0, description="Relative period change that is a period shift")
    min_modulation: float = Field(0.5, ge=0, le=1, description="Depth a window-scale cycle needs, 1 - (10th percentile / 90th percentile) of the window bytes: iterations shorter than a window only wobble the bytes of each window (aliasing beats) and give no period")
    persist_windows: int = Field(6, ge=1, description="Windows in a row a new period (the same one, within period_tolerance) must be measured before a period shift opens")
    max_history: int = Field(120, ge=1, description="Windows of history kept per job")


def estimate_period(series: np.ndarray, min_acf: float = 0.3) -> int | None:
    """Period in windows, or None when not periodic.

    The period is the lag with the highest autocorrelation among the lags that
    are local peaks of the autocorrelation (r(k) > r(k-1) and r(k) >= r(k+1))
    and reach ``min_acf``. A level
    shift or trend makes r decay monotonically from lag 1: no local peak, so it
    is not mistaken for a period (it used to come out as lag 2).
    """
    peak = acf_peak(series, min_acf)
    return None if peak is None else peak[0]


def acf_peak(series, min_acf: float) -> tuple[int, float] | None:
    """(lag, autocorrelation) of :func:`estimate_period`'s peak, or None."""
    x = np.asarray(series, dtype=np.float64)
    n = len(x)
    if n < 4:
        return None
    x = x - x.mean()
    denom = float(np.dot(x, x))
    if denom <= 0:
        return None
    kmax = n // 2
    r = np.array([1.0] + [float(np.dot(x[:-k], x[k:])) / denom for k in range(1, kmax + 2) if k < n], dtype=np.float64)
    floor = min_acf
    best_k, best = None, -np.inf
    for k in range(2, kmax + 1):
        if k + 1 >= len(r):
            nxt = -np.inf
        else:
            nxt = r[k + 1]
        if r[k] > r[k - 1] and r[k] >= nxt and r[k] >= floor and r[k] > best + 1e-12:
            best_k, best = k, float(r[k])
    return None if best_k is None else (best_k, best)


def window_period(series, min_acf: float = 0.3, min_modulation: float = 0.5) -> tuple[int, float] | None:
    """(period in windows, its autocorrelation as the confidence) of a window-scale cycle, or None.

    :func:`estimate_period`'s peak, accepted only when the cycle is deep: ``1 - p10 / p90`` of the window
    bytes at least ``min_modulation``. A job whose iterations are shorter than a window puts a few of them
    into every window; how many (4 or 5 of 2.2 s in 10 s) beats slowly and deterministically, an
    autocorrelation peak of ~10 % depth that is not the job's cycle (it came out as 110 s), and slow
    structure (dataset reads, checkpoints) adds shallow wobbles of its own.
    """
    x = np.asarray(series, dtype=np.float64)
    if len(x) < 4:
        return None
    p10, p90 = np.percentile(x, [10, 90])
    if p90 <= 0 or 1.0 - p10 / p90 < min_modulation:
        return None
    return acf_peak(x, min_acf)


def _pairs_present(history: list[list[str]], presence: float) -> set[str]:
    if not history:
        return set()
    counts: dict[str, int] = {}
    for pairs in history:
        for p in pairs:
            counts[p] = counts.get(p, 0) + 1
    need = presence * len(history)
    return {p for p, c in counts.items() if c >= need}


def _split(p: str) -> list[str]:
    return p.split("\x00", 1)


def _peers(pairs: set[str]) -> dict[str, list[str]]:
    peers: dict[str, set[str]] = {}
    for p in pairs:
        a, b = _split(p)
        peers.setdefault(a, set()).add(b)
        peers.setdefault(b, set()).add(a)
    return {k: sorted(v) for k, v in sorted(peers.items())}


def collective_structure(peers: dict[str, list[str]]) -> str:
    """ring / tree / all_to_all / unknown from each node's collective peers (undirected)."""
    nodes = sorted(peers)
    n = len(nodes)
    if n < 2:
        return "unknown"
    edges = {tuple(sorted((a, b))) for a, ps in peers.items() for b in ps if a != b}
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        for b in peers.get(todo.pop(), ()):
            if b not in seen:
                seen.add(b)
                todo.append(b)
    if len(seen) != n:
        return "unknown"
    if n == 2:
        return "ring"
    deg = [len(set(peers[a]) - {a}) for a in nodes]
    if all(d == 2 for d in deg) and len(edges) == n:
        return "ring"
    if n >= 4 and all(d == n - 1 for d in deg):
        return "all_to_all"
    if len(edges) == n - 1:
        return "tree"
    return "unknown"


class PatternDetector:
    def __init__(self, config: PatternConfig = PatternConfig()):
        self.config = config
        # job -> {"last_ws", "series": [bytes...], "pairs": [[pair...]...], "baseline": {...} | None,
        #         "open": {deviation: True}}
        self.jobs: dict[str, dict] = {}
        # job -> {"hist": [[iteration period ms, acf]...], "base": {...} | None, "open": bool} (observe_iteration)
        self.iterations: dict[str, dict] = {}

    def on_window(self, ws: int, we: int, cells: dict[str, np.ndarray], interner: Interner) -> list[dict]:
        cfg = self.config
        size = we - ws
        empty = interner.code("")
        m = np.isin(cells["cat"], interner.known(cfg.categories))
        m &= (cells["sj"] == cells["dj"]) & (cells["sj"] != empty) & (cells["sn"] != empty) & (cells["dn"] != empty)
        keys, sums, _ = group_reduce(
            [cells["sj"][m], cells["sn"][m], cells["dn"][m]], [cells["bytes_est"][m]]
        )
        jobs = interner.lookup(keys[0]).tolist()
        src = interner.lookup(keys[1]).tolist()
        dst = interner.lookup(keys[2]).tolist()
        byts = sums[0].tolist()
        totals: dict[str, int] = {}
        for j, b in zip(jobs, byts):
            totals[j] = totals.get(j, 0) + b
        pairs: dict[str, list[str]] = {}
        for j, s, d, b in zip(jobs, src, dst, byts):
            if b >= cfg.min_pair_share * totals[j]:
                pairs.setdefault(j, []).append(f"{s}\x00{d}")
        out: list[dict] = []
        for job in sorted(set(totals) | set(self.jobs)):
            st = self.jobs.get(job)
            if st is None:
                st = self.jobs[job] = {"last_ws": ws - size, "series": [], "pairs": [], "baseline": None, "open": {}}
            gap = max(0, (ws - st["last_ws"]) // size - 1)
            gap = min(gap, cfg.max_history)
            st["series"] = (st["series"] + [0] * gap + [totals.get(job, 0)])[-cfg.max_history :]
            st["pairs"] = (st["pairs"] + [[] for _ in range(gap)] + [sorted(pairs.get(job, []))])[-cfg.max_history :]
            st["last_ws"] = ws
            if sum(st["series"][-cfg.max_history :]) == 0:
                del self.jobs[job]  # job gone
                continue
            out.extend(self._evaluate(job, st, ws, we, size))
        return out

    def _current(self, st: dict, size: int) -> tuple[int, float, set[str]]:
        """(period ms or -1, its autocorrelation or 0, the pairs present now)."""
        cfg = self.config
        peak = window_period(st["series"][-cfg.baseline_windows :], cfg.min_acf, cfg.min_modulation)
        # pair presence over the last recent_windows windows that carried collective traffic
        active = [p for p in st["pairs"][-cfg.baseline_windows :] if p][-cfg.recent_windows :]
        period_ms, acf = (-1, 0.0) if peak is None else (peak[0] * size, peak[1])
        return period_ms, acf, _pairs_present(active, cfg.presence)

    def peers(self, job: str) -> dict[str, list[str]]:
        """Each node's collective peers in ``job`` now (pair presence over the recent windows); {} when unknown."""
        st = self.jobs.get(job)
        if st is None:
            return {}
        active = [p for p in st["pairs"][-self.config.baseline_windows:] if p][-self.config.recent_windows:]
        return _peers(_pairs_present(active, self.config.presence))

    def observe_iteration(self, job: str, ws: int, we: int, period_ms: int, acf: float) -> list[dict]:
        """One window's iteration period (-1: none) and its autocorrelation, measured by the training timeline
        on sub-window slots of the job's communication alone (dataset reads and checkpoint writes are other
        phases, so slower structure does not enter it); returns ``iteration_shift`` deviations.

        The baseline is the median of the first ``baseline_windows`` measurements (at least half of them
        measured), its confidence the share of them within ``period_tolerance`` of it. A shift opens when the
        last ``persist_windows`` measurements all agree (the largest within ``period_tolerance`` of the
        smallest) on a period (their median) away from the baseline, and closes when they agree on the baseline again; a window that
        measures nothing, or a harmonic now and then, neither opens nor closes one.
        """
        cfg = self.config
        tol = cfg.period_tolerance
        st = self.iterations.setdefault(job, {"hist": [], "base": None, "open": False})
        st["hist"] = (st["hist"] + [[int(period_ms), round(float(acf), 4)]])[-cfg.baseline_windows:]
        if st["base"] is None:
            valid = [p for p, _ in st["hist"] if p > 0]
            if len(st["hist"]) < cfg.baseline_windows or 2 * len(valid) < cfg.baseline_windows:
                return []
            bp = int(median(valid))
            conf = sum(abs(p - bp) <= tol * bp for p in valid) / len(st["hist"])
            st["base"] = {"period_ms": bp, "confidence": round(conf, 4), "windows": len(st["hist"])}
            return []
        recent = st["hist"][-cfg.persist_windows:]
        periods = [p for p, _ in recent]
        if len(recent) < cfg.persist_windows or min(periods) <= 0:
            return []
        if max(periods) > (1 + tol) * min(periods):
            return []  # they do not agree (a harmonic, or the change half way through the run)
        m = int(median(periods))
        bp = st["base"]["period_ms"]
        away = abs(m - bp) > tol * bp
        if away == st["open"]:
            return []
        st["open"] = away
        pairs = self._current(self.jobs[job], we - ws)[2] if job in self.jobs else set()
        if away:
            detail = (f"iteration period {bp} ms (confidence {st['base']['confidence']:.2f}: share of its "
                      f"{st['base']['windows']} baseline windows within {tol:.0%} of it) -> {m} ms (autocorrelation "
                      f"{median(a for _, a in recent):.2f}), measured in {len(recent)} windows in a row")
        else:
            detail = "back to baseline"
        return [self._record("pattern_deviation", "open" if away else "close", job, "iteration_shift", ws, we,
                             detail, bp, m, set(), set(), pairs)]

    def _evaluate(self, job: str, st: dict, ws: int, we: int, size: int) -> list[dict]:
        cfg = self.config
        if len(st["series"]) < cfg.baseline_windows:
            return []
        period_ms, acf, pairs = self._current(st, size)
        base = st["baseline"]
        if base is None:
            st["baseline"] = {"period_ms": period_ms, "acf": acf, "pairs": sorted(pairs)}
            return [self._record("pattern_baseline", "open", job, "baseline", ws, we, "baseline established",
                                 period_ms, period_ms, set(), set(), pairs)]
        out = []
        bpairs = set(base["pairs"])
        added, removed = pairs - bpairs, bpairs - pairs
        devs = {}
        if added or removed:
            devs["pairs_changed"] = f"{len(added)} pairs added, {len(removed)} removed"
        bp = base["period_ms"]
        shift = self._period_shift(st, bp, period_ms)
        if shift >= cfg.persist_windows or (shift and st["open"].get("period_shift")):
            devs["period_shift"] = (f"period {bp} ms (autocorrelation {base.get('acf', 0.0):.2f}) -> {period_ms} ms "
                                    f"(autocorrelation {acf:.2f}), measured in {shift} windows in a row")
        elif period_ms < 0 and st["open"].get("period_shift"):
            devs["period_shift"] = "period not measurable"  # keep an open shift open while unclear
        for dev in ("pairs_changed", "period_shift"):
            was = st["open"].get(dev, False)
            if dev in devs and not was:
                st["open"][dev] = True
                out.append(self._record("pattern_deviation", "open", job, dev, ws, we, devs[dev], bp, period_ms,
                                        added, removed, pairs))
            elif dev not in devs and was:
                del st["open"][dev]
                out.append(self._record("pattern_deviation", "close", job, dev, ws, we, "back to baseline", bp,
                                        period_ms, added, removed, pairs))
        return out

    def _period_shift(self, st: dict, bp: int, period_ms: int) -> int:
        """Windows in a row (this one included) whose period is away from the baseline's ``bp`` and the same
        as the previous window's (within ``period_tolerance``); 0 when this window's is not a shift."""
        tol = self.config.period_tolerance
        if not (bp > 0 and period_ms > 0 and abs(period_ms - bp) > tol * bp):
            st["shift"] = [0, -1]
            return 0
        run, last = st.get("shift", [0, -1])
        run = run + 1 if last > 0 and abs(period_ms - last) <= tol * last else 1
        st["shift"] = [run, period_ms]
        return run

    @staticmethod
    def _record(kind, state, job, dev, ws, we, detail, bp, cp, added, removed, pairs) -> dict:
        return {
            "kind": kind,
            "state": state,
            "job": job,
            "deviation": dev,
            "window_start_ms": int(ws),
            "window_end_ms": int(we),
            "detail": detail,
            "baseline_period_ms": int(bp),
            "current_period_ms": int(cp),
            "added_pairs": [_split(p) for p in sorted(added)],
            "removed_pairs": [_split(p) for p in sorted(removed)],
            "peers": _peers(pairs),
            "structure": collective_structure(_peers(pairs)),
            # timeline fields (kind pattern_timeline, processors/logic/detectors/timeline.py): empty here
            "iteration_period_ms": -1, "slot_ms": 0, "phases": [],
            "communication_bytes": 0, "dataset_read_bytes": 0, "checkpoint_write_bytes": 0,
        }

    def snapshot(self) -> dict:
        return {"jobs": {j: {"last_ws": s["last_ws"], "series": list(s["series"]),
                             "pairs": [list(p) for p in s["pairs"]],
                             "baseline": None if s["baseline"] is None else dict(s["baseline"]),
                             "open": dict(s["open"]), "shift": list(s.get("shift", [0, -1]))}
                         for j, s in sorted(self.jobs.items())},
                "iterations": {j: {"hist": [list(h) for h in s["hist"]],
                                   "base": None if s["base"] is None else dict(s["base"]), "open": s["open"]}
                               for j, s in sorted(self.iterations.items())}}

    def restore(self, snap: dict) -> None:
        self.jobs = {j: {"last_ws": int(s["last_ws"]), "series": [int(x) for x in s["series"]],
                         "pairs": [list(p) for p in s["pairs"]],
                         "baseline": None if s["baseline"] is None else
                         {"period_ms": int(s["baseline"]["period_ms"]), "acf": float(s["baseline"].get("acf", 0.0)),
                          "pairs": list(s["baseline"]["pairs"])},
                         "open": dict(s["open"]), "shift": [int(x) for x in s.get("shift", [0, -1])]}
                     for j, s in snap["jobs"].items()}
        self.iterations = {j: {"hist": [[int(h[0]), float(h[1])] for h in s["hist"]],
                               "base": None if s["base"] is None else
                               {"period_ms": int(s["base"]["period_ms"]), "confidence": float(s["base"]["confidence"]),
                                "windows": int(s["base"]["windows"])},
                               "open": bool(s["open"])}
                           for j, s in snap.get("iterations", {}).items()}
