"""The live reader's decoding, without a broker: Avro outputs, JSON patterns, raw counter batches, bad bytes."""

from __future__ import annotations

import json

import numpy as np

from console.feed import KafkaFeed
from console.live import LiveStore
from fabricflow import streams
from fabricflow.settings import load_settings
from schemas import codec
from schemas.columns import addr16, empty_counters
from tests.support.console import INCAST, WS, cell, layout
from tests.support.matrix import window_message
from tests.support.synth import filled


def _counters(t_ms, octets, speed=25_000_000_000, errors=0):
    c = filled(empty_counters(1), exporter_addr=np.frombuffer(addr16("10.0.255.2"), dtype=np.uint8), if_index=1,
               if_speed=speed, if_oper_up=True, time_received_ms=t_ms, in_octets=octets, out_octets=octets,
               in_errors=errors)
    return codec.encode_batch("counter_batch", c)


def test_the_feed_reads_every_output_topic_of_the_stream_catalog():
    s = load_settings()
    feed = KafkaFeed(s, LiveStore(layout()))
    assert feed.topic_kind == {streams.topic_of(s.kafka, st): kind for kind, st in streams.OUTPUTS.items()}
    assert not LiveStore.shows("no_such_kind")


def test_take_decodes_every_kind_and_counts_bad_messages():
    s = load_settings()
    store = LiveStore(layout())
    feed = KafkaFeed(s, store)
    t = s.kafka.topics
    feed._take(t.matrix, window_message([cell(WS, "gpu01", "gpu02", "collective", 1000),
                                         cell(WS, "gpu02", "gpu01", "collective", 500)]))
    feed._take(t.incast, codec.encode_record("incast_event", INCAST))
    pattern = {"kind": "pattern", "state": "open", "job": "train-a", "deviation": "period_change", "window_start_ms": WS,
               "window_end_ms": WS + 10_000, "detail": "2.0 s -> 3.1 s", "baseline_period_ms": 2000,
               "current_period_ms": 3100, "added_pairs": [], "removed_pairs": [], "peers": {}}
    feed._take(t.patterns, json.dumps(pattern).encode())
    feed._take(t.counters_raw, _counters(WS, 0))
    feed._take(t.counters_raw, _counters(WS + 10_000, 31_250_000_000 // 8 * 10 // 10, speed=1_000_000_000, errors=500))
    feed._take(t.matrix, b"\xc3\x01garbage")
    feed._take(t.matrix, codec.encode_record("matrix_cell", cell(WS, "gpu01", "gpu02", "collective", 1000)))  # v1
    feed._take(t.alerts, b"{not json")
    assert feed.bad_messages == 3 and feed.messages == 8
    assert store.cells(WS)[0].num_rows == 2
    types = sorted(e["type"] for e in store.events())
    assert types == ["incast", "pattern"]
    port = next(p for p in store.port_states() if (p.switch, p.if_index) == ("tor2", 1))
    assert port.if_speed == 1_000_000_000 and port.errors_per_s == 50.0
    assert port.util_in == (31_250_000_000 // 8) * 8 / 10 / 1_000_000_000


def test_avro_patterns_and_timelines():
    """patterns.v1 is Avro: baselines/deviations become pattern events; the per-window pattern_timeline records
    (one per job and window) are kept per job, not listed as events nor read for the job's periods."""
    s = load_settings()
    store = LiveStore(layout())
    feed = KafkaFeed(s, store)
    t = s.kafka.topics
    base = {"kind": "pattern_deviation", "state": "open", "job": "train-a", "deviation": "period_shift",
            "window_start_ms": WS, "window_end_ms": WS + 10_000, "detail": "2.0 s -> 3.1 s", "baseline_period_ms": 2000,
            "current_period_ms": 3100, "added_pairs": [], "removed_pairs": [], "peers": {}}
    timeline = base | {"kind": "pattern_timeline", "state": "", "deviation": "", "detail": "", "baseline_period_ms": -1,
                       "current_period_ms": -1, "iteration_period_ms": 2000, "slot_ms": 250,
                       "phases": [{"phase": "communication", "start_ms": WS, "end_ms": WS + 500, "bytes_est": 9}]}
    feed._take(t.patterns, codec.encode_record("pattern", base))
    feed._take(t.patterns, codec.encode_record("pattern", timeline | {"window_start_ms": WS + 10_000}))
    assert feed.bad_messages == 0 and feed.messages == 2
    assert [e["type"] for e in store.events()] == ["pattern"]
    assert [p["current_period_ms"] for p in store.pattern_records("train-a")] == [3100]
    assert store.timelines["train-a"]["iteration_period_ms"] == 2000


def test_a_v2_window_shows_as_its_cells_one_by_one():
    """The live store keeps a matrix.windows.v2 window as its columns: the same matrix, node totals and top pairs
    as from the same cells given one at a time."""
    from schemas.matrix import MatrixWindow
    from tests.support.console import cells

    node = [c for c in cells(WS) if c["level"] == "node"]
    group = [c for c in cells(WS) if c["level"] == "group"]
    by_window, by_cell = LiveStore(layout()), LiveStore(layout())
    by_window.add("matrix", MatrixWindow.from_cells(node))
    by_window.add("matrix", MatrixWindow.from_cells(group, shard=1))
    for c in node + group:
        by_cell.add("matrix", c)
    a, b = by_window.cells(WS)[0], by_cell.cells(WS)[0]
    key = lambda t: sorted(zip(*(t.column(n).to_pylist() for n in t.column_names)))  # noqa: E731
    assert key(a) == key(b) and a.num_rows == len(node) + len(group)


def test_live_job_membership_replaces_the_layouts_jobs():
    """inventory.jobs.v1 rows: the jobs shown become those holding nodes within the lookback (host names by their
    short name), the file's jobs until the first row; a job that ended before the lookback is gone."""
    from processors.logic.enrich.inventory.membership import Holding, holding_row

    s = load_settings()
    store = LiveStore(layout())
    feed = KafkaFeed(s, store)
    assert store.layout.jobs == {"train-a": layout().jobs["train-a"]}
    now = WS + 600_000
    old = Holding("slurm:1", "old-job", ("gpu01",), WS - 7_200_000, WS - 7_000_000)
    live = Holding("slurm:2", "llm", ("gpu02.cluster.local", "gpu04", "not-a-node"), WS)
    v0 = store.version
    feed._take(s.kafka.topics.jobs, codec.encode_record("job_membership", holding_row(old, "slurm", WS - 7_000_000)))
    feed.take_jobs([holding_row(live, "slurm", WS)], now_ms=now)
    assert store.layout.jobs == {"llm": ["gpu02", "gpu04"]} and store.version > v0
