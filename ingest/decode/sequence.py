"""Export sequence tracking: estimate lost records/datagrams per exporter stream.

A stream is ``(exporter, protocol, domain)`` from :class:`ExportHeader`; each header covers a
sequence range in the protocol's unit (NetFlow v5 flows, v9 export packets, IPFIX data records,
sFlow datagrams). The tracker counts gaps as loss, lets late packets inside the reorder window fill
remembered gaps, tells duplicates and restarts apart, and votes between the two header readings
exporters use (softflowd's IPFIX counts the current message). The rules: docs/operations.md,
"Data quality per exporter". Pure state machine: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from .result import ExportHeader

__all__ = ["SequenceTracker", "SequenceStats", "DEFAULT_WINDOWS"]

_MOD = 1 << 32
_HALF = 1 << 31
_U32_MAX = _MOD - 1

# Reorder window per protocol, in that protocol's sequence units.
DEFAULT_WINDOWS = {"sflow5": 1024, "netflow9": 1024, "netflow5": 65536, "ipfix": 65536}
_MAX_GAPS = 64


@dataclass
class SequenceStats:
    """Running totals for one stream; units are the protocol's sequence units."""

    lost: int = 0  # estimated lost units (net of gaps filled by late packets)
    received: int = 0  # units covered by accepted (non-duplicate) packets
    packets: int = 0  # export packets seen, duplicates included
    duplicates: int = 0
    restarts: int = 0
    reordered: int = 0  # late packets that filled (part of) a gap

    @property
    def loss_ratio(self) -> float:
        total = self.lost + self.received
        return self.lost / total if total > 0 else 0.0


class _Stream:
    __slots__ = (
        "floor", "pre", "expected", "last_seq", "last_inc", "max_uptime", "gaps", "incl", "votes_rfc", "votes_incl",
        "stats",
    )

    def __init__(self) -> None:
        self.floor = 0  # unwrapped start of the first packet after the last (re)start
        self.pre: list[list[int]] = []  # holes below the first packet (never counted as loss)
        self.expected = 0  # unwrapped sequence expected next
        self.last_seq = 0  # raw sequence of the packet that last advanced ``expected``
        self.last_inc = 0
        self.max_uptime: int | None = None
        self.gaps: list[list[int]] = []  # [start, end) unwrapped, oldest first
        self.incl = False  # "sequence includes the current message"
        self.votes_rfc = 0
        self.votes_incl = 0
        self.stats = SequenceStats()


class SequenceTracker:
    """Per-stream loss / duplicate / reorder / restart accounting.

    ``observe(header)`` returns the change in estimated lost units caused by
    this header (positive for a new gap, negative when a late packet fills
    one, 0 otherwise). ``stats`` maps ``(exporter, protocol, domain)`` to
    :class:`SequenceStats`.
    """

    def __init__(
        self,
        windows: dict[str, int] | None = None,
        uptime_slack_ms: int = 30_000,
        max_streams: int = 100_000,
    ):
        self.windows = dict(DEFAULT_WINDOWS)
        if windows:
            self.windows.update(windows)
        self.uptime_slack_ms = uptime_slack_ms
        self.max_streams = max_streams
        self._streams: dict[tuple, _Stream] = {}

    @property
    def stats(self) -> dict[tuple, SequenceStats]:
        return {k: s.stats for k, s in self._streams.items()}

    def get(self, exporter: str, protocol: str, domain: int) -> SequenceStats | None:
        s = self._streams.get((exporter, protocol, domain))
        return s.stats if s is not None else None

    def observe(self, header: ExportHeader) -> int:
        key = (header.exporter, header.protocol, header.domain)
        st = self._streams.get(key)
        if st is None:
            self._new_stream(key, header)
            return 0
        return self._observe(st, header)

    def observe_counts(self, header: ExportHeader) -> tuple[int, int, int]:
        """:meth:`observe`, also returning what this header added to the stream's
        ``duplicates`` and ``restarts``: ``(lost change, duplicates, restarts)``."""
        key = (header.exporter, header.protocol, header.domain)
        st = self._streams.get(key)
        if st is None:
            self._new_stream(key, header)
            return 0, 0, 0
        stats = st.stats
        d0, r0 = stats.duplicates, stats.restarts
        lost = self._observe(st, header)
        return lost, stats.duplicates - d0, stats.restarts - r0

    def _new_stream(self, key: tuple, header: ExportHeader) -> None:
        if len(self._streams) >= self.max_streams:
            self._streams.pop(next(iter(self._streams)))
        st = self._streams[key] = _Stream()
        st.stats.packets += 1
        self._start(st, header.sequence & _U32_MAX, header.increment if header.increment > 0 else 0, header.uptime_ms)

    def _observe(self, st: _Stream, header: ExportHeader) -> int:
        seq = header.sequence & _U32_MAX
        inc = header.increment if header.increment > 0 else 0
        stats = st.stats
        stats.packets += 1
        up = header.uptime_ms
        if up is not None and st.max_uptime is not None and self._uptime_restart(st.max_uptime, up):
            stats.restarts += 1
            self._start(st, seq, inc, up)
            return 0
        if up is not None:
            if st.max_uptime is None or up > st.max_uptime or st.max_uptime - up > _HALF:
                st.max_uptime = up

        # Vote on the sequence reading using in-order evidence only.
        d_rfc = (seq - st.last_seq - st.last_inc) & _U32_MAX
        d_incl = (seq - st.last_seq - inc) & _U32_MAX
        if d_rfc == 0 and d_incl != 0:
            st.votes_rfc += 1
            if st.incl and st.votes_rfc > st.votes_incl:
                st.incl = False
                st.expected += st.last_inc
        elif d_incl == 0 and d_rfc != 0:
            st.votes_incl += 1
            if not st.incl and st.votes_incl > st.votes_rfc:
                st.incl = True
                st.expected -= st.last_inc

        start_raw = (seq - inc) & _U32_MAX if st.incl else seq
        delta = ((start_raw - st.expected + _HALF) & _U32_MAX) - _HALF
        window = self.windows.get(header.protocol, 1024)
        if delta == 0:
            st.expected += inc
            st.last_seq, st.last_inc = seq, inc
            stats.received += inc
            self._prune(st, window)
            return 0
        if delta > 0:
            start = st.expected + delta
            st.gaps.append([st.expected, start])
            if len(st.gaps) > _MAX_GAPS:
                del st.gaps[0]
            st.expected = start + inc
            st.last_seq, st.last_inc = seq, inc
            stats.received += inc
            stats.lost += delta
            self._prune(st, window)
            return delta
        if -delta > window:
            stats.restarts += 1
            self._start(st, seq, inc, up)
            return 0
        start = st.expected + delta
        filled, st.gaps = self._fill(st.gaps, start, start + inc)
        if filled:
            stats.lost -= filled
            stats.received += inc
            stats.reordered += 1
            return -filled
        pre_filled, st.pre = self._fill(st.pre, start, start + inc)
        if pre_filled or start + inc <= st.floor:
            # older than the first packet seen since (re)start: late, not a duplicate
            if start + inc < st.floor and len(st.pre) < _MAX_GAPS:
                st.pre.append([start + inc, st.floor])
            if start < st.floor:
                st.floor = start
            stats.received += inc
            stats.reordered += 1
            return 0
        stats.duplicates += 1
        return 0

    def _start(self, st: _Stream, seq: int, inc: int, uptime: int | None) -> None:
        base = (seq - inc) & _U32_MAX if st.incl else seq
        st.floor = base
        st.pre = []
        st.expected = base + inc
        st.last_seq, st.last_inc = seq, inc
        st.max_uptime = uptime
        st.gaps = []
        st.stats.received += inc

    def _uptime_restart(self, prev: int, cur: int) -> bool:
        slack = self.uptime_slack_ms
        if cur + slack >= prev:
            return False
        if prev > _U32_MAX - slack and cur < slack:  # 32-bit millisecond uptime wrapped
            return False
        return True

    @staticmethod
    def _fill(gaps: list, a: int, b: int) -> tuple[int, list]:
        if not gaps:
            return 0, gaps
        filled = 0
        out = []
        for g0, g1 in gaps:
            lo, hi = max(a, g0), min(b, g1)
            if lo >= hi:
                out.append([g0, g1])
                continue
            filled += hi - lo
            if g0 < lo:
                out.append([g0, lo])
            if hi < g1:
                out.append([hi, g1])
        return filled, out

    @staticmethod
    def _prune(st: _Stream, window: int) -> None:
        low = st.expected - window
        if st.gaps and st.gaps[0][1] < low:
            st.gaps = [g for g in st.gaps if g[1] >= low]
        if st.pre and st.floor < low:
            st.pre = []
