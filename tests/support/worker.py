"""The processor worker without a broker, for its tests: a Processors whose producer is a list, fake Faust
events, and readers of what it produced."""

from pathlib import Path
from unittest import mock

from fabricflow.settings import load_settings
from processors.logic.core import shard_of
from processors.worker import Processors, shuffle
from schemas import codec
from tests.support.fake_kafka import FakeProducer
from tests.support.synth import training_batches

INVENTORY = Path(__file__).resolve().parents[1] / "data" / "cluster_inventory.yaml"


class NoBrokerProducer(FakeProducer):
    """Stands in for confluent_kafka.Producer: these tests capture what is produced themselves."""

    def produce(self, *_a, **_kw):
        raise AssertionError("tests replace OutputPublisher.produce")


def worker_without_broker(tmp_path, **processors):
    s = load_settings(
        None,
        kafka={"bootstrap_servers": "127.0.0.1:9", "partitions": 2},
        processors={"inventory": str(INVENTORY), "datadir": str(tmp_path), "metrics_port": 0, "web_port": 0, **processors},
    )
    with mock.patch("processors.worker.publish.Producer", NoBrokerProducer):  # no librdkafka "connection refused" noise
        p = Processors(s)
    sent = []
    p.publisher.produce = lambda topic, key, value, partition=None, headers=None: sent.append((topic, key, value, partition, headers))
    p.publisher.poll = lambda: None
    p.state = {}  # the Faust table, replaced by a dict
    return p, sent


def detecting_cores(p):
    """partition -> core of the shards the worker detects."""
    return {s.partition: s.core for s in p.shards.detecting()}


def metric_value(p, name, **labels):
    return p.metrics.registry.get_sample_value(name, labels) or 0


def raw_items(batches, first_offset=0, partition=0):
    return [("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", b), partition, first_offset + i)
            for i, (exp, b) in enumerate(batches)]


def shuffle_messages(p, sent):
    from processors.worker.shuffle import segments_of, source_of

    return [(part, v, source_of(h), segments_of(h)) for t, _k, v, part, h in sent if t == p.settings.kafka.topics.shuffle]


def detector_outputs(p, sent):
    """Matrix, incast, straggler, link and pattern outputs produced so far plus those of a final flush (alerts'
    evidence depends on batching, docs/replay.md), canonical and sorted."""
    import json

    from fabricflow.streams import OUTPUTS

    t = p.settings.kafka.topics
    kinds = {getattr(t, s.name): kind for kind, s in OUTPUTS.items() if kind != "alert"}
    from tests.support.matrix import message_json, output_json

    out = [(kinds[tp], k, message_json(v)) for tp, k, v, _p, _h in sent if tp in kinds]
    for core in detecting_cores(p).values():
        out += [(o.kind, o.key.encode(), output_json(o.kind, o.value)) for o in core.flush() if o.kind != "alert"]
    assert out
    return sorted(out)


class Msg:
    def __init__(self, partition, offset, headers=None, generation_id=None):
        self.partition, self.offset, self.headers, self.generation_id = partition, offset, headers, generation_id


class Event:
    def __init__(self, partition, offset, value, headers=None, generation_id=None):
        self.message = Msg(partition, offset, headers, generation_id)
        self.value = value


def shard_msgs(p, seconds=30, shard=0):
    out = []
    for _e, b in training_batches(seconds=seconds):
        e = p.prepare.core.enrich(b)
        out.append(shuffle.encode_flows(b[shard_of(e, 2) == shard]))
    return out


def state_of(p, part):
    return p.shards[part].core.snapshot(), p.shards[part].last_offset


class RecordingStore(dict):
    def __init__(self, order):
        super().__init__()
        self.order = order

    def __setitem__(self, key, value):
        self.order.append("write")
        super().__setitem__(key, value)
