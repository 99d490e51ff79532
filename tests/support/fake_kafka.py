"""Stand-ins for confluent_kafka's Message and Producer in unit tests that need no broker."""

from __future__ import annotations

from confluent_kafka import KafkaError


class FakeMessage:
    """``error()`` is None, or end-of-partition with ``eof=True``; ``timestamp()`` is (1, ts_ms) when given."""

    def __init__(self, topic, partition, offset, value=None, ts_ms=None, key=None, eof=False):
        self._t, self._p, self._o, self._v, self._ts, self._k, self._eof = (
            topic, partition, offset, value, ts_ms, key, eof)

    def error(self):
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def key(self):
        return self._k

    def timestamp(self):
        return (1, self._ts) if self._ts is not None else (0, -1)


class FakeProducer:
    """Stands in for confluent_kafka.Producer: keeps its configuration (:attr:`conf`) and every produced
    (topic, key, value) in :attr:`sent`, and reports each as delivered."""

    def __init__(self, conf=None):
        self.conf, self.sent = conf, []

    def produce(self, topic, value=None, key=None, headers=None, on_delivery=None, **kw):
        self.sent.append((topic, key, value))
        if on_delivery:
            on_delivery(None, None)

    def poll(self, _timeout=0):
        return 0

    def flush(self, _timeout=None):
        return 0

    def __len__(self):
        return 0
