"""bench/ingest.py's Kafka peers on the embedded broker: their topics read back and counted, and one real
goflow2 step when a goflow2 executable is there (``--goflow2`` / $FF_GOFLOW2 / PATH)."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest
from confluent_kafka import Producer

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and sched_setaffinity")]

from devtools import loadgen as common  # noqa: E402
from bench import ingest as bi  # noqa: E402
from bench import ingest_peers as peers  # noqa: E402


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def test_peer_topics_are_counted_from_the_start(kafka_bootstrap):
    gf, pm = (f"bench-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("goflow2", "pmacct"))
    for t in (gf, pm):
        peers._create_topic(kafka_bootstrap, t)
    good = [bytes([n]) + bytes(n) for n in range(1, 120)]  # one varint-prefixed message each
    _produce(kafka_bootstrap, gf, good + [b"\x05abc", b"\x01ab"])
    assert peers.read_goflow2_topic(kafka_bootstrap, gf) == (len(good) + 2, 2)
    flows = [json.dumps({"ip_src": f"10.0.0.{i}", "packets": i}).encode() for i in range(1, 51)]
    _produce(kafka_bootstrap, pm, flows + [b"\n".join(flows[:3])])  # pmacct may batch objects per message
    assert peers.read_pmacct_topic(kafka_bootstrap, pm) == (51, 53, sum(range(1, 51)) + 6)
    for t in (gf, pm):
        peers._delete_topic(kafka_bootstrap, t)


GOFLOW2 = peers.goflow2_binary(None)


@pytest.mark.skipif(GOFLOW2 is None, reason="no goflow2 executable ($FF_GOFLOW2 or goflow2 on PATH)")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("protocol", ["netflow9", "sflow"])
def test_goflow2_one_step_delivers_every_flow(kafka_bootstrap, tmp_path, protocol):
    stream = bi.stream_for(protocol, records=25, samples=7)
    coll = peers.PeerCollector("goflow2", protocol, common.free_udp_port(), 0, tmp_path, kafka_bootstrap, GOFLOW2)
    affinity = os.sched_getaffinity(0)
    try:
        step = bi.run_step(coll, stream, bi.packets_per_datagram(stream), rate=500, seconds=0.4, sender_cpu=0)
    finally:
        os.sched_setaffinity(0, affinity)  # run_step pins the caller (the sender)
        if coll.proc is not None:
            coll.stop()
    assert step.clean, step
    assert step.received_records == step.sent_records > 0
    assert step.cpu_s > 0 and step.kernel_drops == 0
