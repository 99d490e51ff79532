"""console.visibility: a job's collective visibility per live window and its RoCEv2 operations per node."""

from __future__ import annotations

from console.live import LiveStore
from console.visibility import NOT_VISIBLE, job_visibility

W = 10_000
MEMBERS = ["g1", "g2", "g3", "g4"]


def cell(ws, src, dst, cat, level="node", **ops):
    return {"window_start_ms": ws, "window_end_ms": ws + W, "level": level, "src": src, "dst": dst, "category": cat,
            "bytes_est": 1000, "packets_est": 10, "flow_records": 1, "samples": 5, **ops}


def windows(cells_by_window):
    store = LiveStore()
    for cells in cells_by_window:
        for c in cells:
            store.add("matrix", c)
    return [store.cells(s) and (s, e, store.cells(s)[0]) for s, e, _n in store.window_list()]


def test_members_active_without_collectives_are_not_visible_never_idle():
    # InfiniBand job: the members only show storage reads and ssh over IP
    w = windows([[cell(0, "stor", "g1", "storage"), cell(0, "stor", "g2", "storage"), cell(0, "mgmt", "g3", "ssh")]])
    v = job_visibility(w, MEMBERS)
    assert v["state"] == "not_visible" and v["share"] == 0.0
    assert v["latest"]["active"] == ["g1", "g2", "g3"] and v["latest"]["seen"] == []
    assert v["not_visible_text"] == NOT_VISIBLE
    assert "InfiniBand" in NOT_VISIBLE


def test_share_counts_members_sending_collectives_to_another_member():
    w = windows([[cell(0, "g1", "g2", "rocev2"), cell(0, "g2", "g3", "collective"), cell(0, "g3", "g3", "rocev2"),
                  cell(0, "g4", "outsider", "rocev2"), cell(0, "g3", "stor", "storage"), cell(0, "g4", "stor", "storage"),
                  cell(0, "g1", "g2", "rocev2", level="group")]])
    v = job_visibility(w, MEMBERS)
    # active g1..g4; g3 only to itself, g4 only to a non-member: seen g1, g2
    assert v["latest"]["seen"] == ["g1", "g2"] and v["latest"]["not_seen"] == ["g3", "g4"]
    assert v["share"] == 0.5 and v["state"] == "visible"


def test_no_member_active_is_idle_and_each_window_is_judged():
    w = windows([[cell(0, "a", "b", "other")], [cell(W, "g1", "g2", "rocev2"), cell(W, "g3", "stor", "storage"),
                                              cell(W, "g4", "stor", "storage")]])
    v = job_visibility(w, MEMBERS)
    assert [(x["start_ms"], x["state"], x["share"]) for x in v["windows"]] == [(0, "idle", None), (W, "partial", 0.25)]  # g1..g4 active (g2 receives), g1 sends
    assert job_visibility([], MEMBERS)["state"] == "idle"


def test_a_checkpoint_pause_is_not_a_blind_spot():
    """Collectives seen within the last minute (HORIZON_MS) still count: a window of only checkpoint writes after
    collective windows stays visible; once the horizon has passed without collectives the job is not_visible."""
    coll = [cell(0, "g1", "g2", "rocev2"), cell(0, "g2", "g1", "rocev2")]
    ckpt = [[cell(k * W, "g1", "stor", "storage"), cell(k * W, "g2", "stor", "storage")] for k in range(1, 8)]
    v = job_visibility(windows([coll, *ckpt]), MEMBERS)
    assert [x["state"] for x in v["windows"]] == ["visible"] * 6 + ["not_visible"] * 2
    assert v["latest"]["not_seen"] == ["g1", "g2"]


def test_a_job_frontends_send_to_is_serving_unless_it_sends_collectives():
    w = windows([[cell(0, "lb01", "g1", "other"), cell(0, "lb01", "g2", "other"), cell(0, "g1", "lb01", "other")]])
    assert job_visibility(w, MEMBERS, {"lb01"})["state"] == "serving"
    assert job_visibility(w, MEMBERS)["state"] == "not_visible"  # without the frontend known
    w = windows([[cell(0, "lb01", "g1", "other"), cell(0, "g1", "g2", "collective")]])
    assert job_visibility(w, MEMBERS, {"lb01"})["state"] == "visible"


def test_roce_operations_per_sending_member_and_for_the_job():
    w = windows([[cell(0, "g1", "g2", "rocev2", roce_write_packets_est=800, roce_ack_packets_est=20, cnp_packets_est=3),
                  cell(0, "g2", "g1", "rocev2", roce_ack_packets_est=40, roce_read_request_packets_est=7),
                  cell(0, "x", "g1", "rocev2", roce_send_packets_est=99)],
                 [cell(W, "g1", "g2", "rocev2", roce_write_packets_est=200)]])
    r = job_visibility(w, MEMBERS)["roce_ops"]
    assert r["job"] == {"send": 0, "write": 1000, "read_request": 7, "read_response": 0, "ack": 60, "atomic": 0, "cnp": 3}
    assert [n["node"] for n in r["nodes"]] == ["g1", "g2"]  # x is no member: its sends are not the job's
    assert r["nodes"][0]["write"] == 1000 and r["nodes"][1]["ack"] == 40
