"""An in-memory stand-in for the Kafka topics between the live services, for ``fabricflow backfill``.

The live producers (ingest's ``KafkaSink``, the processors' ``OutputPublisher``, the archive sink's summaries)
take a :class:`MemoryProducer`; it places each message as Kafka would with the ``murmur2_random`` partitioner
the live producers use (:func:`partition_for`: Kafka's murmur2 of the key, modulo the topic's partitions) at the
next offset of that partition, from a per-run ``base_offset``. :class:`MemoryLog` hands the messages back in
production order as :class:`OfflineMessage` objects with confluent-kafka's ``Message`` accessors, which is what
the archive sink's decoding (:meth:`sinks.archive.service.ArchiveService.handle`) reads. No threads, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MemoryLog", "MemoryProducer", "OfflineConsumer", "OfflineMessage", "murmur2", "partition_for"]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (``org.apache.kafka.common.utils.Utils.murmur2``, seed 0x9747b28c), as a signed
    32-bit int; librdkafka's ``murmur2_random`` partitioner and Faust use the same."""
    m, r = 0x5BD1E995, 24
    n = len(data)
    h = (0x9747B28C ^ n) & 0xFFFFFFFF
    i = 0
    while n - i >= 4:
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
        i += 4
    rest = n - i
    if rest == 3:
        h ^= data[i + 2] << 16
    if rest >= 2:
        h ^= data[i + 1] << 8
    if rest >= 1:
        h ^= data[i]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition librdkafka's ``murmur2_random`` gives a key (``(murmur2 & 0x7fffffff) % n``; no key: 0 here,
    where librdkafka picks one at random)."""
    if not key or partitions <= 1:
        return 0
    return (murmur2(bytes(key)) & 0x7FFFFFFF) % partitions


class OfflineMessage:
    """One produced message with the accessors of confluent-kafka's ``Message``."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes, headers=None):
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self):
        return self._headers

    def error(self):
        return None


class MemoryLog:
    """Topics in memory. ``partitions(topic)`` gives a topic's partition count; offsets of every partition
    start at ``base_offset``. :meth:`take` returns (and forgets) what was produced since the last call."""

    def __init__(self, partitions: Callable[[str], int], base_offset: int = 0):
        self.partitions = partitions
        self.base_offset = int(base_offset)
        self.next_offset: dict[tuple[str, int], int] = {}
        self.produced: dict[str, int] = {}  # topic -> messages
        self._new: list[OfflineMessage] = []

    def append(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None,
               headers=None) -> OfflineMessage:
        if partition is None:
            partition = partition_for(key, self.partitions(topic))
        tp = (topic, partition)
        off = self.next_offset.get(tp, self.base_offset)
        self.next_offset[tp] = off + 1
        msg = OfflineMessage(topic, partition, off, key, value, headers)
        self._new.append(msg)
        self.produced[topic] = self.produced.get(topic, 0) + 1
        return msg

    def take(self) -> list[OfflineMessage]:
        out, self._new = self._new, []
        return out

    def __len__(self) -> int:
        return len(self._new)


class MemoryProducer:
    """confluent-kafka ``Producer`` calls the live producers make, appending to a :class:`MemoryLog`; delivery
    callbacks run at once (success)."""

    def __init__(self, log: MemoryLog, _conf: dict | None = None):
        self.log = log

    def produce(self, topic, value=None, key=None, partition=None, headers=None, on_delivery=None, callback=None,
                **_kw) -> None:
        if isinstance(key, str):
            key = key.encode()
        msg = self.log.append(topic, key, value, partition if partition is not None and partition >= 0 else None,
                              headers)
        cb = on_delivery or callback
        if cb is not None:
            cb(None, msg)

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0


class OfflineConsumer:
    """What the archive sink's commit ledger asks of its consumer: commits are recorded, nothing is fetched."""

    def __init__(self):
        self.committed: dict[tuple[str, int], int] = {}

    def commit(self, offsets=None, asynchronous: bool = False):
        for tp in offsets or []:
            self.committed[(tp.topic, tp.partition)] = tp.offset
        return list(offsets or [])

    def pause(self, _partitions) -> None:
        pass

    def resume(self, _partitions) -> None:
        pass
