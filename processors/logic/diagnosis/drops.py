"""What a link event's sFlow dropped-packet notifications say: evidence items per drop reason, and the verdict
when the reasons are not congestion (ACL, routing, VLAN/STP, bad headers, tunnels drop packets by the switch's
forwarding rules or state; a faulty link or a full buffer do not).

A link event's ``_drops`` (from :meth:`processors.logic.detectors.drops.PortDrops.summary`, given by link
health for the event's counter interval) is ``{"total", "lost", "reasons": [(name, group, count)], "groups"}``.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from .catalog import FORWARDING_DROP, diagnosis, evidence, limits

__all__ = ["drop_items", "forwarding_verdict", "buffer_share", "TOP_REASONS"]

TOP_REASONS = 5  # reasons given as evidence items (the rest summed in the last item's note)

_NEXT = {
    "acl": "Check the ACLs on {sw} that match this traffic (ingress and egress on {port}): the dropped packets' "
           "addresses and ports are in `fabricflow query drops --by reason,src_node,dst_node` and the archive's "
           "discards_raw.",
    "routing": "Check {sw}'s routes and neighbours for the dropped packets' destinations (no route, unresolved "
               "neighbour, blackhole); ttl_exceeded points at a routing loop, pkt_too_big / frag_needed at an MTU "
               "mismatch along the path.",
    "l2": "Check {port}'s VLAN membership and tagging on both ends, STP state and MLAG isolation; the dropped "
          "packets' VLAN is in the archive's discards_raw.",
    "ip_header": "Look at the senders of the dropped packets (`fabricflow query drops --by reason,src_node`): the "
                 "switch drops them for their IP header (corrupt, loopback, multicast or class-E addresses).",
    "tunnel": "Check the VXLAN / overlay configuration of {sw} (VNI mapping, decapsulation, source MACs).",
}


def drop_items(drops: dict | None, subject: str, span_ms: int) -> list[dict]:
    """One evidence item per reason (the :data:`TOP_REASONS` most frequent) of the event's notifications."""
    if not drops or not drops.get("total"):
        return []
    over = f"over the counter interval ({span_ms / 1000:.0f} s)" if span_ms > 0 else "around the event"
    lost = drops.get("lost", 0)
    note = (f"sFlow dropped-packet notifications {over}: each one dropped packet, not sampled"
            + (f"; the agent could not send {lost} more (rate limit)" if lost else ""))
    reasons = drops["reasons"]
    items = [evidence(f"drop_reason:{name}", "notifications", subject, float(n), note=f"{note}; group {group}")
             for name, group, n in reasons[:TOP_REASONS]]
    rest = sum(n for *_x, n in reasons[TOP_REASONS:])
    if rest:
        items.append(evidence("drop_reason:other_reasons", "notifications", subject, float(rest),
                              note=f"{note}; {len(reasons) - TOP_REASONS} further reasons"))
    items += [evidence("dropped_job", "notifications", job, float(n),
                       note=f"dropped packets of this job on {subject} (its destination node's job, else its source's)")
              for job, n in drops.get("jobs", [])[:3]]
    return items


def buffer_share(drops: dict | None) -> float:
    """Share of the notifications whose reason is a full buffer (no_buffer_space, red, shaping)."""
    if not drops or not drops.get("total"):
        return 0.0
    return drops["groups"].get("buffer", 0) / drops["total"]


def forwarding_verdict(drops: dict | None, name: str, items: list[dict], interval_ms: int) -> dict | None:
    """``forwarding_drop`` when most (> half) of the notifications name one forwarding reason group (acl,
    routing, l2, ip_header, tunnel); None otherwise (buffer, unknown or mixed reasons)."""
    if not drops or not drops.get("total"):
        return None
    total, groups = drops["total"], drops["groups"]
    group = min(groups, key=lambda g: (-groups[g], g))
    if group not in _NEXT or groups[group] * 2 <= total:
        return None
    top = ", ".join(f"{r} {n}" for r, g, n in drops["reasons"] if g == group)
    summary = (f"{name} dropped packets by its forwarding rules, not for congestion or a link fault: "
               f"{groups[group]} of {total} dropped-packet notifications are {group} drops ({top})")
    sw, _, _ = name.partition("/")
    return diagnosis(FORWARDING_DROP, summary, _NEXT[group].format(sw=sw, port=name),
                     limits(FORWARDING_DROP, interval_ms), items)
