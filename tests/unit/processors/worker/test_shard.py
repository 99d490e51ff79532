"""The processor worker without a broker, counter batches and their owner shards."""

from processors.worker import shuffle
from schemas import codec
from tests.support.worker import Event, detecting_cores, metric_value, worker_without_broker


def test_counter_batches_reach_every_shard_and_copies_only_update_the_port_state(tmp_path):
    """prepare sends a counter batch to its exporter's shard and a copy marked role=state to every other
    shard; detect applies such a copy to the port state only (node_state), with no outputs and no counting."""
    from tests.support.flows import counters

    p, sent = worker_without_broker(tmp_path, counter_batch_rows=1)
    msgs = [codec.encode_batch("counter_batch", counters([dict(exporter="192.0.2.10", if_index=1, t=t,
                                                               in_octets=t * 1000)])) for t in (10_000, 20_000)]
    for off, m in enumerate(msgs):
        p.handle_raw("counters.raw.v1", b"192.0.2.10", m, 0, off)
    shuffled = [(part, h) for t, _k, _v, part, h in sent if t == p.settings.kafka.topics.shuffle]
    assert sorted(part for part, _h in shuffled) == [0, 0, 1, 1]
    owner = [part for part, h in shuffled if not shuffle.is_state_only(h)]
    assert len(owner) == 2 and len(set(owner)) == 1
    other = 1 - owner[0]
    assert all(shuffle.is_state_only(h) for part, h in shuffled if part == other)
    sent.clear()
    for off, m in enumerate(msgs):
        assert p.handle_shuffle(other, off, m, state_only=True)
    cores = detecting_cores(p)
    assert not [s for s in sent if s[0] == p.settings.kafka.topics.link_health]  # no outputs from a copy
    assert cores[other].engine.link.keys == [("192.0.2.10", 1)]  # but the port state is there
    assert metric_value(p, "fabricflow_processors_counter_samples_total") == 0
    for off, m in enumerate(msgs):
        p.handle_shuffle(owner[0], off, m)
    assert [s for s in sent if s[0] == p.settings.kafka.topics.link_health]
    assert metric_value(p, "fabricflow_processors_counter_samples_total") == 2


def test_counter_batches_taken_together_travel_as_one_message_per_shard_with_the_same_results(tmp_path):
    """Counter batches that prepare takes together go to each shard in ONE shuffle message (pieces framed as
    they came, a role per piece); detect then gives the same link records and the same port state in every
    shard as when each batch travels alone (the owner reports, the others keep the state)."""
    import zlib

    from tests.support.flows import counters

    exporters = ["192.0.2.10", "192.0.2.14", "192.0.2.11", "192.0.2.15"]
    assert len({zlib.crc32(e.encode()) % 2 for e in exporters}) == 2  # both shards own some
    items = [("counters.raw.v1", e.encode(), codec.encode_batch("counter_batch", counters(
        [dict(exporter=e, if_index=i, t=t, in_octets=t * (1000 + k), out_discards=t // 10 * (k == 2)) for i in (1, 2)])),
        0, off) for off, (t, k, e) in enumerate((t, k, e) for t in (10_000, 20_000, 30_000) for k, e in enumerate(exporters))]

    def run(together: bool):
        p, sent = worker_without_broker(tmp_path / str(together), counter_batch_rows=1)
        if together:
            p.handle_raw_many(items)
        else:
            for it in items:
                p.handle_raw(*it)
        topic = p.settings.kafka.topics.shuffle
        shuffled = [(part, v, h) for t, _k, v, part, h in sent if t == topic]
        sent.clear()
        offsets = {}
        for part, v, h in shuffled:
            offsets[part] = offsets.get(part, -1) + 1
            p.handle_shuffle_events([Event(part, offsets[part], v, h)])
        links = {}  # the owner shard's link records in order (shards run independently: no order across them)
        for t, k, v, _p, _h in sent:
            if t == p.settings.kafka.topics.link_health:
                links.setdefault(zlib.crc32(k.split(b"|")[0]) % 2, []).append((k, v))
        state = {part: core.engine.link.snapshot() for part, core in detecting_cores(p).items()}
        return shuffled, links, state, metric_value(p, "fabricflow_processors_counter_samples_total")

    alone, links1, state1, n1 = run(False)
    together, links2, state2, n2 = run(True)
    assert len(alone) == 2 * len(items) and sorted(part for part, _v, _h in together) == [0, 1]
    assert all(v.startswith(shuffle.COUNTERS_MAGIC) for _p, v, _h in together)
    assert {shuffle.header(h, "role").count(",") for _p, _v, h in together} == {len(items) - 1}  # a role per piece
    assert sorted(links2) == [0, 1] and links1 == links2 and n1 == n2 == 2 * len(items)
    assert state1 == state2 and all(len(s["keys"]) == 2 * len(exporters) for s in state2.values())


def test_counter_owner_shard_is_the_one_replay_gives(tmp_path):
    """The shard that reports a counter batch's link health is chosen by one rule (fabricflow.streams.counter_shard):
    live from the message key (the exporter address as ingest writes it), replay from the rows' exporter_addr.
    192.0.2.10 and .14 are exporters whose shard the earlier replay rule (CRC32 of the 16-byte address) put
    elsewhere than live."""
    from replay.core import counter_shard_of
    from tests.support.flows import counters

    p, sent = worker_without_broker(tmp_path)
    exporters = ["192.0.2.10", "192.0.2.14", "10.255.0.4", "2001:db8::7"]
    for off, e in enumerate(exporters):
        rows = counters([dict(exporter=e, if_index=i, t=10_000) for i in (1, 2)])
        p.handle_raw("counters.raw.v1", e.encode(), codec.encode_batch("counter_batch", rows), 0, off)
        owners = [part for t, _k, _v, part, h in sent
                  if t == p.settings.kafka.topics.shuffle and not shuffle.state_roles(h)]
        assert owners == sorted(set(counter_shard_of(rows, 2).tolist())), e
        sent.clear()
