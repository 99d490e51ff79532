"""devtools.offline: a scenario through ingest and the processors' cores with no broker, deterministic, and the same
detections and diagnoses on 1 and 4 detector shards."""

from __future__ import annotations

from devtools.offline import run_offline

T0 = 1_800_000_000_000


def events(run) -> list[tuple]:
    """(kind, entity, state, verdict) of the event outputs (incast, flagged stragglers, link events, detector alerts)."""
    out = []
    for o in run.outputs:
        if o.kind == "matrix":
            continue
        v = o.value
        d = (v.get("diagnosis") or {}).get("verdict", "")
        if o.kind == "incast":
            out.append(("incast", v["event_id"], v["state"], d))
        elif o.kind == "straggler" and v["straggler"]:
            out.append(("straggler", v["node"], v["window_start_ms"], d))
        elif o.kind == "link" and v["kind"] != "sample":
            out.append(("link", f"{v['switch']}/if{v['if_index']}", v["kind"], v["time_ms"], d))
        elif o.kind == "alert" and v["rule"] in ("congestion", "storage_bound", "lb_skew", "conn_storm"):
            out.append(("alert", v["dedup_key"], v["state"], v["last_seen_ms"], d))
    return sorted(out)


def test_offline_runs_are_deterministic_and_the_same_on_four_shards():
    one = run_offline("incast_dcqcn", duration_s=110, start_ms=T0)
    again = run_offline("incast_dcqcn", duration_s=110, start_ms=T0)
    four = run_offline("incast_dcqcn", duration_s=110, start_ms=T0, partitions=4)
    assert events(one) == events(again) == events(four)
    verdicts = {e[-1] for e in events(one) if e[0] == "incast" and e[2] == "close"}
    assert verdicts == {"congestion_handled_by_dcqcn"}
    assert one.truth[1]["type"] == "fault" and one.truth[1]["diagnosis"] == "congestion_handled_by_dcqcn"
