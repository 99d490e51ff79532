"""replay.kafka_source against a broker that answers short fetches with nothing (Tansu's s3 engine after a
restart): the read starts again with the long fetch wait; a broker silent at both waits is one error line."""

from __future__ import annotations

import confluent_kafka
import pytest

from fabricflow.settings import load_settings
from replay import ReplayError, kafka_source
from replay.kafka_source import FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS
from schemas import codec
from tests.support.fake_kafka import FakeMessage
from tests.support.flows import discards

from tests.support import replay as h


DROPS = discards([dict(t=1_000 + i, reason=258) for i in range(5)])


class _Broker:
    """Partitions of messages; answers a consumer whose fetch wait is in ``answers_at`` only."""

    def __init__(self, data: dict[str, dict[int, list[bytes]]], answers_at: set[int], silent_after: int | None = None):
        self.data, self.answers_at, self.silent_after = data, answers_at, silent_after
        self.consumers: list[_Consumer] = []


class _Consumer:
    broker: _Broker

    def __init__(self, conf):
        self.wait = conf["fetch.wait.max.ms"]
        self.at = None
        self.closed = False
        self.broker.consumers.append(self)

    def list_topics(self, timeout=None):
        tm = type("T", (), {})
        md = type("M", (), {})()
        md.topics = {}
        for t, parts in self.broker.data.items():
            o = tm()
            o.partitions, o.error = {p: None for p in parts}, None
            md.topics[t] = o
        return md

    def get_watermark_offsets(self, tp, timeout=None):
        return 0, 1  # stale, like Tansu's

    def assign(self, tps):
        (tp,) = tps
        self.at = [tp.topic, tp.partition, tp.offset]

    def poll(self, timeout=None):
        t, p, o = self.at
        if self.wait not in self.broker.answers_at:
            return None  # neither records nor end of partition
        msgs = self.broker.data[t][p]
        if self.broker.silent_after is not None and o >= self.broker.silent_after:
            return None  # answered part of the partition, then nothing
        if o >= len(msgs):
            return FakeMessage(t, p, o, eof=True)
        self.at[2] = o + 1
        return FakeMessage(t, p, o, msgs[o])

    def close(self):
        self.closed = True


@pytest.fixture
def broker(monkeypatch):
    def make(answers_at, silent_after=None):
        s = load_settings(None)
        batches = h.messages(h.traffic(seconds=20), partitions=2, per_message=40)
        data = {s.kafka.topics.flows_raw: {p: [codec.encode_batch("flow_batch", b) for b in ms]
                                           for p, ms in batches.items()},
                s.kafka.topics.counters_raw: {0: []},
                s.kafka.topics.discards_raw: {0: [codec.encode_batch("discard_batch", DROPS)]}}
        b = _Broker(data, answers_at, silent_after)
        monkeypatch.setattr(confluent_kafka, "Consumer", type("C", (_Consumer,), {"broker": b}))
        rows = sum(len(x) for ms in batches.values() for x in ms)
        return s, b, rows
    return make


def test_a_silent_partition_is_read_again_with_the_long_fetch_wait(broker):
    s, b, rows = broker({SLOW_FETCH_WAIT_MS})
    retried = []
    src = kafka_source(s.kafka, offsets={("flows", 0): (0, None), ("flows", 1): (0, None)}, timeout_s=0.3,
                       on_retry=lambda: retried.append(1))
    assert len(src.flows) == rows
    assert [c.wait for c in b.consumers] == [FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS]
    assert all(c.closed for c in b.consumers) and retried == [1]


def test_a_healthy_broker_is_read_once_with_the_short_wait(broker):
    s, b, rows = broker({FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS})
    src = kafka_source(s.kafka, offsets={("flows", 0): (0, None), ("flows", 1): (0, None)}, timeout_s=0.3)
    assert len(src.flows) == rows and [c.wait for c in b.consumers] == [FAST_FETCH_WAIT_MS]


def test_a_partition_that_stops_answering_midway_is_an_error_not_a_short_read(broker):
    s, b, _rows = broker({FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS}, silent_after=3)
    with pytest.raises(ReplayError, match=r"@ 3: no record and no end of partition .*500 ms fetch wait"):
        kafka_source(s.kafka, offsets={("flows", 0): (0, 10)}, timeout_s=0.3)
    assert len(b.consumers) == 2


def test_silent_at_both_waits_is_one_error_line(broker):
    s, b, _rows = broker(set())
    with pytest.raises(ReplayError) as e:
        kafka_source(s.kafka, offsets={("flows", 0): (0, None)}, timeout_s=0.3)
    assert "\n" not in str(e.value) and "is the broker serving reads?" in str(e.value)


def test_dropped_packet_notifications_are_read_by_their_offsets_too(broker):
    """``discards:P:A-B`` ranges of discards.raw: the drop reasons the replayed link events read."""
    from replay.kafka_source import parse_offsets

    s, _b, rows = broker({FAST_FETCH_WAIT_MS, SLOW_FETCH_WAIT_MS})
    offsets = parse_offsets("0:0-,discards:0:0-")
    assert offsets == {("flows", 0): (0, None), ("discards", 0): (0, None)}
    src = kafka_source(s.kafka, offsets=offsets, timeout_s=0.3)
    assert src.discards.tobytes() == DROPS.tobytes() and [len(b) for b in src.discard_batches()] == [5]
    assert ("discards", 0) in src.read and 0 < len(src.flows) < rows
