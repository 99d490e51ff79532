"""Replay from Kafka: ``flows.raw`` / ``counters.raw`` (and ``discards.raw``, the drop reasons of link events) by offsets or by a time range (binary search on
record timestamps, since the embedded broker's ``offsets_for_times`` answers 0), in the canonical order.

Reads ask for a short fetch wait first (single-message fetches are the binary search's unit); a partition
that answers neither records nor end-of-partition is read again with a long fetch wait (docs/replay.md)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from schemas.columns import COUNTER_DTYPE, DISCARD_DTYPE, FLOW_DTYPE

from .core import COUNTER_TIME, DEFAULT_SLICE_MS, DISCARD_TIME, FLOW_TIME, ReplayError, iso_utc, slice_batches, time_range

log = logging.getLogger(__name__)


#: Fetch wait of the first attempt: a broker answering a waiting fetch only at its end (Tansu) would
#: otherwise make every single-message fetch of the binary search cost the whole wait.
FAST_FETCH_WAIT_MS = 10
#: Fetch wait of the second attempt. Tansu's s3 engine, after a restart, answers every fetch that needs
#: more than the wait to read its storage with no records and no end of partition: read with 10 ms it
#: looks empty (docs/replay.md).
SLOW_FETCH_WAIT_MS = 500


class SilentPartition(ReplayError):
    """A partition answered neither a record nor end-of-partition within the timeout."""


def _fetch_one(consumer, tp, offset: int, timeout_s: float):
    """First message at or after ``offset`` of ``tp`` (None at the end of the partition).

    Raises :class:`SilentPartition` when the timeout passes with neither a message nor end-of-partition.
    """
    import time

    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(tp.topic, tp.partition, int(offset))])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = consumer.poll(min(0.5, max(0.01, deadline - time.monotonic())))
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                return None
            raise ReplayError(f"{tp.topic}[{tp.partition}] @ {offset}: {m.error().str()}")
        if m.topic() == tp.topic and m.partition() == tp.partition and m.offset() >= offset:
            return m
    raise SilentPartition(f"{tp.topic}[{tp.partition}] @ {offset}: no record and no end of partition in {timeout_s} s")


def find_offset_for_time(consumer, tp, ts_ms: int, lo: int, hi: int, *, timeout_s: float = 5.0) -> int:
    """First offset in [lo, hi] whose record timestamp is >= ``ts_ms`` (``hi`` if none), by binary search.

    Fetches single messages (the embedded broker's ``offsets_for_times`` always
    answers 0). An offset with no record at or after it (end of partition) counts as "later".
    Assumes record timestamps do not decrease along the partition (ingest sets
    them when it publishes); ``hi`` is normally the end found by :func:`partition_end`.
    """
    lo, hi = int(lo), int(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        m = _fetch_one(consumer, tp, mid, timeout_s)
        if m is None or m.timestamp()[1] >= ts_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def partition_end(consumer, tp, *, timeout_s: float = 5.0) -> tuple[int, int]:
    """(low offset, true end = last offset + 1) of ``tp``, found by reading.

    The reported high watermark is used only as a hint of where to start reading
    (on the embedded broker it lags the real end); the end is one past the last
    offset actually read.
    """
    low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    low = max(0, int(low))
    start = max(low, int(high) - 1)
    end = start
    for m in _poll_from(consumer, tp, start, timeout_s, need_answer=True):
        end = max(end, m.offset() + 1)
    return low, end


def _poll_from(consumer, tp, start: int, idle_s: float, *, need_answer: bool = False):
    """Messages of one partition from ``start`` until the end (EOF) or ``idle_s`` without a message.

    ``need_answer``: the read must end at end-of-partition (or where the caller stops): ``idle_s`` without a
    message raises :class:`SilentPartition` (a broker answering with nothing, docs/replay.md).
    """
    import time

    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
    idle_until = time.monotonic() + idle_s
    last = -1
    while True:
        m = consumer.poll(0.2)
        if m is None:
            if time.monotonic() >= idle_until:
                if need_answer:
                    raise SilentPartition(f"{tp.topic}[{tp.partition}] @ {last + 1 if last >= 0 else start}: no "
                                          f"record and no end of partition in {idle_s} s")
                return
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                return
            raise ReplayError(f"{tp.topic}[{tp.partition}]: {m.error().str()}")
        idle_until = time.monotonic() + idle_s
        last = m.offset()
        yield m


_OFFSET_RE = re.compile(r"(?:(flows|counters|discards):)?(\d+):(\d+)-(\d*)")


def parse_offsets(text: str) -> dict[tuple[str, int], tuple[int, int | None]]:
    """``"0:100-200,1:0-50,counters:0:10-"`` -> {(stream, partition): (start, end or None)}.

    ``stream`` is ``flows`` (default), ``counters`` or ``discards``; END is exclusive; an empty
    END means "to the end of the partition".
    """
    out: dict[tuple[str, int], tuple[int, int | None]] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        m = _OFFSET_RE.fullmatch(part)
        if not m:
            raise ReplayError(f"--offsets {part!r}: expected [flows:|counters:|discards:]PARTITION:START-END (END exclusive)")
        stream, p, a, b = m.group(1) or "flows", int(m.group(2)), int(m.group(3)), m.group(4)
        end = int(b) if b else None
        if end is not None and end <= a:
            raise ReplayError(f"--offsets {part!r}: empty offset range (END is exclusive)")
        if (stream, p) in out:
            raise ReplayError(f"--offsets: {stream} partition {p} given twice")
        out[(stream, p)] = (a, end)
    if not out:
        raise ReplayError("--offsets is empty")
    return out


@dataclass
class KafkaSource:
    """Raw batches read from Kafka; per (stream, partition) the offsets actually read."""

    flows: np.ndarray
    counters: np.ndarray
    read: dict[tuple[str, int], tuple[int, int, int]]  # (first, last, messages)
    slice_ms: int = DEFAULT_SLICE_MS
    discards: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=DISCARD_DTYPE))

    def flow_batches(self) -> list[np.ndarray]:
        return slice_batches(self.flows, FLOW_TIME, self.slice_ms)

    def counter_batches(self) -> list[np.ndarray]:
        return slice_batches(self.counters, COUNTER_TIME, self.slice_ms)

    def discard_batches(self) -> list[np.ndarray]:
        return slice_batches(self.discards, DISCARD_TIME, self.slice_ms)


def read_range(consumer, tp, start: int, end: int, timeout_s: float, on_message=None) -> list:
    """Messages of ``tp`` with start <= offset < end, in offset order, counted as read."""
    if end <= start:
        return []
    out = []
    for m in _poll_from(consumer, tp, start, timeout_s, need_answer=True):
        if m.offset() >= end:
            break
        if m.offset() >= start:
            out.append(m)
            if on_message is not None:
                on_message()
        if m.offset() >= end - 1:
            break
    return out


def kafka_source(
    kafka_settings,
    *,
    offsets: Mapping[tuple[str, int], tuple[int, int | None]] | None = None,
    frm=None,
    to=None,
    slice_ms: int = DEFAULT_SLICE_MS,
    timeout_s: float = 5.0,
    grace_ms: int = 30_000,
    on_message: Callable[[], None] | None = None,
    on_retry: Callable[[], None] | None = None,
    consumer=None,
) -> KafkaSource:
    """Read ``flows.raw`` / ``counters.raw`` by explicit offsets or by a time range.

    With ``frm``/``to`` and no offsets, every partition of both topics is searched
    with :func:`find_offset_for_time` for [frm - grace, to + grace) on record
    timestamps (publish times: a message published after ``to`` can still hold
    flows that ended before it; use the allowed lateness), then rows are kept only
    when their event time is in [frm, to) (as the archive does).
    Without ``frm``/``to`` every row of the offset ranges is replayed.
    ``on_message`` is called per message read; ``on_retry`` when the read starts again with the long
    fetch wait (the messages already counted are read again).
    """
    from confluent_kafka import Consumer

    if offsets is None and (frm is None or to is None):
        raise ReplayError("a Kafka replay needs --offsets or both --from and --to")
    lo_ms = hi_ms = None
    if frm is not None or to is not None:
        if frm is None or to is None:
            raise ReplayError("give both --from and --to")
        lo_ms, hi_ms = time_range(frm, to)
    topics = {"flows": kafka_settings.topics.flows_raw, "counters": kafka_settings.topics.counters_raw,
              "discards": kafka_settings.topics.discards_raw}
    args = (topics, offsets, lo_ms, hi_ms, grace_ms, timeout_s, on_message, kafka_settings.bootstrap_servers)
    if consumer is not None:
        parts, read = _read_all(consumer, *args)
    else:
        for wait_ms in (FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS):
            consumer = Consumer(replay_consumer_config(kafka_settings, wait_ms))
            try:
                parts, read = _read_all(consumer, *args)
                break
            except SilentPartition as e:
                if wait_ms == SLOW_FETCH_WAIT_MS:
                    raise ReplayError(f"{e} (also with a {wait_ms} ms fetch wait): is the broker serving reads?") \
                        from None
                log.info("replay: %s with a %d ms fetch wait; reading again with %d ms", e, wait_ms, SLOW_FETCH_WAIT_MS)
                if on_retry is not None:
                    on_retry()
            finally:
                consumer.close()
    if not read:
        raise ReplayError("no records in the requested offset ranges")
    flows = np.concatenate(parts["flows"]) if parts["flows"] else np.zeros(0, dtype=FLOW_DTYPE)
    counters = np.concatenate(parts["counters"]) if parts["counters"] else np.zeros(0, dtype=COUNTER_DTYPE)
    discards = np.concatenate(parts["discards"]) if parts["discards"] else np.zeros(0, dtype=DISCARD_DTYPE)
    if lo_ms is not None:
        ft, ct, dt = flows[FLOW_TIME], counters[COUNTER_TIME], discards[DISCARD_TIME]
        flows = flows[(ft >= lo_ms) & (ft < hi_ms)]
        counters = counters[(ct >= lo_ms) & (ct < hi_ms)]
        discards = discards[(dt >= lo_ms) & (dt < hi_ms)]
    return KafkaSource(flows, counters, read, slice_ms, discards)


def replay_consumer_config(kafka_settings, fetch_wait_ms: int) -> dict:
    from fabricflow.kafka import client_config

    conf = client_config(kafka_settings)
    conf.update({"group.id": f"{kafka_settings.client_id}-replay", "enable.auto.commit": False,
                 "auto.offset.reset": "error", "enable.partition.eof": True,
                 "fetch.wait.max.ms": fetch_wait_ms,
                 "session.timeout.ms": kafka_settings.session_timeout_ms})
    return conf


def _read_all(consumer, topics, offsets, lo_ms, hi_ms, grace_ms, timeout_s, on_message, bootstrap):
    """({stream: [batches]}, {(stream, partition): (first, last, messages)}) of the requested ranges."""
    from confluent_kafka import TopicPartition

    from schemas import codec

    md = consumer.list_topics(timeout=timeout_s)
    nparts = {}
    for s, t in topics.items():
        tm = md.topics.get(t)
        nparts[s] = sorted(tm.partitions) if tm is not None and tm.error is None else []
    if offsets is None:
        if not any(nparts.values()):
            raise ReplayError(f"topics {topics['flows']} and {topics['counters']} do not exist on {bootstrap}")
        ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
        for s, plist in nparts.items():
            for p in plist:
                tp = TopicPartition(topics[s], p)
                low, end = partition_end(consumer, tp, timeout_s=timeout_s)
                a = find_offset_for_time(consumer, tp, lo_ms - grace_ms, low, end, timeout_s=timeout_s)
                b = find_offset_for_time(consumer, tp, hi_ms + grace_ms, a, end, timeout_s=timeout_s)
                if b > a:
                    ranges[(s, p)] = (a, b)
        if not ranges:
            raise ReplayError(f"no records with timestamps between {iso_utc(lo_ms)} and {iso_utc(hi_ms)} in "
                              f"{topics['flows']} / {topics['counters']}")
    else:
        ranges = dict(offsets)
        for (s, p) in ranges:
            if p not in nparts[s]:
                raise ReplayError(f"{topics[s]} has no partition {p} "
                                  f"(partitions: {', '.join(map(str, nparts[s])) or 'none, topic missing'})")
    parts: dict[str, list[np.ndarray]] = {"flows": [], "counters": [], "discards": []}
    read: dict[tuple[str, int], tuple[int, int, int]] = {}
    for (s, p) in sorted(ranges, key=lambda k: (k[0] != "flows", k[1])):
        a, b = ranges[(s, p)]
        tp = TopicPartition(topics[s], p)
        if b is None:
            _low, b = partition_end(consumer, tp, timeout_s=timeout_s)
        msgs = read_range(consumer, tp, a, b, timeout_s, on_message)
        if msgs:
            read[(s, p)] = (msgs[0].offset(), msgs[-1].offset(), len(msgs))
        want = {"flows": "flow_batch", "counters": "counter_batch", "discards": "discard_batch"}[s]
        for m in msgs:
            try:
                parts[s].append(codec.decode_batch(m.value(), expect=want))
            except codec.CodecError as e:
                raise ReplayError(f"{topics[s]}[{p}] offset {m.offset()}: {e}") from None
    return parts, read
