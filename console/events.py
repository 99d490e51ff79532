"""Every detection as one event shape, so incast, straggler, link, alert and pattern share one time axis.

Pure: built from detector output records (as decoded from Kafka or read from the
archive, same field names), no I/O.

Event: ``{id, type, subtype, state, start_ms, end_ms, entity, severity, summary,
evidence, uncertainty, diagnosis, record}``; ``diagnosis`` is the latest bottleneck diagnosis of the event
(docs/detectors.md, "Diagnosis"), None when it carries none. Ids are stable across the live reader and the
archive (built from the record's own keys), so the two sources merge without
duplicates.
"""

from __future__ import annotations

import math

TYPES = ("incast", "straggler", "link", "alert", "pattern")
LINK_EVENT_KINDS = ("link_downgrade", "speed_change", "oper_down", "oper_up", "error_burst", "discard_burst", "packet_drops",
                    "sustained_utilisation", "counter_reset")
STRAGGLER_GAP_WINDOWS = 3  # flagged windows further apart than this start a new straggler episode


def _rel95(samples) -> float | None:
    """95 % relative bound of a sampled estimate from its sample count (Poisson approximation)."""
    try:
        s = float(samples)
    except (TypeError, ValueError):
        return None
    return None if s <= 0 else 1.96 / math.sqrt(s)


def _gbps(bps: float) -> str:
    return f"{bps / 1e9:.2f} Gbit/s"


def incast_event(r: dict) -> dict:
    frac, lo, hi = r.get("fraction", 0.0), r.get("fraction_low", 0.0), r.get("fraction_high", 0.0)
    srcs = list(r.get("sources") or [])
    rates = list(r.get("source_rates_bps") or [])
    return {
        "id": f"incast:{r['event_id']}",
        "type": "incast",
        "subtype": "incast",
        "state": r.get("state", ""),
        "start_ms": int(r["window_start_ms"]),
        "end_ms": int(r["window_end_ms"]),
        "entity": r.get("destination", ""),
        "nodes": [r.get("destination", "")] + srcs,
        "severity": "critical" if frac >= 1.0 else "warning",
        "summary": f"{len(srcs)} sources -> {r.get('destination', '')}: {_gbps(r.get('aggregate_bps', 0.0))} "
                   f"= {100 * frac:.0f}% of {_gbps(r.get('capacity_bps', 0.0))}",
        "evidence": {"destination": r.get("destination", ""), "destination_group": r.get("destination_group", ""),
                     "aggregate_bps": r.get("aggregate_bps"), "capacity_bps": r.get("capacity_bps"),
                     "fraction": frac, "sources": [{"node": s, "rate_bps": rates[i] if i < len(rates) else None}
                                                   for i, s in enumerate(srcs)],
                     "samples": r.get("samples"), "sampling_rate": r.get("sampling_rate")},
        "uncertainty": {"fraction_low": lo, "fraction_high": hi, "samples": r.get("samples"),
                        "rel95": _rel95(r.get("samples"))},
        "diagnosis": r.get("diagnosis"),
    }


def straggler_events(scores: list[dict], window_ms: int | None = None) -> list[dict]:
    """Episodes of consecutive flagged windows per (job, node) from straggler scores (any order)."""
    flagged = sorted((s for s in scores if s.get("straggler")), key=lambda s: (s["job"], s["node"], s["window_start_ms"]))
    out: list[dict] = []
    cur: dict | None = None
    for s in flagged:
        ws, we = int(s["window_start_ms"]), int(s["window_end_ms"])
        size = window_ms or max(1, we - ws)
        if cur is not None and cur["_key"] == (s["job"], s["node"]) and ws - cur["end_ms"] <= STRAGGLER_GAP_WINDOWS * size:
            cur["end_ms"] = max(cur["end_ms"], we)
            cur["_scores"].append(s)
            continue
        cur = {"_key": (s["job"], s["node"]), "start_ms": ws, "end_ms": we, "_scores": [s]}
        out.append(cur)
    events = []
    for e in out:
        job, node = e["_key"]
        last = e["_scores"][-1]
        worst = min(x.get("ratio_sent", 1.0) for x in e["_scores"])
        events.append({
            "id": f"straggler:{job}:{node}:{e['start_ms']}",
            "type": "straggler",
            "subtype": "straggler",
            "state": "open",
            "start_ms": e["start_ms"],
            "end_ms": e["end_ms"],
            "entity": node,
            "job": job,
            "nodes": [node],
            "severity": "warning",
            "summary": f"{node} in {job} sends {100 * last.get('ratio_sent', 0):.0f}% of its peers' median "
                       f"({len(e['_scores'])} flagged windows)",
            "evidence": {"job": job, "node": node, "windows": len(e["_scores"]), "worst_ratio_sent": worst,
                         "last": {k: last.get(k) for k in ("sent_bytes", "recv_bytes", "peer_median_sent",
                                                            "peer_median_recv", "ratio_sent", "score",
                                                            "evidence_windows", "peers")}},
            "uncertainty": {"peers": last.get("peers"), "evidence_windows": last.get("evidence_windows"),
                            "note": "robust z-score over the job's peers; sampled byte counts"},
            "diagnosis": next((x["diagnosis"] for x in reversed(e["_scores"]) if x.get("diagnosis")), None),
        })
    return events


def link_event(r: dict, node: str = "") -> dict | None:
    kind = r.get("kind", "")
    if kind not in LINK_EVENT_KINDS:
        return None
    port = f"{r.get('switch', '')}/if{r.get('if_index', '')}"
    severity = "critical" if kind in ("link_downgrade", "oper_down") else "warning" if kind != "oper_up" else "info"
    t = int(r["time_ms"])
    return {
        "id": f"link:{r.get('switch', '')}:{r.get('if_index', '')}:{kind}:{t}",
        "type": "link",
        "subtype": kind,
        "state": "open",
        "start_ms": t - int(r.get("interval_ms") or 0),
        "end_ms": t,
        "entity": port + (f" ({node})" if node else ""),
        "switch": r.get("switch", ""),
        "if_index": r.get("if_index"),
        "nodes": [node] if node else [],
        "severity": severity,
        "summary": f"{kind.replace('_', ' ')} on {port}" + (f" ({node})" if node else "") +
                   (f": {r['detail']}" if r.get("detail") else ""),
        "evidence": {k: r.get(k) for k in ("if_speed", "previous_if_speed", "util_in", "util_out", "in_errors_per_s",
                                           "out_errors_per_s", "in_discards_per_s", "out_discards_per_s",
                                           "oper_up", "exporter", "detail")},
        "uncertainty": {"interval_ms": r.get("interval_ms"),
                        "note": "rates are counter deltas over the sample interval (exact, not sampled)"},
        "diagnosis": r.get("diagnosis"),
    }


# entities of an alert that name one node: policy rules (src_node, ...) and the detector verdicts (lb_skew's
# replica, storage_bound's storage, conn_storm's node)
_ALERT_NODE_KEYS = ("src_node", "dst_node", "src", "dst", "node", "replica", "storage")


def _alert_nodes(ents: dict) -> list[str]:
    """Nodes an alert names: its node entities, then the congestion alert's ``nodes`` list ("c:0.300,d:0.060")."""
    out = [v for k, v in sorted(ents.items()) if k in _ALERT_NODE_KEYS and v]
    for part in str(ents.get("nodes") or "").split(","):
        name = part.rsplit(":", 1)[0]
        if name and name != "?" and name not in out:
            out.append(name)
    return out


def alert_event(r: dict) -> dict:
    ents = dict(r.get("entities") or {})
    nodes = _alert_nodes(ents)
    return {
        "id": f"alert:{r['dedup_key']}",
        "type": "alert",
        "subtype": r.get("rule", ""),
        "state": r.get("state", ""),
        "start_ms": int(r.get("first_seen_ms") or r["window_start_ms"]),
        "end_ms": int(r.get("last_seen_ms") or r["window_end_ms"]),
        "entity": (ents.get("src_node") or ents.get("src") or ents.get("src_ip") or ents.get("node")
                   or ents.get("replica") or ents.get("storage") or r["dedup_key"]),
        "job": ents.get("job", ""),
        "nodes": nodes,
        "severity": r.get("severity", "warning"),
        "summary": r.get("summary", ""),
        "evidence": {"entities": ents, "bytes_est": r.get("bytes_est"), "flows": r.get("flows"),
                     "sample_flows": list(r.get("sample_flows") or [])},
        "uncertainty": {"note": "bytes are sampled estimates"},
        "diagnosis": r.get("diagnosis"),
    }


def pattern_event(r: dict) -> dict:
    return {
        "id": f"pattern:{r.get('job', '')}:{r.get('deviation', '')}:{int(r['window_start_ms'])}",
        "type": "pattern",
        "subtype": r.get("deviation", r.get("kind", "")),
        "state": r.get("state", ""),
        "start_ms": int(r["window_start_ms"]),
        "end_ms": int(r["window_end_ms"]),
        "entity": r.get("job", ""),
        "job": r.get("job", ""),
        "nodes": sorted({n for p in (r.get("added_pairs") or []) + (r.get("removed_pairs") or []) for n in p}),
        "severity": "warning",
        "summary": f"{r.get('job', '')}: {r.get('deviation', '')}" + (f" ({r['detail']})" if r.get("detail") else ""),
        "evidence": {k: r.get(k) for k in ("baseline_period_ms", "current_period_ms", "added_pairs",
                                           "removed_pairs", "detail")},
        "uncertainty": {"note": "period and pairs from windowed, sampled traffic"},
        "diagnosis": None,
    }


def merge_incast(records: list[dict]) -> list[dict]:
    """One event per incast ``event_id``: the first window's start, the peak's figures, the latest diagnosis."""
    by_id: dict[str, dict] = {}
    for r in sorted(records, key=lambda r: (r["window_start_ms"], r.get("state") == "close")):
        first = by_id.get(r["event_id"])
        ev = incast_event(r)
        if first is not None:
            ev["start_ms"] = min(ev["start_ms"], first["start_ms"])
            ev["end_ms"] = max(ev["end_ms"], first["end_ms"])
            diag = ev["diagnosis"] or first["diagnosis"]  # the latest record's: it has seen the most evidence
            if first["evidence"]["fraction"] > ev["evidence"]["fraction"]:  # keep the peak's figures
                keep = first
                keep["end_ms"], keep["state"] = ev["end_ms"], ev["state"]
                ev = keep
            ev["diagnosis"] = diag
        by_id[r["event_id"]] = ev
    return list(by_id.values())


_DOWN = {"link_downgrade": ("speed_change", "oper_up"), "oper_down": ("oper_up",)}


def _lasting(evs: list[dict]) -> list[dict]:
    """A downgrade or oper-down is a state, not a moment: it lasts (``_until``) until a later speed change or
    oper-up on the same port, else for ever (the port is still down / slow)."""
    by_port: dict = {}
    for e in evs:
        if e["type"] == "link":
            by_port.setdefault((e.get("switch"), e.get("if_index")), []).append(e)
    out = []
    for e in evs:
        ends = _DOWN.get(e["subtype"]) if e["type"] == "link" else None
        if ends:
            later = [x["end_ms"] for x in by_port[(e.get("switch"), e.get("if_index"))]
                     if x["subtype"] in ends and x["end_ms"] > e["end_ms"]]
            e = e | {"_until": min(later) if later else 2**62}
        out.append(e)
    return out


def related(event: dict, others: list[dict], layout, slack_ms: int = 60_000) -> list[dict]:
    """Events that may explain or be explained by ``event``, each with the reason.

    - straggler <-> a link event on the straggler's own port or on its ring successor's port (a downgrade
      or oper-down counts until the port recovers);
    - incast <-> link events (discards, errors, utilisation) on the destination's port;
    - anything <-> events naming the same node, overlapping in time (within ``slack_ms``).
    """
    lo, hi = event["start_ms"] - slack_ms, event["end_ms"] + slack_ms
    out: list[dict] = []
    others = _lasting(others)

    def port_of(node: str):
        p = layout.port_of_node.get(node)
        return (p.switch, p.if_index) if p else None

    def add(e: dict, reason: str) -> None:
        if e["id"] != event["id"] and all(x["id"] != e["id"] for x in out):
            out.append({"id": e["id"], "type": e["type"], "subtype": e["subtype"], "start_ms": e["start_ms"],
                        "end_ms": e["end_ms"], "entity": e["entity"], "summary": e["summary"], "reason": reason})

    near = [e for e in others if e.get("_until", e["end_ms"]) >= lo and e["start_ms"] <= hi]
    if event["type"] == "straggler":
        node = event["entity"]
        succ = layout.ring_successor(node)
        for e in near:
            if e["type"] != "link":
                continue
            key = (e.get("switch"), e.get("if_index"))
            if key == port_of(node):
                add(e, f"link event on {node}'s own port")
            elif succ and key == port_of(succ):
                add(e, f"link event on the port of {node}'s ring successor {succ}")
    if event["type"] == "incast":
        dst = event["entity"]
        for e in near:
            if e["type"] == "link" and (e.get("switch"), e.get("if_index")) == port_of(dst):
                add(e, f"link event on the destination {dst}'s port")
    if event["type"] == "link":
        port = (event.get("switch"), event.get("if_index"))
        for e in near:
            if e["type"] == "straggler":
                node = e["entity"]
                if port_of(node) == port:
                    add(e, f"straggler {node} sits behind this port")
                else:
                    for members in layout.jobs.values():
                        if node in members and len(members) > 1:
                            succ = members[(members.index(node) + 1) % len(members)]
                            if port_of(succ) == port:
                                add(e, f"this port serves {succ}, ring successor of straggler {node}")
            if e["type"] == "incast" and port_of(e["entity"]) == port:
                add(e, f"incast into {e['entity']} behind this port")
    for e in near:
        shared = _relating_nodes(event, e) & _relating_nodes(e, event)
        if shared:
            add(e, "same node: " + ", ".join(sorted(shared)))
    return out


def _relating_nodes(e: dict, other: dict) -> set[str]:
    """The nodes through which ``e`` relates to ``other`` by the same-node rule. An incast belongs to its
    destination's port: towards a link event it counts its destination only, not its sources (their ports
    carry the burst's traffic, they do not suffer it)."""
    nodes = e.get("nodes", [])
    if e["type"] == "incast" and other["type"] == "link":
        nodes = [e.get("entity", "")]
    return {n for n in nodes if n}
