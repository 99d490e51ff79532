"""The metrics sink applies the live job membership of inventory.jobs.v1 at the event time of what it counts:
a node is in the job that held it at the window's (or the drop's) time, whenever the row arrived; a reloaded
inventory file keeps the live jobs; an older version read late changes nothing."""

from __future__ import annotations

from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import Holding, holding_row
from schemas import codec
from sinks.metrics.membership import LiveMembership
from sinks.metrics.state import MetricsState

NODES = [{"name": f"g{k}", "ips": [f"10.0.0.{k}"], "rack": "r1", "group": "gpu"} for k in range(1, 5)]
T1, T2 = 1_000_000, 2_000_000


def inventory(jobs=()):
    return Inventory.from_dict({"nodes": NODES, "jobs": list(jobs)})


def row(key, job, nodes, start, end=None, version=None):
    h = Holding(key, job, tuple(nodes), start) if end is None else Holding(key, job, tuple(nodes), start, end)
    return holding_row(h, "slurm", version if version is not None else (end or start))


def feed(state, *rows):
    return state.add_values("jobs", [codec.encode_record("job_membership", r) for r in rows], 0.0, [b"slurm"] * len(rows))


def test_membership_switches_at_the_holdings_event_times_not_at_arrival():
    st = MetricsState(inventory([{"name": "file-job", "nodes": ["g1", "g2", "g3", "g4"]}]))
    assert st._jobs_at(T1) == {"g1": "file-job", "g2": "file-job", "g3": "file-job", "g4": "file-job"}
    feed(st, row("slurm:1", "llm", ["g1", "g2"], T1))
    assert st._jobs_at(T1 - 1) == {}  # the live membership replaces the file's jobs; nothing held g1 before T1
    assert st._jobs_at(T1) == {"g1": "llm", "g2": "llm"}
    # job 1 ends at T2 and job 2 takes g2 from T2; the rows arrive later, the past stays attributed as it was
    feed(st, row("slurm:1", "llm", ["g1", "g2"], T1, T2, version=T2 + 50_000),
         row("slurm:2", "eval", ["g2", "g3"], T2, version=T2 + 50_000))
    assert st._jobs_at(T2 - 1) == {"g1": "llm", "g2": "llm"}
    assert st._jobs_at(T2) == {"g2": "eval", "g3": "eval"}


def test_reloaded_file_keeps_the_live_jobs_and_late_old_versions_change_nothing():
    st = MetricsState(inventory())
    feed(st, row("slurm:1", "llm", ["g1", "g2"], T1, T2, version=T2))
    st.set_inventory(inventory([{"name": "file-job", "nodes": ["g3"]}]))
    assert st._jobs_at(T1) == {"g1": "llm", "g2": "llm"}
    live = LiveMembership()
    assert live.add([row("slurm:1", "llm", ["g1"], T1, T2, version=T2)])
    assert not live.add([row("slurm:1", "llm", ["g1"], T1, version=T1)])  # older version: the end stays
    assert live.latest["slurm:1"]["end_ms"] == T2
    assert [(j.name, j.nodes) for j in live.apply(inventory()).spec.jobs] == [("llm", ["g1"])]


def test_ended_holdings_are_forgotten_a_day_after_the_newest_row():
    live = LiveMembership(keep_ended_ms=86_400_000)
    live.add([row("slurm:1", "old", ["g1"], T1, T2, version=T2)])
    live.add([row("slurm:2", "new", ["g2"], T2 + 86_400_001, version=T2 + 86_400_001)])
    assert set(live.latest) == {"slurm:2"}


def test_rows_naming_no_inventory_node_keep_the_base_and_say_why():
    live = LiveMembership()
    live.add([row("slurm:9", "x", ["elsewhere"], T1)])
    inv = live.apply(inventory([{"name": "file-job", "nodes": ["g1"]}]))
    assert live.error is None  # unknown hosts are counted by the source, not an error: no node holds the job
    assert [j.name for j in inv.spec.jobs] == []


def test_jobs_between_lists_the_holdings_of_a_range_by_inventory_node():
    live = LiveMembership()
    live.add([row("slurm:1", "a", ["g1.cluster", "x9"], T1, T2, version=T2), row("slurm:2", "b", ["g2", "g3"], T2)])
    names = {"g1", "g2", "g3", "g4"}
    assert live.jobs_between(T1, T2, names) == {"a": ["g1"]}
    assert live.jobs_between(T2, T2 + 1, names) == {"b": ["g2", "g3"]}
    assert live.jobs_between(T1 - 10, T1, names) == {}
