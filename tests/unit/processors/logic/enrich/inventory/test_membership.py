"""Live job membership (pure): holdings -> non-overlapping node intervals -> inventory jobs at event time."""

from __future__ import annotations

import numpy as np
import pytest

from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import OPEN_END, Holding, MembershipBook, NodeInterval
from processors.logic.enrich.inventory.schedulers import SchedulerDocError, expand_hostlist, slurm_holdings
from schemas.columns import addr16

BASE = Inventory.from_dict({
    "nodes": [{"name": f"gpu0{i}", "addresses": [f"10.0.0.{i}"], "group": "gpu"} for i in range(1, 5)],
    "jobs": [{"name": "from-file", "nodes": ["gpu01"]}],
})


def _job_at(inv: Inventory, addr: str, t_ms: int) -> str:
    idx = inv.lookup(np.array([list(addr16(addr))], dtype=np.uint8))
    nid = inv.entry_node_id[idx + 1]
    return str(inv.jobs_at(nid, np.array([t_ms]))[0])


def test_overlapping_holdings_first_started_keeps_the_node():
    book = MembershipBook()
    book.upsert(Holding("a", "job-a", ("gpu01",), 1000, 5000))
    book.upsert(Holding("b", "job-b", ("gpu01",), 3000, 8000))
    assert book.intervals() == [NodeInterval("gpu01", "job-a", 1000, 5000), NodeInterval("gpu01", "job-b", 5000, 8000)]


def test_late_event_attributes_earlier_flows_and_replaces_file_jobs():
    book = MembershipBook()
    inv, unknown = book.apply_to(BASE)
    assert unknown == [] and _job_at(inv, "10.0.0.1", 10_000) == ""  # the live source replaces the file's jobs
    # the event for a job that started at t=5 s arrives later: a flow at 6 s still gets it
    assert book.upsert(Holding("pod:1", "llm", ("gpu01", "gpu02"), 5_000))
    inv, _ = book.apply_to(BASE)
    assert [_job_at(inv, "10.0.0.1", t) for t in (4_999, 5_000, 6_000)] == ["", "llm", "llm"]
    assert _job_at(inv, "10.0.0.2", 6_000) == "llm" and _job_at(inv, "10.0.0.3", 6_000) == ""
    # it ends at 9 s, another job takes the node at 9 s
    book.upsert(Holding("pod:1", "llm", ("gpu01", "gpu02"), 5_000, 9_000))
    book.upsert(Holding("pod:2", "eval", ("gpu01",), 9_000))
    inv, _ = book.apply_to(BASE)
    assert [_job_at(inv, "10.0.0.1", t) for t in (8_999, 9_000)] == ["llm", "eval"]
    assert _job_at(inv, "10.0.0.2", 9_000) == ""


def test_delete_ends_open_holding_and_is_idempotent():
    book = MembershipBook()
    book.upsert(Holding("k", "j", ("gpu01",), 1000))
    v = book.version
    assert book.end("k", 4000) and book.holdings["k"].end_ms == 4000 and book.version == v + 1
    assert not book.end("k", 9000) and not book.end("missing", 9000)
    assert not book.upsert(Holding("k", "j", ("gpu01",), 1000, 4000))  # the same fact again: no new version


def test_relist_ends_what_is_gone_and_keeps_the_rest():
    book = MembershipBook()
    book.upsert(Holding("a", "ja", ("gpu01",), 1000))
    book.upsert(Holding("b", "jb", ("gpu02",), 1000))
    assert book.relist([Holding("a", "ja", ("gpu01",), 1000), Holding("c", "jc", ("gpu03",), 2000)], at_ms=7000)
    assert book.holdings["b"].end_ms == 7000 and book.holdings["a"].open and book.holdings["c"].open
    assert not book.relist([Holding("a", "ja", ("gpu01",), 1000), Holding("c", "jc", ("gpu03",), 2000)], at_ms=8000)


def test_prune_keeps_ended_holdings_for_late_flows():
    book = MembershipBook(keep_ended_ms=10_000)
    book.upsert(Holding("a", "ja", ("gpu01",), 1000, 2000))
    assert not book.prune(11_000) and "a" in book.holdings
    assert book.prune(12_001) and "a" not in book.holdings


def test_unknown_hosts_are_reported_and_fqdn_maps_to_short_name():
    book = MembershipBook()
    book.upsert(Holding("a", "ja", ("gpu01.cluster.local", "cpu99"), 1000))
    inv, unknown = book.apply_to(BASE)
    assert unknown == ["cpu99"] and _job_at(inv, "10.0.0.1", 1500) == "ja"


def test_pod_addresses_become_node_addresses_without_clobbering():
    book = MembershipBook()
    book.upsert(Holding("p1", "ja", ("gpu03",), 1000, addresses=("10.244.3.7", "10.0.0.1")))
    book.upsert(Holding("p2", "jb", ("gpu04",), 1000, 1500, addresses=("10.244.4.9",)))  # ended: not added
    inv, _ = book.apply_to(BASE)
    assert _job_at(inv, "10.244.3.7", 2000) == "ja"
    assert _job_at(inv, "10.0.0.1", 2000) == ""  # gpu01's own address stays gpu01's
    assert inv.lookup(np.array([list(addr16("10.244.4.9"))], dtype=np.uint8))[0] == -1


@pytest.mark.parametrize("text, hosts", [
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("a1,b[8-10]", ["a1", "b8", "b9", "b10"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ("", []),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-", "gpu]1", "gpu[4-2]", "gpu[a-b]", "n[1-100000]"])
def test_expand_hostlist_rejects_bad_lists(text):
    with pytest.raises(SchedulerDocError):
        expand_hostlist(text)


def test_slurm_states_and_times():
    def t(n):
        return {"set": True, "infinite": False, "number": n}
    doc = {"jobs": [
        {"job_id": 1, "name": "train", "job_state": ["RUNNING"], "nodes": "gpu[01-02]", "start_time": t(100),
         "end_time": t(999)},
        {"job_id": 2, "name": "done", "job_state": ["COMPLETED"], "nodes": "gpu03", "start_time": t(100),
         "end_time": t(200)},
        {"job_id": 3, "name": "wait", "job_state": ["PENDING"], "nodes": "", "start_time": t(0), "end_time": t(0)},
        {"job_id": 4, "name": "old", "job_state": "RUNNING", "nodes": "gpu04", "start_time": 50, "end_time": 0},
    ]}
    hs = {h.key: h for h in slurm_holdings(doc)}
    assert set(hs) == {"slurm:1", "slurm:2", "slurm:4"}
    assert hs["slurm:1"].job == "train-1" and hs["slurm:1"].nodes == ("gpu01", "gpu02")
    assert hs["slurm:1"].end_ms == OPEN_END  # a running job's end_time is its limit, not an end
    assert (hs["slurm:2"].start_ms, hs["slurm:2"].end_ms) == (100_000, 200_000)
    assert slurm_holdings(doc, naming="name")[0].job == "train"
    with pytest.raises(SchedulerDocError):
        slurm_holdings({"jobs": [{"name": "no id"}]})


def _pod(**status):
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "ns", "labels": {"job": "llm"}},
            "spec": {"nodeName": "gpu01"}, "status": {"phase": "Running", "startTime": "2026-12-05T10:00:00Z",
                                                       "podIPs": [{"ip": "10.244.1.5"}], **status}}


def test_pod_holding_phases_and_times():
    from processors.logic.enrich.inventory.schedulers import pod_end_ms, pod_holding

    t0 = 1_796_464_800_000  # 2026-12-05T10:00:00Z
    h = pod_holding(_pod(), "job", seen_ms=0)
    assert (h.key, h.job, h.nodes, h.start_ms, h.open, h.addresses) == ("pod:u1", "llm", ("gpu01",), t0, True,
                                                                         ("10.244.1.5",))
    failed = _pod(phase="Failed", containerStatuses=[
        {"state": {"terminated": {"finishedAt": "2026-12-05T10:05:00Z"}}},
        {"state": {"terminated": {"finishedAt": "2026-12-05T10:06:00Z"}}}])
    assert pod_holding(failed, "job", seen_ms=0).end_ms == t0 + 360_000  # the last container's end
    assert pod_holding(_pod(phase="Succeeded"), "job", seen_ms=t0 + 5).end_ms == t0 + 5  # no timestamps: when seen
    assert pod_holding(_pod(), "other-label", seen_ms=0) is None
    assert pod_holding(_pod(startTime=None, phase="Pending"), "job", seen_ms=0) is None
    deleted = _pod()
    deleted["metadata"]["deletionTimestamp"] = "2026-12-05T10:10:00Z"
    assert pod_end_ms(deleted, seen_ms=t0 + 10**9) == t0 + 600_000
    host = _pod()
    host["spec"]["hostNetwork"] = True
    assert pod_holding(host, "job", seen_ms=0).addresses == ()
