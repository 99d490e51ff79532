"""devtools.stack.read_from_start: a test's reader is assigned every partition from the first offset (no group
join on the embedded broker), and falls back to a subscription for a topic the broker does not list yet."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import OFFSET_BEGINNING

from devtools.stack import read_from_start


class FakeConsumer:
    def __init__(self, topics: dict[str, int]):
        self.listed = {t: SimpleNamespace(error=None, partitions={p: None for p in range(n)})
                       for t, n in topics.items()}
        self.assigned = None
        self.subscribed = None

    def list_topics(self, timeout=None):
        return SimpleNamespace(topics=self.listed)

    def assign(self, tps):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def subscribe(self, topics):
        self.subscribed = topics


def test_known_topics_are_assigned_from_their_first_offset():
    c = FakeConsumer({"a": 2, "b": 3, "other": 1})
    read_from_start(c, ["a", "b"])
    assert c.subscribed is None
    assert c.assigned == [("a", 0, OFFSET_BEGINNING), ("a", 1, OFFSET_BEGINNING),
                          ("b", 0, OFFSET_BEGINNING), ("b", 1, OFFSET_BEGINNING), ("b", 2, OFFSET_BEGINNING)]


def test_one_topic_by_name():
    c = FakeConsumer({"a": 2})
    read_from_start(c, "a")
    assert c.assigned == [("a", 0, OFFSET_BEGINNING), ("a", 1, OFFSET_BEGINNING)]


def test_a_topic_not_listed_yet_is_subscribed_to():
    c = FakeConsumer({"a": 2})
    read_from_start(c, ["a", "later"])
    assert c.assigned is None and c.subscribed == ["a", "later"]
