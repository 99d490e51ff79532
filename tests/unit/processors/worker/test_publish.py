"""processors.worker.publish: matrix.windows.v2 (one message per window, level and shard) and, with
processors.publish_v1, matrix.windows.v1 (one message per cell): the same cells."""

from __future__ import annotations

from fabricflow.settings import load_settings
from processors.config_files import read_inventory
from processors.worker.publish import OutputPublisher
from replay import replay_batches
from replay.config import core_factory_from
from schemas.matrix import decode_cells, decode_window
from tests.support.worker import INVENTORY
from tests.support.matrix import cell_set
from tests.support.synth import training_batches


class Capture:
    def __init__(self):
        self.sent = []

    def produce(self, topic, value, key, **_kw):
        self.sent.append((topic, key, value))

    def poll(self, _t=0):
        return 0

    def flush(self, _t=None):
        return 0


def publish(publish_v1: bool):
    s = load_settings(None, processors={"publish_v1": publish_v1})
    factory = core_factory_from(s.processors, inventory=read_inventory(str(INVENTORY)))
    outs = replay_batches([b for _e, b in training_batches(seconds=25)], [], factory, 4)
    pub = OutputPublisher(s, producer=Capture())
    pub.outputs(outs)
    by_topic: dict[str, list] = {}
    for topic, key, value in pub.producer.sent:
        by_topic.setdefault(topic, []).append((key.decode(), value))
    return s.kafka.topics, outs, by_topic


def test_one_v2_message_per_window_level_and_shard_and_v1_only_when_asked():
    t, outs, sent = publish(False)
    windows = [o for o in outs if o.kind == "matrix"]
    assert [k for k, _v in sent[t.matrix]] == [o.key for o in windows]
    assert len({k for k, _v in sent[t.matrix]}) == len(windows)
    assert t.matrix_v1 not in sent
    for (key, value), o in zip(sent[t.matrix], windows):
        w = decode_window(value)
        assert w == o.value and key == f"{w.window_start_ms}|{w.level}|{w.shard}"


def test_v1_and_v2_carry_the_same_cells():
    t, outs, sent = publish(True)
    v2 = [c | {"shard": decode_window(v).shard} for _k, v in sent[t.matrix] for c in decode_cells(v)]
    v1 = []
    for key, value in sent[t.matrix_v1]:
        (c,) = decode_cells(value)
        assert key == f"{c['window_start_ms']}|{c['level']}|{c['src']}|{c['dst']}|{c['category']}|{key.rsplit('|', 1)[1]}"
        v1.append(c | {"shard": int(key.rsplit("|", 1)[1])})
    assert len(v1) == len(v2) > 30 and len(sent[t.matrix_v1]) > 2 * len(sent[t.matrix])
    assert cell_set(v1) == cell_set(v2)
