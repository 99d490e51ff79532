"""RoCEv2 operations per node and job from node-level matrix cells."""

from __future__ import annotations

from processors.logic.enrich.inventory import Inventory
from sinks.metrics.state import MetricsState
from tests.support.metrics_state import INVENTORY, T0, scrape, values
from tests.support.metrics_state import cell as plain_cell


def cell(**kw):
    """A matrix cell with RoCEv2 operation columns (``roce_*_packets_est``) as given."""
    return plain_cell(**kw) | {k: v for k, v in kw.items() if k.startswith("roce_")}


def test_roce_operations_per_node_and_job():
    st = MetricsState(Inventory.from_dict(INVENTORY))
    ops = dict(roce_write_packets_est=300, roce_ack_packets_est=30, cnp_packets_est=2)
    st.add_matrix([cell(src="gpu-1", dst="gpu-3", cat="rocev2", **ops),
                   cell(level="group", src="gpu", dst="gpu", cat="rocev2", **ops),  # not node level: not counted
                   cell(src="gpu-2", dst="gpu-1", cat="rocev2", roce_send_packets_est=7),  # gpu-2 is in no job
                   cell(src="gpu-1", dst="gpu-2")])  # an old cell without the columns adds nothing
    scrape(st)
    assert values(st, "node_roce_operations_total") == {
        ("gpu-1", "tx", "write"): 300.0, ("gpu-3", "rx", "write"): 300.0, ("gpu-1", "tx", "ack"): 30.0,
        ("gpu-3", "rx", "ack"): 30.0, ("gpu-1", "tx", "cnp"): 2.0, ("gpu-3", "rx", "cnp"): 2.0,
        ("gpu-2", "tx", "send"): 7.0, ("gpu-1", "rx", "send"): 7.0}
    assert values(st, "job_roce_operations_total") == {
        ("job-a", "write"): 300.0, ("job-a", "ack"): 30.0, ("job-a", "cnp"): 2.0, ("unknown", "send"): 7.0}


def test_a_non_integer_operation_count_is_a_bad_record():
    st = MetricsState(Inventory.from_dict(INVENTORY))
    assert st.add_matrix([cell(roce_read_request_packets_est="12")]) == 0
    assert values(st, "fabricflow_metrics_undecodable_messages_total") == {("matrix", "bad_record"): 0.0}


def test_collective_visibility_per_job():
    """job-a (gpu-1, gpu-3): window 1 both active, only storage traffic -> not_visible; window 2 gpu-1 sends
    RoCEv2 to gpu-3 -> share 1/2, visible; window 3 nothing from them -> idle. A window is judged when the second
    newer one comes (its other shards' parts may still be on the way)."""
    st = MetricsState(Inventory.from_dict(INVENTORY))
    w = 10_000
    st.add_matrix([cell(src="gpu-1", dst="st-1", cat="storage", end=T0 + w),
                   cell(src="gpu-3", dst="st-1", cat="storage", end=T0 + w)])
    st.add_matrix([cell(src="gpu-1", dst="gpu-3", cat="rocev2", end=T0 + 2 * w),
                   cell(src="gpu-2", dst="gpu-1", cat="collective", end=T0 + 2 * w)])  # gpu-2: in no job
    assert values(st, "job_collective_visibility_state") == {}  # window 1 waits for the second newer one
    st.add_matrix([cell(src="gpu-2", dst="st-1", cat="storage", end=T0 + 3 * w)])
    assert values(st, "job_collective_visibility_state")[("job-a", "not_visible")] == 1
    assert values(st, "job_collective_visibility_ratio") == {("job-a",): 0.0}
    st.add_matrix([cell(src="gpu-2", dst="st-1", cat="storage", end=T0 + 4 * w)])
    assert values(st, "job_collective_visibility_ratio") == {("job-a",): 0.5}
    assert values(st, "job_collective_visibility_state")[("job-a", "visible")] == 1
    st.add_matrix([cell(src="gpu-2", dst="st-1", cat="storage", end=T0 + 5 * w)])
    assert values(st, "job_collective_visibility_ratio") == {}
    assert {k: v for k, v in values(st, "job_collective_visibility_state").items() if v} == {("job-a", "idle"): 1}


def test_a_shard_part_after_the_next_window_still_counts():
    """Window 1's cells come from two processors shards; shard B's part (gpu-1's RoCEv2 to gpu-3) arrives after
    shard A's window 2 (partitions are read in batches). Judged on shard A's part alone, job-a would be
    not_visible (its members active through storage only); it is visible."""
    st = MetricsState(Inventory.from_dict(INVENTORY))
    w = 10_000
    st.add_matrix([cell(src="st-1", dst="gpu-1", cat="storage", end=T0 + w),  # shard A, window 1
                   cell(src="st-1", dst="gpu-3", cat="storage", end=T0 + w)])
    st.add_matrix([cell(src="st-1", dst="gpu-1", cat="storage", end=T0 + 2 * w)])  # shard A, window 2
    st.add_matrix([cell(src="gpu-1", dst="gpu-3", cat="rocev2", end=T0 + w)])  # shard B, window 1
    st.add_matrix([cell(src="st-1", dst="gpu-1", cat="storage", end=T0 + 3 * w)])  # window 1 is judged
    assert {k: v for k, v in values(st, "job_collective_visibility_state").items() if v} == {("job-a", "visible"): 1}
    assert values(st, "job_collective_visibility_ratio") == {("job-a",): 0.5}


def test_collectives_seen_within_the_horizon_count():
    """A checkpoint window (members active on storage only) right after collective windows is a pause, not a blind
    spot: visible until HORIZON_MS passes without collectives, then not_visible."""
    from sinks.metrics.visibility import HORIZON_MS

    st = MetricsState(Inventory.from_dict(INVENTORY))
    w = 10_000
    st.add_matrix([cell(src="gpu-1", dst="gpu-3", cat="rocev2", end=T0 + w),
                   cell(src="gpu-3", dst="gpu-1", cat="rocev2", end=T0 + w)])
    states = []
    for k in range(2, 2 + HORIZON_MS // w + 3):
        st.add_matrix([cell(src="gpu-1", dst="st-1", cat="storage", end=T0 + k * w),
                       cell(src="gpu-3", dst="st-1", cat="storage", end=T0 + k * w)])
        states += [k for k, v in values(st, "job_collective_visibility_state").items() if v]
    assert states == [("job-a", "visible")] * (HORIZON_MS // w) + [("job-a", "not_visible")] * 2


def test_visibility_states():
    from sinks.metrics.visibility import visibility

    assert visibility(set(), set()) == (None, "idle")
    assert visibility({"a", "b", "c"}, set()) == (0.0, "not_visible")
    assert visibility({"a", "b", "c"}, {"a"}) == (1 / 3, "partial")
    assert visibility({"a", "b"}, {"a", "x"}) == (0.5, "visible")
    assert visibility({"a", "b"}, set(), served=True) == (None, "serving")  # an inference job behind a frontend
    assert visibility({"a", "b"}, {"a"}, served=True) == (0.5, "visible")


def test_a_job_frontends_send_to_is_serving_not_invisible():
    """infer (r1, r2) gets requests from lb (group frontend) and sends no collectives: serving, whose state the
    FabricCollectivesNotVisible alert does not fire on; without lb in a frontend group it would read not_visible."""
    inv = Inventory.from_dict({"nodes": [{"name": n, "ips": [f"10.0.0.{k}"], "group": g} for k, (n, g) in
                                         enumerate((("lb", "frontend"), ("r1", "gpu"), ("r2", "gpu")), 1)],
                               "jobs": [{"name": "infer", "nodes": ["r1", "r2"]}]})
    st = MetricsState(inv)
    w = 10_000
    st.add_matrix([cell(src="lb", dst="r1", cat="other", end=T0 + w), cell(src="r2", dst="lb", cat="other", end=T0 + w)])
    st.add_matrix([cell(src="lb", dst="r1", cat="other", end=T0 + 2 * w)])
    st.add_matrix([cell(src="lb", dst="r1", cat="other", end=T0 + 3 * w)])
    assert {k: v for k, v in values(st, "job_collective_visibility_state").items() if v} == {("infer", "serving"): 1}
    assert values(st, "job_collective_visibility_ratio") == {}
