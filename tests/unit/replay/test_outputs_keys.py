"""Output keys: a group-level matrix cell summed by several shards goes out once per shard, under keys that
differ; summing them (what docs/architecture.md tells consumers) gives the one-shard cell."""

import collections
from pathlib import Path

import yaml

from fabricflow.settings import load_settings
from processors.config_files import read_inventory
from processors.logic.enrich.inventory import Inventory
from replay import canonical, core_factory_from, replay_batches
from tests.support.synth import training_batches
from tests.support.matrix import merge_shards

INVENTORY = Path(__file__).resolve().parents[2] / "data" / "cluster_inventory.yaml"


def _two_jobs() -> Inventory:
    data = yaml.safe_load(INVENTORY.read_text())
    data["jobs"] = [{"name": "train-a", "nodes": [f"gpu-{i}" for i in range(1, 5)]},
                    {"name": "train-b", "nodes": [f"gpu-{i}" for i in range(5, 9)]}]
    return Inventory.from_dict(data, "two-jobs")


def test_group_cells_split_over_shards_have_unique_keys_and_sum_to_the_whole():
    factory = core_factory_from(load_settings(None).processors, inventory=_two_jobs())
    batches = [b for _e, b in training_batches(seconds=25, unregistered=())]
    one = replay_batches(batches, [], factory, 1)
    many = replay_batches(batches, [], factory, 4)
    keys = [o.key for o in many if o.kind == "matrix"]
    assert len(keys) == len(set(keys))  # one message per window, level and shard
    assert all(k == o.value.key() and k.endswith(f"|{o.value.shard}") for k, o in
               zip(keys, [o for o in many if o.kind == "matrix"]))
    cell_keys = collections.Counter(f"{c['window_start_ms']}|{c['level']}|{c['src']}|{c['dst']}|{c['category']}"
                                    for o in many if o.kind == "matrix" for c in o.value.cells())
    split = [k for k, n in cell_keys.items() if n > 1]
    assert split and all("|group|" in k for k in split)  # the ring crosses the jobs: gpu->gpu has partials
    window, level = split[0].split("|")[:2]
    assert window.isdigit() and level == "group"
    matrix = lambda outs: [o for o in outs if o.kind == "matrix"]  # noqa: E731
    assert canonical(merge_shards(matrix(one))) == canonical(merge_shards(matrix(many)))


def test_an_unregistered_host_alert_fires_once_across_shards():
    """The rogue 10.30.0.99 sends to gpu-1 (job train-a's shard) and gets replies (its own address's shard):
    both sightings are routed to one shard, so the alert fires once, as with a single shard."""
    import numpy as np

    from tests.support.synth import GPU, UNREGISTERED, _flows

    factory = core_factory_from(load_settings(None).processors, inventory=read_inventory(str(INVENTORY)))
    t0 = 1_767_225_600_000
    batches = [b for _e, b in training_batches(seconds=45)]
    batches += [_flows(np.array([GPU[0]]), np.array([UNREGISTERED]), np.array([300_000]), np.array([t0 + s * 1000 + 600]),
                       sport=22, dport=45000) for s in range(10, 40)]
    batches.sort(key=lambda b: int(b["time_end_ms"].max()))
    front = factory()
    enriched = front.enrich(np.concatenate(batches))
    from processors.logic.core import shard_of

    plain = shard_of(enriched, 4)
    rogue_src = enriched["src_group"] == "unknown"
    rogue_dst = enriched["dst_group"] == "unknown"
    assert set(plain[rogue_src]) != set(plain[rogue_dst]), "precondition: the two sightings land in different shards"

    def firing(partitions):
        out = replay_batches(batches, [], factory, partitions)
        return [o for o in out if o.kind == "alert" and o.value["rule"] == "unregistered_host" and o.value["state"] == "firing"]

    one, four = firing(1), firing(4)
    assert len(one) == 1 and len(four) == 1
    assert four[0].key == one[0].key


def test_replay_uses_the_category_rules_file(tmp_path):
    """processors.categories reaches replay's cores as it reaches a live worker's: a GPFS port becomes storage."""
    import pytest

    from replay import ReplayError

    cats = tmp_path / "categories.yaml"
    cats.write_text("storage_ports: [tcp/2049, tcp/1191]\n")
    _e, batch = training_batches(seconds=1)[0]
    b = batch.copy()
    b["ip_protocol"], b["dst_port"], b["src_port"] = 6, 1191, 40000
    plain = core_factory_from(load_settings(None, processors={"inventory": str(INVENTORY)}).processors)()
    with_rules = core_factory_from(load_settings(None, processors={"inventory": str(INVENTORY),
                                                                   "categories": str(cats)}).processors)()
    assert "storage" not in set(plain.enrich(b)["category"].tolist())
    assert set(with_rules.enrich(b)["category"].tolist()) == {"storage"}
    cats.write_text("storage_ports: [nonsense]\n")
    with pytest.raises(ReplayError, match="categories: .*categories.yaml: line 1"):
        core_factory_from(load_settings(None, processors={"categories": str(cats)}).processors)
