"""Mark lines from training jobs and operators -> ``steps.v1`` / ``changes.v1``.

:class:`MarkReceiver` takes the datagrams of the ingest ``marks://`` listener (and, offline, the mark
datagrams of a capture): each line is parsed by :mod:`schemas.marks`, rate-limited (per sender and in all) and
handed to the sink's ``publish_mark``. Every refused line is counted by reason and dropped; a bad line never
stops ingest. :func:`publish_marks` is the one-shot producer the ``fabricflow mark`` command and the console
use. docs/closed-loop.md, "The mark protocol".
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable

from prometheus_client import Counter

from fabricflow.logs import RateLimitedLog
from schemas import codec
from schemas.marks import MarkError, change_key, parse_lines

log = logging.getLogger("fabricflow.ingest")

__all__ = ["MarkReceiver", "TokenBuckets", "encode_mark", "mark_key", "publish_marks"]

MAX_SOURCES = 10_000  # senders whose buckets are kept (beyond it the buckets start over)


def mark_key(kind: str, rec: dict) -> str:
    """Kafka key: the job for a step mark, :func:`schemas.marks.change_key` for a change."""
    return rec["job"] if kind == "step" else change_key(rec)


def encode_mark(kind: str, rec: dict) -> bytes:
    """The Avro single-object message of a mark record (``step_mark`` / ``change_mark``)."""
    return codec.encode_record("step_mark" if kind == "step" else "change_mark", rec)


class TokenBuckets:
    """Token buckets per sender plus one for everyone, on a caller-given clock (seconds)."""

    def __init__(self, per_source_per_s: float, total_per_s: float):
        self.per_source = float(per_source_per_s)
        self.total = float(total_per_s)
        self._src: dict[str, list[float]] = {}
        self._all = [max(1.0, self.total), None]

    @staticmethod
    def _take(bucket: list, rate: float, now: float) -> bool:
        if bucket[1] is not None:
            bucket[0] = min(max(1.0, rate), bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return True
        return False

    def take(self, source: str, now: float) -> bool:
        b = self._src.get(source)
        if b is None:
            if len(self._src) >= MAX_SOURCES:
                self._src.clear()
            b = self._src[source] = [max(1.0, self.per_source), None]
        if self.per_source > 0 and not self._take(b, self.per_source, now):
            return False
        return self.total <= 0 or self._take(self._all, self.total, now)


class MarkReceiver:
    """Parse, bound and publish mark datagrams. ``sink.publish_mark(kind, record)`` does the producing.

    ``allowlist``: sender CIDRs allowed (empty = any). ``max_per_s`` / ``max_per_source_per_s``: lines per
    second in all / per sender address (0 = unbounded); lines beyond them are counted ``rate_limited``. The
    buckets run on the receive times given to :meth:`handle` (wall clock live, capture time offline).
    """

    def __init__(self, sink, registry=None, *, allowlist: Iterable[str] = (), max_per_s: float = 1000.0,
                 max_per_source_per_s: float = 100.0, counter: Counter | None = None):
        self.sink = sink
        try:
            self.nets = [ipaddress.ip_network(c, strict=False) for c in allowlist]
        except ValueError as e:
            raise ValueError(f"ingest.marks_allowlist: {e}") from None
        self.buckets = TokenBuckets(max_per_source_per_s, max_per_s)
        self.counter = counter or Counter("fabricflow_ingest_marks_total",
                                          "Mark lines received by result (published, rate_limited, not_allowed, or why "
                                          "a line was refused)", ["kind", "result"], registry=registry)
        self.counts: dict[tuple[str, str], int] = {}
        self._badlog = RateLimitedLog(log)

    def _count(self, kind: str, result: str, n: int = 1) -> None:
        self.counter.labels(kind, result).inc(n)
        self.counts[(kind, result)] = self.counts.get((kind, result), 0) + n

    def _allowed(self, source: str) -> bool:
        if not self.nets:
            return True
        try:
            ip = ipaddress.ip_address(source.split("%")[0])
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in n for n in self.nets)

    def handle(self, datagram: bytes, source: str, received_ms: int) -> int:
        """One datagram (one or more lines) from ``source``; returns the marks published."""
        if not self._allowed(source):
            self._count("unknown", "not_allowed")
            return 0
        good, bad = parse_lines(datagram, received_ms, f"udp:{source}")
        return self.accept(good, bad, source, received_ms / 1000.0)

    def accept(self, good: list[tuple[str, dict]], bad: list[MarkError], source: str, now_s: float) -> int:
        """Count ``bad``, rate-limit and publish ``good``; returns the marks published."""
        for e in bad:
            self._count("unknown", e.reason)
            self._badlog.warning(f"mark:{e.reason}", "refused a mark line from %s: %s", source, e)
        n = 0
        for kind, rec in good:
            if not self.buckets.take(source, now_s):
                self._count(kind, "rate_limited")
                continue
            if self.sink.publish_mark(kind, rec):
                self._count(kind, "published")
                n += 1
            else:
                self._count(kind, "not_delivered")
        return n


def publish_marks(kafka_settings, marks: list[tuple[str, dict]], *, producer_factory: Callable | None = None,
                  timeout_s: float = 10.0, producer_settings=None) -> int:
    """Produce marks (``(kind, record)``) to ``steps.v1`` / ``changes.v1`` and wait for delivery; returns how many
    were delivered. Raises :class:`RuntimeError` (one line) when the broker did not take them in ``timeout_s``.
    ``producer_settings``: ``ingest.producer`` (default its defaults)."""
    from fabricflow import streams
    from fabricflow.kafka import producer_config
    from fabricflow.settings import ProducerSettings

    if producer_factory is None:
        from confluent_kafka import Producer as producer_factory
    conf = producer_config(kafka_settings, producer_settings or ProducerSettings(),
                           **{"linger.ms": 5, "message.timeout.ms": int(timeout_s * 1000)})
    producer = producer_factory(conf)
    errors: list[str] = []
    delivered = [0]

    def done(err, _msg):
        if err is None:
            delivered[0] += 1
        elif len(errors) < 3:
            errors.append(str(err))

    for kind, rec in marks:
        topic = streams.topic_of(kafka_settings, "steps" if kind == "step" else "changes")
        producer.produce(topic, key=mark_key(kind, rec).encode(), value=encode_mark(kind, rec), on_delivery=done)
    left = producer.flush(timeout_s)
    if left or errors:
        raise RuntimeError(f"marks not delivered to Kafka ({left} pending after {timeout_s:.0f} s"
                           + (f"; {errors[0]}" if errors else "") + ")")
    return delivered[0]
