"""replay_batches: same outputs as live-order feeding of ProcessorCore per shard; determinism; overrides."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricflow.settings import load_settings
from processors.logic.core import ProcessorCore, shard_of
from replay import (
    ReplayError,
    canonical,
    core_factory_from,
    counter_shard_of,
    parse_set,
    replay_batches,
    slice_batches,
)
from tests.support import replay as h
from tests.support.matrix import matrix_cells, merge_shards

PARTITIONS = 4


@pytest.fixture(scope="module")
def proc_settings():
    return load_settings(None).processors


@pytest.fixture(scope="module")
def factory(proc_settings):
    return core_factory_from(proc_settings, inventory=h.inventory())


@pytest.fixture(scope="module")
def flows():
    return h.traffic()


def live_reference(batches, counters, factory, partitions):
    """What a live worker does, written out by hand: enrich, shard_of, one core per shard, flush."""
    front = factory()
    cores = [factory() for _ in range(partitions)]
    out = []
    for b in batches:
        enriched = front.enrich(b)
        shards = shard_of(enriched, partitions)
        for s in range(partitions):
            sub = enriched[shards == s]
            if len(sub):
                out.extend(cores[s].process_enriched(sub))
    cs = counter_shard_of(counters, partitions)
    for s in range(partitions):
        out.extend(cores[s].process_counters(counters[cs == s]))
    for c in cores:
        out.extend(c.flush())
    return out


def kinds(outputs):
    return {k: sum(o.kind == k for o in outputs) for k in ("matrix", "incast", "straggler", "link", "alert")}


def test_scenario_has_incast_straggler_and_link_events(flows, factory):
    out = replay_batches(h.live_order(h.messages(flows)), [h.counters()], factory, PARTITIONS)
    inc = [o.value for o in out if o.kind == "incast"]
    assert [e["state"] for e in inc][0] == "open" and inc[0]["destination"] == h.DST
    assert {o.value["node"] for o in out if o.kind == "straggler" and o.value["straggler"]} == {h.SLOW}
    assert any(o.value["kind"] == "link_downgrade" for o in out if o.kind == "link")


def test_replay_equals_hand_written_live_feeding(flows, factory):
    batches = h.live_order(h.messages(flows))
    counters = h.counters()
    live = live_reference(batches, counters, factory, PARTITIONS)
    rep = replay_batches(batches, [counters], factory, PARTITIONS)
    assert canonical(rep) == canonical(live)
    assert len(rep) == len(live)


def test_time_slices_equal_live_message_order(flows, factory):
    """The canonical (slice, partition, offset) batching gives the live results when nothing arrived late."""
    msgs = h.messages(flows, partitions=3, per_message=25)
    live = replay_batches(h.live_order(msgs), [h.counters()], factory, PARTITIONS)
    rows = np.concatenate([m for p in sorted(msgs) for m in msgs[p]])  # (partition, offset) order
    sliced = replay_batches(slice_batches(rows, "time_end_ms"), slice_batches(h.counters(), "time_received_ms"),
                            factory, PARTITIONS)
    assert canonical(sliced) == canonical(live)


ALERT_IDENTITY = ("dedup_key", "rule", "severity", "state", "first_seen_ms", "entities")


def test_alerts_same_identity_totals_follow_batching(flows, factory):
    """Policy alerts fire at a batch boundary: who/what/when-first match live; running totals
    (bytes_est, flows, last_seen_ms, sample_flows) cover the data up to the firing batch (docs/replay.md)."""
    f = h.with_unregistered_host(flows)
    msgs = h.messages(f, partitions=3, per_message=30)
    live = replay_batches(h.live_order(msgs), [], factory, PARTITIONS)
    rows = np.concatenate([m for p in sorted(msgs) for m in msgs[p]])
    sliced = replay_batches(slice_batches(rows, "time_end_ms"), [], factory, PARTITIONS)
    for kind in ("matrix", "incast", "straggler", "pattern"):
        assert canonical([o for o in sliced if o.kind == kind]) == canonical([o for o in live if o.kind == kind])
    la = [o.value for o in live if o.kind == "alert"]
    sa = [o.value for o in sliced if o.kind == "alert"]
    assert la and [a["rule"] for a in la] == ["unregistered_host"]
    assert [{k: a[k] for k in ALERT_IDENTITY} for a in sa] == [{k: a[k] for k in ALERT_IDENTITY} for a in la]
    again = replay_batches(slice_batches(rows, "time_end_ms"), [], factory, PARTITIONS)
    assert again == sliced  # replay itself is exact, alerts included


def test_same_input_twice_gives_identical_output_lists(flows, factory):
    batches = slice_batches(flows, "time_end_ms")
    a = replay_batches(batches, [h.counters()], factory, PARTITIONS)
    b = replay_batches(batches, [h.counters()], factory, PARTITIONS)
    assert a == b  # same order too, not only the same set
    assert len(a) > 100


def test_partition_count_only_moves_work_between_cores(flows, factory):
    batches = slice_batches(flows, "time_end_ms")
    one = replay_batches(batches, [h.counters()], factory, 1)
    many = replay_batches(batches, [h.counters()], factory, 7)
    assert canonical(merge_shards(one)) == canonical(merge_shards(many))
    keys = [o.key for o in many if o.kind == "matrix"]
    assert len(keys) == len(set(keys)), "no two matrix messages share a key"


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 5), st.integers(5, 200), st.sampled_from([1_000, 10_000, 60_000]))
def test_batching_does_not_change_results(partitions, per_message, slice_ms):
    """Any message size / partition split / slice size: same windows, events and scores."""
    flows = h.traffic(seconds=40, incast_at=(10, 12))
    fac = core_factory_from(load_settings(None).processors, inventory=h.inventory())
    ref = replay_batches(slice_batches(flows, "time_end_ms"), [], fac, 3)
    msgs = h.messages(flows, partitions=partitions, per_message=per_message)
    rows = np.concatenate([m for p in sorted(msgs) for m in msgs[p]])
    got = replay_batches(slice_batches(rows, "time_end_ms", slice_ms), [], fac, 3)
    assert canonical(got) == canonical(ref)


def test_threshold_override_changes_incast(flows, proc_settings):
    batches = slice_batches(flows, "time_end_ms")
    base = replay_batches(batches, [], core_factory_from(proc_settings, inventory=h.inventory()), PARTITIONS)
    strict = core_factory_from(proc_settings, parse_set(["incast.min_sources=8"]), inventory=h.inventory())
    out = replay_batches(batches, [], strict, PARTITIONS)
    assert kinds(base)["incast"] >= 2 and kinds(out)["incast"] == 0  # 7 sources < 8
    assert canonical([o for o in out if o.kind == "matrix"]) == canonical([o for o in base if o.kind == "matrix"])
    loose = core_factory_from(proc_settings, parse_set(["incast.open_fraction=0.05", "incast.min_sources=2"]),
                              inventory=h.inventory())
    more = replay_batches(batches, [], loose, PARTITIONS)
    opened = {o.value["destination"] for o in more if o.kind == "incast" and o.value["state"] == "open"}
    assert h.DST in opened and len(opened) >= 1


def test_straggler_override_changes_scores(flows, proc_settings):
    batches = slice_batches(flows, "time_end_ms")
    patient = core_factory_from(proc_settings, parse_set(["straggler.persist_windows=20"]), inventory=h.inventory())
    out = replay_batches(batches, [], patient, PARTITIONS)
    assert not any(o.value["straggler"] for o in out if o.kind == "straggler")
    assert any(o.value["node"] == h.SLOW and o.value["score"] < -3 for o in out if o.kind == "straggler")


def test_inventory_override_changes_labels(flows, proc_settings):
    batches = slice_batches(flows[:400], "time_end_ms")
    empty = core_factory_from(proc_settings)  # settings have no inventory: every address unknown
    out = replay_batches(batches, [], empty, PARTITIONS)
    nodes = {c["src"] for c in matrix_cells(out) if c["level"] == "node"}
    assert nodes and all(not n.startswith("gpu-") for n in nodes)
    assert not any(o.kind == "straggler" for o in out)


def test_cores_are_real_processor_cores(flows, factory):
    cores = [factory() for _ in range(PARTITIONS)]
    replay_batches(slice_batches(flows, "time_end_ms"), [], factory, PARTITIONS, cores=cores)
    assert all(isinstance(c, ProcessorCore) for c in cores)
    assert sum(c.engine.records_in for c in cores) == len(flows)
    assert sum(c.engine.stats["too_late_main"] + c.engine.stats["too_late_incast"] for c in cores) == 0


def test_parse_set_yaml_scalars_and_errors():
    assert parse_set(["incast.min_sources=3", "incast.open_fraction=0.5", "straggler.categories=[rocev2]",
                      "matrix.x= true "]) == {
        "incast": {"min_sources": 3, "open_fraction": 0.5}, "straggler": {"categories": ["rocev2"]},
        "matrix": {"x": True}}
    for bad in ("min_sources=3", "incast.min_sources", "incast.=3", "incast.a={b: 1}", "incast.a=[1"):
        with pytest.raises(ReplayError):
            parse_set([bad])


@pytest.mark.parametrize("item, needle", [
    ("incast.no_such=1", "no_such"),
    ("nodetector.x=1", "nodetector"),
    ("incast.min_sources=[1, 2", "YAML"),
])
def test_bad_set_is_one_line_error(proc_settings, item, needle):
    with pytest.raises(ReplayError) as e:
        core_factory_from(proc_settings, parse_set([item]))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_inventory_and_policy_are_one_line_errors(proc_settings, tmp_path):
    with pytest.raises(ReplayError, match="inventory"):
        core_factory_from(proc_settings, inventory=str(tmp_path / "missing.yaml"))
    bad = tmp_path / "policy.yaml"
    bad.write_text("segmentation: {no_such_key: 1}\n")
    with pytest.raises(ReplayError, match="policy") as e:
        core_factory_from(proc_settings, policy=str(bad))
    assert "\n" not in str(e.value)
    with pytest.raises(ReplayError, match="policy file"):
        core_factory_from(proc_settings, policy=str(tmp_path / "nope.yaml"))


def test_partitions_must_be_positive(factory):
    with pytest.raises(ValueError):
        replay_batches([], [], factory, 0)
    assert replay_batches([], [], factory, 2) == []


def test_time_range_reads_both_ends_and_refuses_an_empty_or_bad_range():
    import pytest

    from replay.core import ReplayError, time_range

    assert time_range("2026-12-01T00:00:00Z", "1796083260000") == (1796083200000, 1796083260000)
    with pytest.raises(ReplayError, match="empty time range: from 2026-12-01T00:01:00Z is not before"):
        time_range("2026-12-01T00:01:00Z", "2026-12-01T00:00:00Z")
    with pytest.raises(ReplayError):
        time_range("yesterday-ish", "2026-12-01T00:00:00Z")
