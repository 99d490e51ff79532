"""Output keys: a group-level matrix cell summed by several shards goes out once per shard, under keys that
differ; summing them (what docs/architecture.md tells consumers) gives the one-shard cell."""

import collections
from pathlib import Path

import yaml

from fabricflow.settings import load_settings
from processors.logic.inventory import Inventory
from processors.replay import canonical, core_factory_from, replay_batches
from tests.synth import training_batches
from tests.unit.replay.test_replay_core import merge_shards

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
    assert len(keys) == len(set(keys))
    by_cell = collections.Counter(k.rsplit("|", 1)[0] for k in keys)
    split = [k for k, n in by_cell.items() if n > 1]
    assert split and all("|group|" in k for k in split)  # the ring crosses the jobs: gpu->gpu has partials
    window, level = split[0].split("|")[:2]
    assert window.isdigit() and level == "group"
    matrix = lambda outs: [o for o in outs if o.kind == "matrix"]  # noqa: E731
    assert canonical(merge_shards(matrix(one))) == canonical(merge_shards(matrix(many)))
