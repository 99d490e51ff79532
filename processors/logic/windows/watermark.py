"""A policy watermark that one exporter with a clock running ahead cannot push forward.

The policy rules (checkpoint cadence above all) close their time buckets at the watermark. Taking the
largest record time over every exporter let one NetFlow/IPFIX exporter whose clock runs ahead (say 45 s)
close buckets before the sFlow bytes of that time had arrived: they were then dropped as late, a checkpoint
went missing and ``checkpoint_late`` fired (docs/detection-quality.md, "Policy watermark and exporter clock
skew"). Here every exporter keeps its own largest record time; the watermark is the lower median of those
of the exporters that are live (within ``stale_ms`` of the most advanced one), so with three or more
exporters one skewed exporter does not move it, and with two it is the one behind. An exporter silent for
longer than ``stale_ms`` (in event time of the others) no longer holds it back. Monotone: it never goes back.
Pure: no clock.
"""

from __future__ import annotations

import numpy as np

from schemas.columns import addr_halves

__all__ = ["ExporterWatermark", "STALE_MS"]

STALE_MS = 300_000  # an exporter this far behind the most advanced one is treated as silent


class ExporterWatermark:
    def __init__(self, stale_ms: int = STALE_MS):
        self.stale_ms = int(stale_ms)
        self.by_exporter: dict[str, int] = {}  # "hi:lo" of the exporter address -> largest record time
        self.value = 0

    def observe(self, times: np.ndarray, exporter_addr: np.ndarray) -> int:
        """Fold in one batch (record times, 16-byte exporter addresses); returns the watermark."""
        if len(times):
            t = np.asarray(times, dtype=np.int64)
            hi, lo = addr_halves(np.asarray(exporter_addr))
            order = np.lexsort((lo, hi))
            hi, lo, t = hi[order], lo[order], t[order]
            start = np.flatnonzero(np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])])
            tops = np.maximum.reduceat(t, start)
            for h, l, m in zip(hi[start].tolist(), lo[start].tolist(), tops.tolist()):
                k = f"{h}:{l}"
                self.by_exporter[k] = max(self.by_exporter.get(k, m), m)
            self._update()
        return self.value

    def _update(self) -> None:
        top = max(self.by_exporter.values())
        live = sorted(v for v in self.by_exporter.values() if top - v <= self.stale_ms)
        self.value = max(self.value, live[(len(live) - 1) // 2])

    def snapshot(self) -> dict:
        return {"value": self.value, "by_exporter": dict(sorted(self.by_exporter.items()))}

    def restore(self, snap: dict) -> None:
        self.value = int(snap.get("value", 0))
        self.by_exporter = {str(k): int(v) for k, v in snap.get("by_exporter", {}).items()}
