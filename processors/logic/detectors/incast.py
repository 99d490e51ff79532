"""Incast detection: many sources bursting to one destination in a short window.

Per short window, per (destination, source) the estimated rate (``IncastAggregator``, fed with
interned codes by the engine); :class:`IncastDetector` turns destinations receiving from many sources
near their link capacity into IncastEvent dicts (incast_event.avsc), with hysteresis so one burst is
one event, and bounds on the fraction from the sampling error. Method: docs/detectors.md, "Incast".
Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from pydantic import Field

from schemas.columns import addr_str

from ..params import detector_params
from ..windows.groupby import group_reduce, reduce_runs
from ..windows.interning import Interner
from ..windows.tumbling import ChunkedAggregator, concat_chunks

__all__ = ["IncastConfig", "IncastAggregator", "IncastDetector", "endpoint_codes", "as_capacity"]


@detector_params
class IncastConfig:
    """Incast detector parameters (docs/detectors.md, "Incast")."""

    window_ms: int = Field(1_000, ge=1, description="Short window length (ms); processors.incast_window_s sets it unless given here")
    lateness_ms: int = Field(2_000, ge=0, description="Allowed lateness of the short windows (kept small so events are timely; older NetFlow/IPFIX records count as too late here)")
    min_sources: int = Field(4, ge=1, description="Distinct sources needed to open an event")
    open_fraction: float = Field(0.8, gt=0, description="Aggregate rate / destination capacity that opens an event")
    close_fraction: float = Field(0.5, ge=0, description="Aggregate rate / capacity below which a window counts as quiet (hysteresis)")
    close_after_windows: int = Field(3, ge=1, description="Consecutive quiet windows that close an event; processors.incast_close_after_s sets it unless given here")
    categories: tuple[str, ...] = Field(("collective", "rocev2", "other"), description="App categories that count (storage checkpoint bursts are excluded unless added)")
    default_capacity_bps: float = Field(100e9, gt=0, description="Capacity when the inventory knows none; processors.default_capacity_bps sets it unless given here")
    z: float = Field(1.96, gt=0, description="Normal quantile of the fraction bounds (1.96 ~ 95 %)")


KEYS = ("dst", "src", "dgrp")
# sampled packets for the diagnosis: with an ECT or CE codepoint, CE-marked, RoCEv2 CNPs (counted at the row, i.e.
# towards the CNP's destination; the detector credits them to their source), in category rocev2, with a BTH
SIGNALS = ("n_ect", "n_ce", "n_cnp", "n_roce", "n_bth")
SUMS = ("rate_bps", "rate_sampled_bps", "samples", "samples_sampled", *SIGNALS)
MAXES = ("max_rate",)


def as_capacity(capacity, default: float) -> Callable[[str], float]:
    """Callable node -> capacity (bps) from a callable, a mapping or None."""
    if capacity is None:
        return lambda node: default
    if isinstance(capacity, Mapping):
        return lambda node: float(capacity.get(node, default))
    return lambda node: float(capacity(node) or default)


def endpoint_codes(
    node_codes: np.ndarray, addrs: np.ndarray, interner: Interner, rows: np.ndarray | None = None
) -> np.ndarray:
    """Node code, or the code of the address text where the node is unknown ("").

    ``rows``: ``addrs`` is the whole column and ``node_codes`` belong to these rows of it (indices).
    """
    unknown = np.flatnonzero(node_codes == interner.code(""))
    if not len(unknown):
        return node_codes
    out = node_codes.copy()
    at = unknown if rows is None else rows[unknown]
    view = np.ascontiguousarray(addrs[at], dtype=np.uint8).view(np.dtype((np.void, 16))).ravel()
    uniq, inv = np.unique(view, return_inverse=True)
    lut = np.fromiter((interner.code(addr_str(u.tobytes())) for u in uniq), dtype=np.int32, count=len(uniq))
    out[unknown] = lut[inv.ravel()]
    return out


def _sum_by(codes: np.ndarray, values: np.ndarray) -> dict[int, int]:
    """code -> sum of ``values`` over the rows with that code (rows with a value only)."""
    m = values > 0
    if not m.any():
        return {}
    u, inv = np.unique(codes[m], return_inverse=True)
    tot = np.bincount(inv.ravel(), weights=values[m].astype(np.float64))
    return {int(c): int(v) for c, v in zip(u.tolist(), tot.tolist())}


def _add_signals(ev: dict, d: dict | None) -> None:
    """Accumulate a window's signals into the open event (the sampling rate as a maximum)."""
    if d is None:
        return
    old = ev.get("sig") or [0] * 7
    new = d["sig"]
    ev["sig"] = [a + b for a, b in zip(old[:6], new[:6])] + [max(old[6], new[6])]


class IncastAggregator(ChunkedAggregator):
    """Short-window aggregator: integer rate sums per (dst, src, dst group)."""

    def chunk(self, rows: dict, window_start: int) -> dict:
        return {k: rows[k] for k in (*KEYS, *SUMS, *MAXES)}

    def reduce(self, chunks: list[dict]) -> dict:
        cat = concat_chunks(chunks)
        keys, sums, maxes = group_reduce([cat[k] for k in KEYS], [cat[s] for s in SUMS], [cat[m] for m in MAXES])
        out = dict(zip(KEYS, keys))
        out.update(zip(SUMS, sums))
        out.update(zip(MAXES, maxes))
        return out


class IncastDetector:
    """Hysteresis over closed short windows, per destination."""

    def __init__(self, config: IncastConfig = IncastConfig(), capacity_bps=None):
        self.config = config
        self.capacity = as_capacity(capacity_bps, config.default_capacity_bps)
        # destination -> {"event_id", "start", "below", "last_ws"}
        self.open_events: dict[str, dict] = {}

    def _event(self, state: str, ev: dict, ws: int, dst: str, dgroup: str, d: dict | None) -> dict:
        size = self.config.window_ms
        if d is None:
            d = {"sources": [], "rates": [], "agg": 0.0, "cap": self.capacity(dst), "frac": 0.0,
                 "low": 0.0, "high": 0.0, "samples": 0, "max_rate": 0}
        return {
            "event_id": ev["event_id"],
            "state": state,
            "window_start_ms": int(ws),
            "window_end_ms": int(ws + size),
            "destination": dst,
            "destination_group": dgroup,
            "sources": list(d["sources"]),
            "source_rates_bps": [float(r) for r in d["rates"]],
            "aggregate_bps": float(d["agg"]),
            "capacity_bps": float(d["cap"]),
            "fraction": float(d["frac"]),
            "fraction_low": float(d["low"]),
            "fraction_high": float(d["high"]),
            "samples": int(d["samples"]),
            "sampling_rate": int(d["max_rate"]),
            "dst_port": "",  # the engine fills these two from the link state (cause link: drops at the port)
            "dst_out_discards_per_s": -1.0,
            "diagnosis": None,  # the engine fills it (processors/logic/diagnosis) and pops "_signals"
            # sampled-packet signals of the event so far: samples, ect, ce, cnp, roce, bth, sampling rate
            "_signals": list(ev.get("sig") or [0, 0, 0, 0, 0, 0, 0]),
        }

    def _destinations(self, res: dict | None, interner: Interner) -> dict[str, tuple[str, dict]]:
        """destination name -> (group, stats) for one closed window.

        Vectorised over destinations; the per-source detail is only built for
        destinations that can open an event or have one open.
        """
        out: dict[str, tuple[str, dict]] = {}
        if res is None or len(res["dst"]) == 0:
            return out
        cfg = self.config
        # one row per (dst, src), dropping the dst group (a destination has one group)
        keys, sums, maxes = reduce_runs(  # res is sorted by (dst, src, dst group): (dst, src) rows are runs
            [res["dst"], res["src"]],
            [res["rate_bps"], res["rate_sampled_bps"], res["samples"], res["samples_sampled"]],
            [res["max_rate"]],
        )
        dst, src = keys
        rate, rate_s, smp, smp_s = sums
        starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
        agg = np.add.reduceat(rate, starts)
        n_src = np.add.reduceat((rate > 0).astype(np.int64), starts)
        names = interner.lookup(dst[starts]).tolist()
        caps = np.array([self.capacity(n) for n in names], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(caps > 0, agg / caps, 0.0)
        want = (n_src >= cfg.min_sources) & (frac >= cfg.open_fraction)
        want |= np.array([n in self.open_events for n in names], dtype=bool)
        if not want.any():
            return out
        first_row = np.searchsorted(res["dst"], dst[starts])  # res is sorted by dst first
        groups = interner.lookup(res["dgrp"][first_row]).tolist()
        sig = [np.add.reduceat(res[c], first_row) for c in ("samples", "n_ect", "n_ce", "n_roce", "n_bth")]
        cnp_by_src = _sum_by(res["src"], res["n_cnp"])
        bounds = np.r_[starts, len(dst)]
        z = cfg.z
        for i in np.flatnonzero(want).tolist():
            lo, hi = bounds[i], bounds[i + 1]
            r = rate[lo:hi]
            keep = r > 0
            srcs = interner.lookup(src[lo:hi][keep]).tolist()
            order = sorted(zip((-r[keep]).tolist(), srcs))
            a = float(agg[i])
            f = float(frac[i])
            c = int(smp_s[lo:hi].sum())
            share = float(rate_s[lo:hi].sum()) / a if a > 0 else 0.0
            se = f * share * math.sqrt(1.0 / c) if c > 0 else 0.0
            out[names[i]] = (
                groups[i],
                {
                    "sources": [s for _, s in order],
                    "rates": [float(-nr) for nr, _ in order],
                    "agg": a,
                    "cap": float(caps[i]),
                    "frac": f,
                    "low": max(0.0, f - z * se),
                    "high": f + z * se,
                    "samples": int(smp[lo:hi].sum()),
                    "max_rate": int(maxes[0][lo:hi].max()),
                    # samples, ect, ce, cnp (sent by the destination), roce, bth, sampling rate
                    "sig": [int(sig[0][i]), int(sig[1][i]), int(sig[2][i]), cnp_by_src.get(int(dst[starts][i]), 0),
                            int(sig[3][i]), int(sig[4][i]), int(maxes[0][lo:hi].max())],
                },
            )
        return out

    def on_window(self, ws: int, res: dict | None, interner: Interner) -> list[dict]:
        """Evaluate one closed short window (call in window order)."""
        cfg = self.config
        size = cfg.window_ms
        out: list[dict] = []
        dests = self._destinations(res, interner)
        # windows skipped since the last evaluation of an open event count as below
        for dname in sorted(self.open_events):
            ev = self.open_events[dname]
            gap = (ws - ev["last_ws"]) // size - 1
            if gap > 0 and ev["below"] + gap >= cfg.close_after_windows:
                close_ws = ev["last_ws"] + (cfg.close_after_windows - ev["below"]) * size
                out.append(self._event("close", ev, close_ws, dname, ev["group"], None))
                del self.open_events[dname]
            elif gap > 0:
                ev["below"] += gap
        for dname in sorted(set(dests) | set(self.open_events)):
            group, d = dests.get(dname, ("", None))
            ev = self.open_events.get(dname)
            if ev is None:
                if d is not None and len(d["sources"]) >= cfg.min_sources and d["frac"] >= cfg.open_fraction:
                    ev = {"event_id": f"{dname}@{ws}", "start": ws, "below": 0, "last_ws": ws, "group": group}
                    _add_signals(ev, d)
                    self.open_events[dname] = ev
                    out.append(self._event("open", ev, ws, dname, group, d))
                continue
            ev["last_ws"] = ws
            _add_signals(ev, d)
            if d is not None and d["frac"] >= cfg.close_fraction:
                ev["below"] = 0
                out.append(self._event("update", ev, ws, dname, ev["group"], d))
            else:
                ev["below"] += 1
                if ev["below"] >= cfg.close_after_windows:
                    out.append(self._event("close", ev, ws, dname, ev["group"], d))
                    del self.open_events[dname]
        return out

    def close_idle(self) -> list[dict]:
        """Stream idle: close every open event as if its remaining windows were empty."""
        cfg = self.config
        out = []
        for dname in sorted(self.open_events):
            ev = self.open_events.pop(dname)
            close_ws = ev["last_ws"] + (cfg.close_after_windows - ev["below"]) * cfg.window_ms
            out.append(self._event("close", ev, close_ws, dname, ev["group"], None))
        return out

    def snapshot(self) -> dict:
        return {"open_events": {k: dict(v) for k, v in sorted(self.open_events.items())}}

    def restore(self, snap: dict) -> None:
        self.open_events = {k: dict(v) for k, v in snap["open_events"].items()}
