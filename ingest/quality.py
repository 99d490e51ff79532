"""Per exporter and window: what ingest received, lost and could not scale, for analysts (ingest.quality.v1).

Sequence loss, records without a sampling rate and clock skew used to exist
only as Prometheus metrics; a reader of the archive could not tell a quiet
hour from a lossy one. :class:`QualityWindows` folds the same per-datagram
facts into one ``IngestQuality`` record (``schemas/avro/ingest_quality.avsc``)
per (exporter, protocol) and receive-time window. Pure: the receive time is an
argument; the ingest pipeline feeds it and publishes what :meth:`due` returns.

Loss is estimated in the unit the protocol's sequence numbers count (records
for NetFlow v5 and IPFIX, export datagrams for NetFlow v9 and sFlow), so the
ratio ``lost / (lost + received)`` is exact in that unit and
``records_lost_est = records * ratio / (1 - ratio)`` assumes a lost datagram
held as many records as a received one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sampler_loss import SamplerDelta

__all__ = ["QualityWindows", "SEQUENCE_UNIT"]

#: What each protocol's export sequence number counts.
SEQUENCE_UNIT = {"netflow5": "records", "ipfix": "records", "netflow9": "datagrams", "sflow5": "datagrams"}


@dataclass(slots=True)
class _Acc:
    datagrams: int = 0
    records: int = 0
    lost: int = 0
    missing: int = 0
    duplicates: int = 0
    restarts: int = 0
    skew_sum: float = 0.0
    skew_n: int = 0
    skew_max: float | None = None
    sampler: SamplerDelta | None = None


class QualityWindows:
    """Accumulates per (exporter, protocol) over receive-time windows of ``window_ms``; bounded in exporters."""

    def __init__(self, window_ms: int, worker: int = 0, max_exporters: int = 100_000):
        if window_ms <= 0:
            raise ValueError("window_ms must be > 0")
        self.window_ms = int(window_ms)
        self.worker = worker
        self.max_exporters = max_exporters
        self._open: dict[int, dict[tuple[str, str], _Acc]] = {}  # window start -> (exporter, protocol) -> acc
        self.dropped_exporters = 0

    def observe(self, exporter: str, protocol: str, received_ms: int, records: int = 0, lost: int = 0,
                missing_rate: int = 0, duplicates: int = 0, restarts: int = 0, skew_ms: float | None = None,
                datagrams: int = 1, sampler: SamplerDelta | None = None) -> None:
        """One decoded datagram: its flow records, the sequence loss it revealed (protocol units), records
        without a sampling rate, duplicates/restarts, and its receive-minus-export time (None: no export time).
        ``datagrams`` > 1: that many datagrams of one window without export time, their figures summed.
        ``sampler``: sFlow sampler deltas of these datagrams (:mod:`ingest.sampler_loss`)."""
        start = received_ms - received_ms % self.window_ms
        win = self._open.get(start)
        if win is None:
            win = self._open[start] = {}
        key = (exporter, protocol)
        acc = win.get(key)
        if acc is None:
            if len(win) >= self.max_exporters:
                self.dropped_exporters += 1
                return
            acc = win[key] = _Acc()
        acc.datagrams += datagrams
        acc.records += records
        acc.lost += lost
        acc.missing += missing_rate
        acc.duplicates += duplicates
        acc.restarts += restarts
        if sampler is not None:
            if acc.sampler is None:
                acc.sampler = SamplerDelta()
            acc.sampler.add(sampler)
        if skew_ms is not None:
            acc.skew_sum += skew_ms
            acc.skew_n += 1
            if acc.skew_max is None or abs(skew_ms) > abs(acc.skew_max):
                acc.skew_max = float(skew_ms)

    def observe_sampler(self, exporter: str, protocol: str, received_ms: int, sampler: SamplerDelta) -> None:
        """sFlow sampler deltas of rows received in ``received_ms``'s window (no datagrams counted)."""
        self.observe(exporter, protocol, received_ms, datagrams=0, sampler=sampler)

    def due(self, now_ms: int, force: bool = False) -> list[dict]:
        """IngestQuality records of every window that ended at or before ``now_ms`` (all with ``force``)."""
        out = []
        for start in sorted(self._open):
            end = start + self.window_ms
            if not force and end > now_ms:
                continue
            for (exporter, protocol), a in sorted(self._open.pop(start).items()):
                out.append(self._record(start, end, exporter, protocol, a))
        return out

    def _record(self, start: int, end: int, exporter: str, protocol: str, a: _Acc) -> dict:
        unit = SEQUENCE_UNIT.get(protocol, "datagrams")
        received = a.records if unit == "records" else a.datagrams
        lost = a.lost
        ratio = lost / (lost + received) if lost > 0 and lost + received > 0 else 0.0
        lost_records = int(round(a.records * ratio / (1.0 - ratio))) if 0 < ratio < 1 else (lost if unit == "records" else 0)
        return {
            "window_start_ms": start, "window_end_ms": end, "exporter": exporter, "protocol": protocol,
            "ingest_worker": self.worker, "datagrams": a.datagrams, "records": a.records, "sequence_unit": unit,
            "sequence_lost": lost, "sequence_received": received, "loss_ratio": ratio, "records_lost_est": lost_records,
            "records_without_rate": a.missing, "duplicates": a.duplicates, "restarts": a.restarts,
            "clock_skew_ms": a.skew_sum / a.skew_n if a.skew_n else None, "clock_skew_max_ms": a.skew_max,
            **_sampler_fields(a.sampler),
        }


def _sampler_fields(s: SamplerDelta | None) -> dict:
    """The sFlow sampler fields of an IngestQuality record (nulls when the window had no sampler deltas)."""
    if s is None:
        return dict.fromkeys(("sampler_samples", "sampler_drops", "sampler_loss_ratio", "sampler_pool",
                              "sampler_samples_expected", "sampler_worst_source", "sampler_worst_loss_ratio"))
    worst = s.worst()
    return {
        "sampler_samples": s.samples, "sampler_drops": s.drops, "sampler_loss_ratio": s.loss_ratio,
        "sampler_pool": s.pool, "sampler_samples_expected": round(s.samples_expected, 3),
        "sampler_worst_source": worst[1] if worst else None,
        "sampler_worst_loss_ratio": worst[2] if worst else None,
    }
