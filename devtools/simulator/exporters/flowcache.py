"""Flow cache of a NetFlow v9 / IPFIX metering process: sampling, active/inactive timeouts.

Segments observed by the exporter are (optionally packet-sampled, random 1-in-N) added
to per-key entries; :meth:`FlowCache.expire` returns the records whose active timeout
(measured from the first packet) or inactive timeout (from the last packet) has passed,
so long flows come out as several records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class FlowEntry:
    src: int
    dst: int
    sport: int
    dport: int
    proto: int
    tos: int
    in_if: int
    out_if: int
    first_ms: int
    last_ms: int
    packets: int = 0
    bytes: int = 0
    tcp_flags: int = 0


class FlowCache:
    def __init__(self, active_ms: int, inactive_ms: int, sampling_interval: int, rng: np.random.Generator):
        self.active_ms = active_ms
        self.inactive_ms = inactive_ms
        self.n = max(1, sampling_interval)
        self.rng = rng
        self.entries: dict[tuple, FlowEntry] = {}
        self.observed_bytes = 0  # before sampling, for truth cross-checks

    def add(self, segs: np.ndarray, in_if: np.ndarray, out_if: np.ndarray) -> None:
        if len(segs) == 0:
            return
        self.observed_bytes += int(segs["bytes"].sum())
        pk = segs["packets"]
        if self.n > 1:
            spk = self.rng.binomial(pk, 1.0 / self.n)
            sby = np.rint(spk * (segs["bytes"] / pk)).astype(np.int64)
        else:
            spk, sby = pk, segs["bytes"]
        for i in np.nonzero(spk)[0]:
            s = segs[i]
            key = (int(s["src"]), int(s["dst"]), int(s["sport"]), int(s["dport"]), int(s["proto"]), int(s["tos"]),
                   int(in_if[i]), int(out_if[i]))  # fmt: skip
            e = self.entries.get(key)
            if e is None:
                e = self.entries[key] = FlowEntry(*key, first_ms=int(s["t0"]), last_ms=int(s["t1"]))
            e.first_ms = min(e.first_ms, int(s["t0"]))
            e.last_ms = max(e.last_ms, int(s["t1"]))
            e.packets += int(spk[i])
            e.bytes += int(sby[i])
            e.tcp_flags |= int(s["tcp_flags"])

    def expire(self, now_ms: int, flush: bool = False) -> list[FlowEntry]:
        """Records due at ``now_ms`` (all of them when ``flush``), oldest first."""
        out = []
        for key, e in list(self.entries.items()):
            if flush or now_ms - e.first_ms >= self.active_ms or now_ms - e.last_ms >= self.inactive_ms:
                out.append(e)
                del self.entries[key]
        out.sort(key=lambda e: (e.first_ms, e.src, e.dst, e.sport, e.dport))
        return out
