"""Exporter clock skew: collector receive time minus header export time, per exporter.

``skew = received_at_ms - export_time_ms``: positive when the exporter clock
is behind the collector (transit delay included). Kept as an EWMA and the
last value. Headers without an export time (sFlow) are ignored. Pure: the
receive time is an argument.
"""

from __future__ import annotations

from .result import ExportHeader

__all__ = ["ClockSkewTracker"]


class ClockSkewTracker:
    """Per-exporter EWMA of receive-minus-export time, in milliseconds."""

    def __init__(self, alpha: float = 0.1, max_exporters: int = 100_000):
        if not 0.0 < alpha <= 1.0:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self.max_exporters = max_exporters
        self._ewma: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def observe(self, header: ExportHeader, received_at_ms: int) -> float | None:
        """Update with one header; returns the exporter's EWMA skew, or None if the header has no export time."""
        if header is None or header.export_time_ms is None:
            return None
        ex = header.exporter
        skew = float(received_at_ms - header.export_time_ms)
        prev = self._ewma.get(ex)
        if prev is None:
            if len(self._ewma) >= self.max_exporters:
                old = next(iter(self._ewma))
                self._ewma.pop(old)
                self._last.pop(old, None)
                self._count.pop(old, None)
            value = skew
        else:
            value = prev + self.alpha * (skew - prev)
        self._ewma[ex] = value
        self._last[ex] = skew
        self._count[ex] = self._count.get(ex, 0) + 1
        return value

    def skew_ms(self, exporter: str) -> float | None:
        """EWMA skew of ``exporter`` in ms, None if never seen with an export time."""
        return self._ewma.get(exporter)

    def last_ms(self, exporter: str) -> float | None:
        """Skew of the exporter's most recent header."""
        return self._last.get(exporter)

    def samples(self, exporter: str) -> int:
        return self._count.get(exporter, 0)

    def exporters(self) -> dict[str, float]:
        """All exporters with their EWMA skew."""
        return dict(self._ewma)
