"""The fabric as a graph for the console: spines, leaves, nodes and the links between them, with utilisation and
health from the interface counters, grouping hints for large fabrics, per-rail balance and one link over time.

Pure: the web layer (:mod:`console.fabric`) passes the inventory's :class:`~console.layout.Layout`, the latest
state of each port (live store or archive) and the recent link events. A node link is named by its switch-side
port (``leaf-1:7``, the key of ``/api/port``); a switch-to-switch link by its first end as the inventory lists it.

Without roles in the inventory every switch is a leaf; without NICs a node's NIC is the switch port whose peer
is the node; without switch-to-switch links a port whose peer is another switch is taken as one.
"""

from __future__ import annotations

from .layout import Layout, LinkInfo, NicInfo
from .views import DISCARDS_PER_S, ERROR_BURST_PER_S, port_entry

GROUP_OVER = 64  # more nodes than this: the page draws nodes as one bubble per group (rack, leaf or group)
BELOW_SHARE = 0.5  # a NIC carrying less than this fraction of its expected share of its node's traffic is flagged
MIN_NODE_BPS = 1e6  # a node below 1 Mbit/s over all its NICs is idle: its NICs' shares are not judged
_STATES = ("down", "degraded", "ok", "unknown")


def node_nics(layout: Layout) -> list[NicInfo]:
    """Every node NIC: the inventory's ``nics``, else one per switch port whose peer is a node (rail: the
    switch's rail, when the inventory gives rail leaves one)."""
    if layout.nics:
        return list(layout.nics)
    switches = set(layout.switches)
    return [NicInfo(p.node, "", p.switch, p.if_index, layout.switch_rails.get(p.switch), p.speed_bps)
            for p in layout.ports if p.node and p.node not in switches]


def fabric_links(layout: Layout) -> list[LinkInfo]:
    """The switch-to-switch links: the inventory's ``links``, else ports whose peer is another switch (each pair
    once, by its first end in inventory order)."""
    if layout.links:
        return list(layout.links)
    switches = set(layout.switches)
    facing: dict[tuple[str, str], list] = {}  # (switch, peer switch) -> its ports to that peer, in order
    for p in layout.ports:
        if p.node in switches:
            facing.setdefault((p.switch, p.node), []).append(p)
    seen: set[tuple[str, int]] = set()
    out = []
    for p in layout.ports:
        if p.node not in switches or (p.switch, p.if_index) in seen:
            continue
        back = next((q for q in facing.get((p.node, p.switch), []) if (q.switch, q.if_index) not in seen), None)
        seen.add((p.switch, p.if_index))
        if back is not None:
            seen.add((back.switch, back.if_index))
        out.append(LinkInfo(p.switch, p.if_index, p.node, back.if_index if back else -1, p.speed_bps))
    return out


def _state(flags: list[str], util) -> str:
    if "oper_down" in flags:
        return "down"
    if flags:
        return "degraded"
    return "ok" if util is not None else "unknown"


def _merge_ends(ends: list[dict]) -> dict:
    """A link's figures from its ends' port entries: the busier direction, the sum of errors and discards, every
    health flag of either end."""
    utils = [e["util"] for e in ends if e["util"] is not None]
    flags = sorted({f for e in ends for f in e["health"]})

    def total(k):
        xs = [e[k] for e in ends if e[k] is not None]
        return sum(xs) if xs else None

    speeds = [e["if_speed"] for e in ends if e["if_speed"]]
    util = max(utils) if utils else None
    return {"util": util, "util_in": ends[0]["util_in"], "util_out": ends[0]["util_out"], "if_speed": min(speeds)
            if speeds else None, "errors_per_s": total("errors_per_s"), "discards_per_s": total("discards_per_s"),
            "oper_up": None if all(e["oper_up"] is None for e in ends) else all(e["oper_up"] is not False for e in ends),
            "time_ms": max((e["time_ms"] or 0 for e in ends), default=0) or None, "health": flags,
            "events": sorted({x for e in ends for x in e["events"]}), "state": _state(flags, util)}


def _group_key(layout: Layout, nics_of: dict[str, list[NicInfo]]) -> tuple[str, dict[str, str]]:
    """(what nodes are grouped by, node -> group label): rack when every node has one, else the leaf of the node's
    first NIC, else the inventory group."""
    nodes = layout.nodes
    if nodes and all(n.rack for n in nodes):
        return "rack", {n.name: n.rack for n in nodes}
    leaf = {n.name: (nics_of.get(n.name) or [None])[0] for n in nodes}
    if nodes and all(leaf[n.name] is not None or n.switch for n in nodes):
        return "leaf", {n.name: (leaf[n.name].switch if leaf[n.name] else n.switch) for n in nodes}
    return "group", {n.name: n.group for n in nodes}


def _groups(layout: Layout, links: list[dict], nics_of: dict[str, list[NicInfo]]) -> tuple[str, list, list]:
    """(group_by, groups [{id, label, nodes, leaves, links, bad_links, util_max, util_mean, state}], group_links
    [{id, group, switch, links, speed_bps, util_max, util_mean, bad, state, health}]): nodes folded by rack, leaf or
    group, and their node links folded per (group, leaf)."""
    by, label_of = _group_key(layout, nics_of)
    groups: dict[str, dict] = {}
    for n in layout.nodes:
        gid = f"{by}:{label_of[n.name] or '(none)'}"
        groups.setdefault(gid, {"id": gid, "label": label_of[n.name] or "(none)", "nodes": [], "leaves": []})
        groups[gid]["nodes"].append(n.name)
    node_group = {x: g["id"] for g in groups.values() for x in g["nodes"]}
    folded: dict[tuple[str, str], list[dict]] = {}
    for k in links:
        if k["kind"] == "node" and k["node"] in node_group:
            folded.setdefault((node_group[k["node"]], k["switch"]), []).append(k)
    group_links = []
    for (gid, sw), ks in folded.items():
        utils = [k["util"] for k in ks if k["util"] is not None]
        bad = [k for k in ks if k["state"] in ("down", "degraded")]
        worst = min((k["state"] for k in ks), key=_STATES.index)
        group_links.append({"id": f"{gid}>{sw}", "group": gid, "switch": sw, "links": len(ks),
                            "speed_bps": sum(k["speed_bps"] or 0 for k in ks) or None,
                            "util_max": max(utils) if utils else None,
                            "util_mean": sum(utils) / len(utils) if utils else None, "bad": len(bad),
                            "state": worst, "health": sorted({f for k in ks for f in k["health"]})})
        g = groups[gid]
        if sw not in g["leaves"]:
            g["leaves"].append(sw)
    for g in groups.values():
        mine = [gl for gl in group_links if gl["group"] == g["id"]]
        utils = [gl["util_max"] for gl in mine if gl["util_max"] is not None]
        g.update(links=sum(gl["links"] for gl in mine), bad_links=sum(gl["bad"] for gl in mine),
                 util_max=max(utils) if utils else None,
                 util_mean=(sum(gl["util_mean"] * gl["links"] for gl in mine if gl["util_mean"] is not None)
                            / max(1, sum(gl["links"] for gl in mine if gl["util_mean"] is not None))) if utils else None,
                 state=min((gl["state"] for gl in mine), key=_STATES.index, default="unknown"))
    return by, list(groups.values()), group_links


def _node_link(c: NicInfo, entry) -> dict:
    """A node NIC's link from its switch port's entry (``entry(switch, ifIndex)``: :func:`views.port_entry`)."""
    e = entry(c.switch, c.if_index)
    e.update(id=f"{c.switch}:{c.if_index}", kind="node", node=c.node, nic=c.name, rail=c.rail,
             speed_bps=c.speed_bps or e["speed_bps"], state=_state(e["health"], e["util"]))
    return e


def _fabric_link(k: LinkInfo, entry) -> dict:
    """A switch-to-switch link from its ends' port entries."""
    ends = [entry(k.a_switch, k.a_port)] + ([entry(k.b_switch, k.b_port)] if k.b_port >= 0 else [])
    return {"id": k.id, "kind": "fabric", "a": {"switch": k.a_switch, "if_index": k.a_port},
            "b": {"switch": k.b_switch, "if_index": k.b_port if k.b_port >= 0 else None},
            "speed_bps": k.speed_bps, **_merge_ends(ends)}


def _entries(layout: Layout, states: list[dict], recent_events: dict):
    by_key = {(s["switch"], int(s["if_index"])): s for s in states}

    def entry(sw: str, idx: int) -> dict:
        return port_entry(layout, (sw, idx), by_key.get((sw, idx), {}), recent_events.get((sw, idx)))

    return entry


def graph(layout: Layout, states: list[dict], recent_events: dict[tuple[str, int], dict[str, int]],
          group_over: int = GROUP_OVER) -> dict:
    """``spines``, ``leaves``, ``nodes`` and ``links`` (node links and switch-to-switch links, each with speed,
    utilisation, errors/discards, oper status, health flags and a state: ok, degraded, down or unknown), and the
    grouping hints (``group_by``, ``groups``, ``group_links``, ``collapse``: more than ``group_over`` nodes)."""
    entry = _entries(layout, states, recent_events)
    nics = node_nics(layout)
    nics_of: dict[str, list[NicInfo]] = {}
    for c in nics:
        nics_of.setdefault(c.node, []).append(c)
    links: list[dict] = [_node_link(c, entry) for c in nics if c.if_index is not None]
    uplinked: dict[str, int] = {}
    for k in fabric_links(layout):
        links.append(_fabric_link(k, entry))
        for sw in (k.a_switch, k.b_switch):
            uplinked[sw] = uplinked.get(sw, 0) + 1
    spines = [s for s in layout.switches if layout.roles.get(s) == "spine"]
    per_leaf: dict[str, set[str]] = {}
    for c in nics:
        per_leaf.setdefault(c.switch, set()).add(c.node)
    used = set(per_leaf) | set(uplinked)
    leaves = [s for s in layout.switches if s not in spines] + sorted(used - set(layout.switches))
    by, groups, group_links = _groups(layout, links, nics_of)
    node_names = [n.name for n in layout.nodes]
    known = set(node_names)
    node_names += sorted({c.node for c in nics} - known)
    by_name = layout.by_name
    return {
        "spines": [{"name": s, "links": uplinked.get(s, 0)} for s in spines],
        "leaves": [{"name": s, "rail": layout.switch_rails.get(s), "uplinks": uplinked.get(s, 0),
                    "nodes": len(per_leaf.get(s, ()))} for s in leaves],
        "nodes": [{"name": x, "group": by_name[x].group if x in by_name else "unknown",
                   "rack": by_name[x].rack if x in by_name else "", "job": by_name[x].job if x in by_name else "",
                   "nics": len(nics_of.get(x, []))} for x in node_names],
        "links": links,
        "group_by": by, "groups": groups, "group_links": group_links, "collapse": len(node_names) > group_over,
        "counts": {"spines": len(spines), "leaves": len(leaves), "nodes": len(node_names), "links": len(links),
                   **{s: sum(1 for k in links if k["state"] == s) for s in _STATES}},
        "thresholds": {"errors_per_s": ERROR_BURST_PER_S, "discards_per_s": DISCARDS_PER_S, "group_over": group_over},
    }


def rails(layout: Layout, rates: dict[tuple[str, int], dict], below: float = BELOW_SHARE) -> dict:
    """Per rail and per node NIC: the rate in and out (bit/s), utilisation and, over a range, the bytes; each NIC's
    share of its node's traffic against its expected share (1 / the node's NICs), flagged ``below`` when under
    ``below`` x the expected share on a node that is not idle.

    ``rates``: (switch, ifIndex) -> {in_bps, out_bps, util, if_speed, bytes (optional)}."""
    per_node: dict[str, list[dict]] = {}
    for c in node_nics(layout):
        r = rates.get((c.switch, c.if_index), {}) if c.if_index is not None else {}
        per_node.setdefault(c.node, []).append({
            "nic": c.name, "rail": c.rail, "switch": c.switch, "if_index": c.if_index, "speed_bps": c.speed_bps,
            "in_bps": r.get("in_bps"), "out_bps": r.get("out_bps"), "util": r.get("util"), "bytes": r.get("bytes")})
    nodes, flagged = [], 0
    for node, nics in per_node.items():
        tot = sum((x["in_bps"] or 0) + (x["out_bps"] or 0) for x in nics)
        expected = 1.0 / len(nics)
        for x in nics:
            seen = x["in_bps"] is not None or x["out_bps"] is not None
            x["share"] = ((x["in_bps"] or 0) + (x["out_bps"] or 0)) / tot if tot > 0 and seen else None
            x["expected_share"] = expected
            x["below"] = bool(len(nics) > 1 and tot >= MIN_NODE_BPS and x["share"] is not None
                              and x["share"] < below * expected)
            flagged += x["below"]
        nodes.append({"node": node, "total_bps": tot, "nics": nics})
    by_rail: dict = {}
    for n in nodes:
        for x in n["nics"]:
            r = by_rail.setdefault(x["rail"], {"rail": x["rail"], "leaves": [], "nics": 0, "in_bps": 0.0,
                                               "out_bps": 0.0, "bytes": 0, "utils": [], "below": 0})
            r["nics"] += 1
            r["in_bps"] += x["in_bps"] or 0
            r["out_bps"] += x["out_bps"] or 0
            r["bytes"] += x["bytes"] or 0
            r["below"] += x["below"]
            if x["util"] is not None:
                r["utils"].append(x["util"])
            if x["switch"] not in r["leaves"]:
                r["leaves"].append(x["switch"])
    out = []
    for r in sorted(by_rail.values(), key=lambda r: (r["rail"] is None, r["rail"] or 0)):
        u = r.pop("utils")
        out.append(r | {"util_mean": sum(u) / len(u) if u else None, "util_max": max(u) if u else None})
    return {"rails": out, "nodes": nodes, "below_share": below, "min_node_bps": MIN_NODE_BPS, "flagged": flagged}


def live_rates(states: list[dict]) -> dict[tuple[str, int], dict]:
    """(switch, ifIndex) -> the rates :func:`rails` reads, from each port's latest state (utilisation x speed)."""
    out = {}
    for s in states:
        speed = s.get("if_speed") or 0
        ui, uo = s.get("util_in"), s.get("util_out")
        out[(s["switch"], int(s["if_index"]))] = {
            "in_bps": ui * speed if ui is not None and speed else None,
            "out_bps": uo * speed if uo is not None and speed else None,
            "util": max((u for u in (ui, uo) if u is not None), default=None), "if_speed": speed or None}
    return out


def find_link(layout: Layout, link_id: str) -> dict | None:
    """The ends of link ``link_id`` (a node link's switch port or a switch-to-switch link's first end, either end
    accepted): {id, kind, ends: [(switch, ifIndex)], node, speed_bps}; None when the inventory has no such link and
    the id is not ``switch:ifIndex``."""
    sw, _, idx = link_id.rpartition(":")
    if not sw or not idx.isdigit():
        return None
    key = (sw, int(idx))
    for k in fabric_links(layout):
        if key in ((k.a_switch, k.a_port), (k.b_switch, k.b_port)):
            ends = [(k.a_switch, k.a_port)] + ([(k.b_switch, k.b_port)] if k.b_port >= 0 else [])
            return {"id": k.id, "kind": "fabric", "ends": ends, "node": "", "speed_bps": k.speed_bps, "_of": k}
    nic = next((c for c in node_nics(layout) if (c.switch, c.if_index) == key), None)
    p = layout.port_by_key.get(key)
    return {"id": f"{sw}:{idx}", "kind": "node", "ends": [key], "node": nic.node if nic else (p.node if p else ""),
            "nic": nic.name if nic else "", "rail": nic.rail if nic else None,
            "speed_bps": (nic.speed_bps if nic else None) or (p.speed_bps if p else None),
            "_of": nic or NicInfo(p.node if p else "", "", sw, int(idx), None, p.speed_bps if p else None)}


def link_now(layout: Layout, found: dict, states: list[dict], recent_events: dict) -> dict:
    """The link :func:`find_link` found as :func:`graph` lists it, from the latest port states."""
    entry = _entries(layout, [s for s in states if (s["switch"], int(s["if_index"])) in found["ends"]], recent_events)
    return _fabric_link(found["_of"], entry) if found["kind"] == "fabric" else _node_link(found["_of"], entry)


def select_links(g: dict, detail: str, expand: list[str]) -> dict:
    """``g`` with the node links a page needs: ``all``, or ``auto``: every node link when the graph is not
    collapsed, else the switch-to-switch links, the node links of the groups in ``expand`` and every node link
    that is not ok (a degraded NIC shows inside its group's bubble). ``links_total`` counts them all."""
    total = len(g["links"])
    if detail == "all" or not g["collapse"]:
        return g | {"links_total": total, "expanded": []}
    members = {x for gr in g["groups"] if gr["id"] in expand for x in gr["nodes"]}
    keep = [k for k in g["links"] if k["kind"] != "node" or k["node"] in members or k["state"] in ("down", "degraded")]
    return g | {"links": keep, "links_total": total, "expanded": [x for x in expand if any(
        gr["id"] == x for gr in g["groups"])]}
