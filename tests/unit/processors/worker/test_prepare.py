"""The processor worker without a broker, prepare: raw flow messages enriched, combined per shard and resharded; the enriched messages it publishes."""

from processors.logic.core import shard_of
from processors.worker import shuffle
from schemas import codec
from tests.support.synth import training_batches
from tests.support.worker import detecting_cores, detector_outputs, metric_value, raw_items, shuffle_messages, worker_without_broker


def test_prepare_enriches_and_reshards(tmp_path):
    p, sent = worker_without_broker(tmp_path)
    exp, batch = training_batches(seconds=2)[0]
    p.handle_raw("flows.raw.v1", exp.encode(), codec.encode_batch("flow_batch", batch))
    enriched = [codec.decode_batch(v) for t, _k, v, _p, _h in sent if t == p.settings.kafka.topics.flows_enriched]
    shuffled = [(part, shuffle.decode_flows(v)) for t, _k, v, part, _h in sent if t == p.settings.kafka.topics.shuffle]
    assert all(h and h[0][0] == "src" for t, _k, _v, _p, h in sent if t == p.settings.kafka.topics.shuffle)
    assert sum(len(e) for e in enriched) == len(batch)
    assert sum(len(b) for _p, b in shuffled) == len(batch)
    for part, b in shuffled:  # every row went to the shard shard_of() names (shuffle carries raw rows)
        assert set(shard_of(p.prepare.core.enrich(b), 2).tolist()) == {part}
    assert metric_value(p, "fabricflow_processors_records_total") == len(batch)
    assert set(enriched[0]["src_job"].tolist()) == {"train-a"}


def test_prepare_combines_raw_messages_per_shard_and_keeps_enriched_per_message(tmp_path):
    """handle_raw_many: one shuffle message per shard for all the raw messages taken (seg header: each raw
    message's rows), and flows.enriched.v1 exactly as when each raw message is handled alone."""
    from processors.worker.shuffle import segments_of

    batches = training_batches(seconds=4)
    one, sent1 = worker_without_broker(tmp_path)
    for item in raw_items(batches):
        one.handle_raw(*item)
    many, sent8 = worker_without_broker(tmp_path)
    many.handle_raw_many(raw_items(batches))
    t = many.settings.kafka.topics
    assert [(k, v) for tp, k, v, _p, _h in sent8 if tp == t.flows_enriched] == [(k, v) for tp, k, v, _p, _h in sent1 if tp == t.flows_enriched]
    shuffled = [(part, v, h) for tp, _k, v, part, h in sent8 if tp == t.shuffle]
    assert len(shuffled) == len({part for part, _v, _h in shuffled})  # one per shard
    assert all(len(segments_of(h)) == len(batches) for _p, _v, h in shuffled)  # every raw message has rows there
    for part, v, h in shuffled:
        segs = segments_of(h)
        rows = shuffle.decode_flows(v)
        assert [pos[0] for _src, pos, _n in segs] == sorted(pos[0] for _src, pos, _n in segs)
        assert sum(n for *_x, n in segs) == len(rows)
        # the rows of each piece are that raw message's rows of this shard, in order
        at = 0
        for _src, (off, chunk), n in segs:
            assert chunk == 0
            b = batches[off][1]
            assert rows[at : at + n].tobytes() == b[shard_of(many.prepare.core.enrich(b), 2) == part].tobytes()
            at += n
    # detect gives every shard the same state as from the one-message-per-raw-message shuffle
    for p, sent in ((one, sent1), (many, sent8)):
        for i, (part, v, src, segs) in enumerate(shuffle_messages(p, sent)):
            p.handle_shuffle(part, i, v, src, segs)
    assert set(detecting_cores(one)) == set(detecting_cores(many)) == {part for part, _v, _h in shuffled}
    assert detector_outputs(one, sent1) == detector_outputs(many, sent8)


def test_shuffle_pieces_respect_the_record_limit(tmp_path):
    from processors.worker.shuffle import fill

    pieces = [("r:0", (1, 0), 3), ("r:0", (2, 0), 4), ("r:0", (3, 0), 9), ("r:0", (4, 0), 1)]
    assert [[x[1][0] for x in g] for g in fill(pieces, 8)] == [[1, 2], [3], [4]]
    batches = training_batches(seconds=3)
    limit = max(len(b) for _e, b in batches) // 3
    p, sent = worker_without_broker(tmp_path, shuffle_max_records=limit)
    p.handle_raw_many(raw_items(batches))
    shuffled = shuffle_messages(p, sent)
    assert all(len(shuffle.decode_flows(v)) <= limit for _p, v, _s, _g in shuffled)
    # a raw message whose rows of a shard alone exceed the limit is split in chunks, as before
    assert any(src[1][1] > 0 for _p, _v, src, _g in shuffled)
    assert sum(len(shuffle.decode_flows(v)) for _p, v, _s, _g in shuffled) == sum(len(b) for _e, b in batches)


def test_enriched_messages_from_label_codes_are_the_plain_encoding(tmp_path):
    p, sent = worker_without_broker(tmp_path)
    _exp, batch = training_batches(seconds=2)[0]
    enriched = p.prepare.core.enrich(batch)
    coded = p.prepare.core.enricher.label_codes(enriched)
    assert coded is not None
    for step in (1, 7, 64, 65, len(batch) - 1, len(batch), len(batch) + 5):
        sent.clear()
        p.publisher.enriched(b"k", enriched, step, coded)
        with_codes = [v for _t, _k, v, _p, _h in sent]
        sent.clear()
        p.publisher.enriched(b"k", enriched, step)
        assert with_codes == [v for _t, _k, v, _p, _h in sent]


def test_enriched_messages_copy_the_flow_fields_of_the_raw_message(tmp_path):
    """prepare copies each raw message's encoded flow fields into its enriched messages (flows.enriched.v2, and
    flows.enriched.v1 with processors.publish_v1): the same bytes as encoding the enriched records (our writer),
    the same records (another writer's blocks), and the plain encoding when the rows are split over several
    enriched messages."""
    import random

    from tests.support.avro import other_writer

    _exp, batch = training_batches(seconds=2)[0]
    batch = batch[:300]
    for raw, step in ((codec.encode_batch("flow_batch", batch), 4096),
                      (other_writer("flow_batch", batch, random.Random(3), pad_varints=True), 4096),
                      (codec.encode_batch("flow_batch", batch), 64)):
        p, sent = worker_without_broker(tmp_path, enriched_max_records=step, publish_v1=True)
        p.handle_raw("flows.raw.v1", b"e1", raw, 0, 5)
        topics = p.settings.kafka.topics
        got = [v for t, _k, v, _p, _h in sent if t == topics.flows_enriched]
        got_v1 = [v for t, _k, v, _p, _h in sent if t == topics.flows_enriched_v1]
        expect = p.prepare.core.enrich(batch)
        lab = p.prepare.core.enrich_labels(batch)
        coded = lab.label_codes()
        plain = [codec.encode_coded("flow_enriched_batch_v2", lab[i : i + step], codec.coded_rows(coded, slice(i, i + step)))
                 for i in range(0, len(batch), step)]
        plain_v1 = [codec.encode_batch("flow_enriched_batch", expect[i : i + step]) for i in range(0, len(batch), step)]
        if raw[codec.HEADER_LEN:] == codec.encode_batch("flow_batch", batch)[codec.HEADER_LEN:]:
            assert got == plain
            assert got_v1 == plain_v1
        else:
            assert got != plain and got_v1 != plain_v1  # the other writer's blocks were copied ...
            assert len(got) == len(got_v1) == 1
            for m in (got[0], got_v1[0]):
                decoded = codec.decode_batch(m)  # ... and read back as the same records
                for name in expect.dtype.names:
                    assert decoded[name].tolist() == expect[name].tolist(), name


def test_enriched_v1_is_published_only_with_the_setting(tmp_path):
    _exp, batch = training_batches(seconds=2)[0]
    for publish_v1 in (False, True):
        p, sent = worker_without_broker(tmp_path, publish_v1=publish_v1)
        p.handle_raw("flows.raw.v1", b"e1", codec.encode_batch("flow_batch", batch[:100]), 0, 5)
        topics = p.settings.kafka.topics
        schemas = sorted(codec.schema_of(v) for t, _k, v, _p, _h in sent if t in (topics.flows_enriched, topics.flows_enriched_v1))
        assert schemas == (["flow_enriched_batch", "flow_enriched_batch_v2"] if publish_v1 else ["flow_enriched_batch_v2"])


def test_counter_samples_wait_for_a_batch_and_give_the_same_link_outputs(tmp_path):
    """detect queues counter samples per shard (processors.counter_batch_rows) and applies them together at the
    threshold and at the tick: the link-health outputs equal those of applying each message as it comes. A
    snapshot keeps the waiting samples (it does not apply them), and a restore from it applies them later."""
    from tests.support.flows import counters

    def message(t, exporters, late=False):
        rows = [dict(exporter=e, if_index=i, t=t - (25_000 if late and i == 1 else 0), in_octets=t * 1000 * (i + 1),
                     in_errors=t // 100 if e.endswith("11") else 0) for e in exporters for i in (1, 2)]
        return codec.encode_batch("counter_batch", counters(rows))

    msgs = [message(10_000 * k, ["192.0.2.10", "192.0.2.11"] if k % 2 else ["192.0.2.11", "192.0.2.12"], late=k == 5)
            for k in range(1, 13)]
    right_away, sent1 = worker_without_broker(tmp_path / "a", counter_batch_rows=1)
    queued, sent2 = worker_without_broker(tmp_path / "b", counter_batch_rows=40)
    link = right_away.settings.kafka.topics.link_health

    def links(sent):
        return [(k, v) for t, k, v, _p, _h in sent if t == link]

    for off, m in enumerate(msgs[:6]):
        right_away.handle_shuffle(1, off, m)
        queued.handle_shuffle(1, off, m)
    assert links(sent1) and not links(sent2)  # 24 samples wait (< 40)
    queued.checkpoint.commit([queued.shards[1]])
    assert not links(sent2) and queued.shards[1].counters_waiting  # kept, in the snapshot
    # the worker dies; the shard's next owner restores the snapshot with the waiting samples
    restored, sent3 = worker_without_broker(tmp_path / "c", counter_batch_rows=40)
    restored.state = dict(queued.state)
    restored.core_for(1)
    assert [len(c) for c in restored.shards[1].counters_waiting] == [4] * 6
    for off, m in enumerate(msgs[6:], 6):
        right_away.handle_shuffle(1, off, m)
        restored.handle_shuffle(1, off, m)
    assert len(links(sent3)) > 0  # 24 + 16 samples reached the threshold
    restored.on_tick(int(2e12))  # the rest at the tick
    assert not any(s.counters_waiting for s in restored.shards)
    assert links(sent3) == links(sent1)
    assert detecting_cores(restored)[1].engine.link.stale == detecting_cores(right_away)[1].engine.link.stale == 2
    assert metric_value(restored, "fabricflow_processors_counter_samples_total") == 24


def test_dropped_packet_notifications_go_to_their_exporters_shard_and_its_link_events_carry_their_reasons(tmp_path):
    """discards.raw.v1 messages travel unchanged to the shard that reports their exporter's link health (before
    the counters taken with them); its next link event of that port names the reasons."""
    from fabricflow.streams import counter_shard
    from processors.worker.shuffle import state_roles
    from tests.support.flows import EXPORTER, counters, discards

    p, sent = worker_without_broker(tmp_path, counter_batch_rows=1)
    key = EXPORTER.encode()
    notes = codec.encode_batch("discard_batch", discards([dict(t=2_000 + i * 100, reason=258) for i in range(30)]))
    p.handle_raw_many([("counters.raw.v1", key, codec.encode_batch("counter_batch", counters([dict(t=0)])), 0, 0),
                       ("discards.raw.v1", key, notes, 0, 0),
                       ("counters.raw.v1", key, codec.encode_batch("counter_batch", counters([dict(t=10_000, seq=2)])), 0, 1)])
    t = p.settings.kafka.topics
    shuffled = [(part, v, h) for tp, _k, v, part, h in sent if tp == t.shuffle]
    owner = counter_shard(key, 2)
    assert [(part, v) for part, v, _h in shuffled if v == notes] == [(owner, notes)]  # one copy, to the owner
    assert shuffled[0][1] == notes  # ahead of the counter messages taken with it
    for off, (part, v, h) in enumerate(shuffled):
        p.handle_shuffle(part, off, v, shuffle.source_of(h), shuffle.segments_of(h), state_only=state_roles(h))
    links = [v for tp, _k, v, _p, _h in sent if tp == t.link_health]
    assert detecting_cores(p)[owner].stats.discard_notifications == 30
    assert detecting_cores(p)[1 - owner].stats.discard_notifications == 0
    (event,) = [v for v in links if b"packet_drops" in v]  # and the interval's sample
    assert b"acl 30" in event and b"forwarding_drop" in event
    # a replay of the same rows gives the same link records
    from replay import replay_batches
    from replay.config import core_factory_from
    from tests.support.matrix import message_json, output_json

    outs = replay_batches([], [counters([dict(t=0)]), counters([dict(t=10_000, seq=2)])],
                          core_factory_from(p.settings.processors), 2, discard_batches=[codec.decode_batch(notes)])
    assert sorted(output_json("link", o.value) for o in outs if o.kind == "link") == sorted(map(message_json, links))


def test_taken_messages_are_prepared_once_the_first_has_waited_the_batch_wait(tmp_path):
    """prepare_waited: nothing before the first taken message is prepare_batch_wait_s old, then all of them (one
    batch: one shuffle message per shard); a batch of prepare_batch_messages is due at once."""
    p, sent = worker_without_broker(tmp_path, prepare_batch_messages=8, prepare_batch_wait_s=0.5)
    items = raw_items(training_batches(seconds=3))[:3]
    assert not any(p.prepare.take(item) for item in items)
    t0 = p.prepare.taken_since
    t = p.settings.kafka.topics
    assert not p.prepare.prepare_waited(t0 + 0.49) and not sent and len(p.prepare.taken) == 3
    assert p.prepare.prepare_waited(t0 + 0.5) and not p.prepare.taken
    shuffled = [part for tp, _k, _v, part, _h in sent if tp == t.shuffle]
    assert shuffled and len(shuffled) == len(set(shuffled))
    assert not p.prepare.prepare_waited(t0 + 10)  # nothing taken since
    q, _ = worker_without_broker(tmp_path, prepare_batch_messages=2)
    assert [q.prepare.take(item) for item in items[:2]] == [False, True]
