"""Event-time tumbling windows with allowed lateness, for the window aggregators.

:class:`WindowManager` keeps the open windows of one aggregator (Quix shape: ``initialize``, ``agg``,
``result``, plus ``dump`` / ``load`` for snapshots), closes them when the watermark (max event time -
lateness) passes their end or the stream has been idle, and counts records that come too late. Time
comes in as arguments, so a replay gives identical results. Window rules: docs/detectors.md, "Windows".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .snapshots import dump_columns, load_columns

__all__ = ["Aggregator", "ChunkedAggregator", "WindowConfig", "WindowManager", "concat_chunks"]


@dataclass(frozen=True)
class WindowConfig:
    """Tumbling window settings.

    size_ms: window length (default 10 s).
    lateness_ms: how far behind the max event time a record may be and still
      update its (open) window. Set it above the NetFlow/IPFIX inactive timeout
      plus export delay of your exporters, or their records arrive too late.
    idle_close_s: timer time without any watermark progress after which all open
      windows are closed by ``tick``.
    """

    size_ms: int = 10_000
    lateness_ms: int = 30_000
    idle_close_s: float = 30.0

    def __post_init__(self) -> None:
        if self.size_ms <= 0 or self.lateness_ms < 0 or self.idle_close_s < 0:
            raise ValueError("size_ms must be > 0, lateness_ms and idle_close_s >= 0")


class Aggregator(Protocol):
    def initialize(self) -> Any: ...

    def agg(self, state: Any, rows: dict[str, np.ndarray], window_start: int) -> Any: ...

    def result(self, state: Any, window_start: int, window_end: int) -> Any: ...

    def dump(self, state: Any) -> Any: ...

    def load(self, obj: Any) -> Any: ...


def concat_chunks(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One chunk of columns from several with the same keys (the chunk itself when there is one)."""
    return chunks[0] if len(chunks) == 1 else {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


class ChunkedAggregator:
    """Window aggregator whose state is a list of column chunks, reduced at close.

    Each batch's rows (:meth:`chunk`) are kept as they come and reduced (:meth:`reduce`, a group-by with
    integer sums / maxima, which give the same result however the rows are grouped) when the window
    closes, or once more than ``max_chunks`` wait: one group-by per window instead of one per batch.
    A snapshot holds the reduction (``dump`` keeps it as the state too: same contents). Subclasses give
    ``chunk`` and ``reduce``; used by the incast short windows and the timeline's phase slots.
    """

    max_chunks = 16

    def chunk(self, rows: dict[str, np.ndarray], window_start: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reduce(self, chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def initialize(self) -> list:
        return []

    def agg(self, state: list, rows: dict[str, np.ndarray], window_start: int) -> list:
        state = state + [self.chunk(rows, window_start)]
        if len(state) > self.max_chunks:
            state = [self.reduce(state)]
        return state

    def result(self, state: list, window_start: int, window_end: int) -> dict | None:
        return self.reduce(state) if state else None

    def dump(self, state: list):
        if not state:
            return None
        merged = self.reduce(state)
        state[:] = [merged]  # keep the reduction (same contents)
        return dump_columns(merged)

    def load(self, obj) -> list:
        return [load_columns(obj)] if obj else []


_NO_TIME = -(2**62)


class WindowManager:
    """Open tumbling windows of one aggregator, keyed by window start (ms)."""

    def __init__(self, config: WindowConfig, aggregator: Aggregator):
        self.config = config
        self.aggregator = aggregator
        self.open: dict[int, Any] = {}
        self.max_event_ms = _NO_TIME
        self.closed_upto_ms = _NO_TIME  # windows with end <= this are closed
        self.too_late = 0
        self.accepted = 0
        self._idle_seen_max = _NO_TIME
        self._idle_since_ms: int | None = None

    @property
    def watermark_ms(self) -> int:
        if self.max_event_ms == _NO_TIME:
            return _NO_TIME
        return self.max_event_ms - self.config.lateness_ms

    def process(
        self, times_ms: np.ndarray, rows: dict[str, np.ndarray], observed_max_ms: int | None = None
    ) -> list[tuple[int, int, Any]]:
        """Add a batch (columns aligned with ``times_ms``); return windows closed by it.

        ``observed_max_ms``: max event time of the whole input batch when ``rows``
        is a filtered subset, so the watermark still advances with the stream.
        Returns ``[(window_start_ms, window_end_ms, result), ...]`` oldest first.
        """
        times = np.asarray(times_ms, dtype=np.int64)
        wm_before = self.watermark_ms
        if observed_max_ms is not None:
            self.max_event_ms = max(self.max_event_ms, int(observed_max_ms))
        if len(times):
            # records are judged against the watermark before the batch: a batch is one arrival step
            self._add(times, rows, max(self.closed_upto_ms, wm_before))
        return self._close_upto(self.watermark_ms)

    def _add(self, times: np.ndarray, rows: dict[str, np.ndarray], limit_ms: int) -> None:
        """Rows into their windows, oldest window first; the rows of windows ending at or before ``limit_ms``
        are too late."""
        size = self.config.size_ms
        n, t_max = len(times), int(times.max())
        first = int(times.min()) // size
        if first == t_max // size:
            segments = [(first * size, 0, n)]
        else:
            rows, segments = _by_window(times, rows, size, first, t_max // size - first)
        late = sum(hi - lo for ws, lo, hi in segments if ws + size <= limit_ms)
        self.too_late += late
        self.accepted += n - late
        if late < n:
            self.max_event_ms = max(self.max_event_ms, t_max)
        for ws, lo, hi in segments:
            if ws + size > limit_ms:
                self._agg(ws, rows if hi - lo == n else {k: v[lo:hi] for k, v in rows.items()})

    def _agg(self, ws: int, rows: dict[str, np.ndarray]) -> None:
        state = self.open.get(ws)
        if state is None:
            state = self.aggregator.initialize()
        self.open[ws] = self.aggregator.agg(state, rows, ws)

    def _close_upto(self, limit_ms: int) -> list[tuple[int, int, Any]]:
        size = self.config.size_ms
        due = sorted(ws for ws in self.open if ws + size <= limit_ms)
        out = []
        for ws in due:
            state = self.open.pop(ws)
            out.append((ws, ws + size, self.aggregator.result(state, ws, ws + size)))
            self.closed_upto_ms = max(self.closed_upto_ms, ws + size)
        return out

    def is_idle(self, now_ms: int) -> bool:
        """True once the max event time has not moved for idle_close_s of tick time."""
        return (
            self._idle_since_ms is not None
            and self.max_event_ms == self._idle_seen_max
            and int(now_ms) - self._idle_since_ms >= self.config.idle_close_s * 1000.0
        )

    def tick(self, now_ms: int) -> list[tuple[int, int, Any]]:
        """Timer: close all open windows once the watermark has not moved for idle_close_s."""
        if self.max_event_ms != self._idle_seen_max or self._idle_since_ms is None:
            self._idle_seen_max = self.max_event_ms
            self._idle_since_ms = int(now_ms)
            return []
        if self.open and self.is_idle(now_ms):
            return self._close_upto(2**62)
        return []

    def flush(self) -> list[tuple[int, int, Any]]:
        """Close every open window now (end of a replay)."""
        return self._close_upto(2**62)

    # -- state -------------------------------------------------------------------
    def snapshot(self) -> dict:
        return {
            "open": [[ws, self.aggregator.dump(st)] for ws, st in sorted(self.open.items())],
            "max_event_ms": self.max_event_ms,
            "closed_upto_ms": self.closed_upto_ms,
            "too_late": self.too_late,
            "accepted": self.accepted,
            "idle_seen_max": self._idle_seen_max,
            "idle_since_ms": self._idle_since_ms,
        }

    def restore(self, snap: dict) -> None:
        self.open = {int(ws): self.aggregator.load(st) for ws, st in snap["open"]}
        self.max_event_ms = int(snap["max_event_ms"])
        self.closed_upto_ms = int(snap["closed_upto_ms"])
        self.too_late = int(snap["too_late"])
        self.accepted = int(snap["accepted"])
        # Idle time counts from the first tick after the restore, not from the snapshot's clock: the time the
        # worker was down is not idle time (the stream's backlog has not been delivered yet), and closing the
        # restored windows at once would drop that backlog as too late.
        self._idle_seen_max = _NO_TIME
        self._idle_since_ms = None


def _by_window(
    times: np.ndarray, rows: dict[str, np.ndarray], size: int, first: int, span: int
) -> tuple[dict[str, np.ndarray], list[tuple[int, int, int]]]:
    """Rows sorted by window (stable: input order within a window; unchanged when already in window order)
    and ``[(window start, lo, hi), ...]`` of the row ranges of each window, oldest first.

    ``first``: the oldest window's number (start // size); ``span``: the newest one's minus ``first``.
    """
    k = times // size - first
    step = k[1:] != k[:-1]
    if bool((k[1:] < k[:-1]).any()):  # not in window order yet
        if span < 2**16:
            k = k.astype(np.uint16)  # numpy's stable sort of 16-bit integers is a radix sort
        order = np.argsort(k, kind="stable")
        k = k[order]
        step = k[1:] != k[:-1]
        rows = {name: v[order] for name, v in rows.items()}
    bounds = [0, *(np.flatnonzero(step) + 1).tolist(), len(k)]
    starts = ((k[bounds[:-1]].astype(np.int64) + first) * size).tolist()
    return rows, list(zip(starts, bounds[:-1], bounds[1:]))
