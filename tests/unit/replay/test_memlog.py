"""replay/memlog.py: Kafka's murmur2 partitioner, offsets per partition from a base, the producer calls the live
producers make."""

from __future__ import annotations

import pytest

from replay.memlog import MemoryLog, MemoryProducer, OfflineConsumer, murmur2, partition_for


@pytest.mark.parametrize("data,h", [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107),
                                    (b"a-little-bit-long-string", -985981536),
                                    (b"a-little-bit-longer-string", -1486304829),
                                    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971)])
def test_murmur2_matches_kafkas_test_vectors(data, h):
    assert murmur2(data) == h


def test_partitions_and_offsets():
    log = MemoryLog(lambda topic: 4, base_offset=10**15)
    prod = MemoryProducer(log)
    seen = []
    for key in (b"10.0.255.1", b"10.0.255.2", b"10.0.255.1"):
        prod.produce("flows.raw.v1", b"v", key, on_delivery=lambda err, msg: seen.append((err, msg.offset())))
    prod.produce("t", value=b"x", key="k", partition=2)
    msgs = log.take()
    assert [m.partition() for m in msgs[:3]] == [partition_for(b"10.0.255.1", 4), partition_for(b"10.0.255.2", 4),
                                                 partition_for(b"10.0.255.1", 4)]
    same = [m.offset() for m in msgs[:3] if m.partition() == msgs[0].partition()]
    assert same[0] == 10**15 and same[-1] == same[0] + (len(same) - 1)
    assert msgs[3].partition() == 2 and msgs[3].key() == b"k" and msgs[3].error() is None
    assert all(err is None for err, _ in seen) and log.take() == [] and log.produced["flows.raw.v1"] == 3
    assert partition_for(None, 4) == 0 and partition_for(b"x", 1) == 0


def test_offline_consumer_records_commits():
    from confluent_kafka import TopicPartition

    c = OfflineConsumer()
    res = c.commit(offsets=[TopicPartition("t", 1, 42)], asynchronous=False)
    assert c.committed == {("t", 1): 42} and res[0].error is None
