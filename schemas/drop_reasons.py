"""sFlow drop reason codes (sflow.org "sFlow Dropped Packet Notification Structures", ``enum drop_reason``).

Codes 0-15 are the ICMP unreachable codes of sFlow v5's interface typedef, 256-262 its other discard reasons,
263-303 the Linux devlink-trap reasons the drop spec adds. :func:`reason_name` turns a code into the spec's
name, or ``"other"`` for a code the list does not have (the spec says collectors must expect new codes), so
a label made from it stays within these names plus one. :data:`REASON_GROUP` folds the names into the few
classes an operator acts on (buffer, acl, routing, l2, ip_header, tunnel, other).
"""

from __future__ import annotations

import numpy as np

__all__ = ["REASONS", "REASON_GROUP", "reason_name", "reason_names"]

REASONS: dict[int, str] = {
    0: "net_unreachable", 1: "host_unreachable", 2: "protocol_unreachable", 3: "port_unreachable",
    4: "frag_needed", 5: "src_route_failed", 6: "dst_net_unknown", 7: "dst_host_unknown",
    8: "src_host_isolated", 9: "dst_net_prohibited", 10: "dst_host_prohibited", 11: "dst_net_tos_unreachable",
    12: "dst_host_tos_unreachable", 13: "comm_admin_prohibited", 14: "host_precedence_violation",
    15: "precedence_cutoff",
    256: "unknown", 257: "ttl_exceeded", 258: "acl", 259: "no_buffer_space", 260: "red", 261: "traffic_shaping",
    262: "pkt_too_big", 263: "src_mac_is_multicast", 264: "vlan_tag_mismatch", 265: "ingress_vlan_filter",
    266: "ingress_spanning_tree_filter", 267: "port_list_is_empty", 268: "port_loopback_filter",
    269: "blackhole_route", 270: "non_ip", 271: "uc_dip_over_mc_dmac", 272: "dip_is_loopback_address",
    273: "sip_is_mc", 274: "sip_is_loopback_address", 275: "ip_header_corrupted", 276: "ipv4_sip_is_limited_bc",
    277: "ipv6_mc_dip_reserved_scope", 278: "ipv6_mc_dip_interface_local_scope", 279: "unresolved_neigh",
    280: "mc_reverse_path_forwarding", 281: "non_routable_packet", 282: "decap_error", 283: "overlay_smac_is_mc",
    284: "unknown_l2", 285: "unknown_l3", 286: "unknown_l3_exception", 287: "unknown_buffer", 288: "unknown_tunnel",
    289: "unknown_l4", 290: "sip_is_unspecified", 291: "mlag_port_isolation", 292: "blackhole_arp_neigh",
    293: "src_mac_is_dmac", 294: "dmac_is_reserved", 295: "sip_is_class_e", 296: "mc_dmac_mismatch",
    297: "sip_is_dip", 298: "dip_is_local_network", 299: "dip_is_link_local", 300: "overlay_smac_is_dmac",
    301: "egress_vlan_filter", 302: "uc_reverse_path_forwarding", 303: "split_horizon",
}

_GROUPS = {
    "buffer": ("no_buffer_space", "red", "traffic_shaping", "unknown_buffer"),
    "acl": ("acl", "comm_admin_prohibited", "dst_net_prohibited", "dst_host_prohibited"),
    "routing": ("net_unreachable", "host_unreachable", "dst_net_unknown", "dst_host_unknown", "blackhole_route",
                "unresolved_neigh", "blackhole_arp_neigh", "ttl_exceeded", "unknown_l3", "unknown_l3_exception",
                "non_routable_packet", "uc_reverse_path_forwarding", "mc_reverse_path_forwarding", "pkt_too_big",
                "frag_needed"),
    "l2": ("src_mac_is_multicast", "vlan_tag_mismatch", "ingress_vlan_filter", "ingress_spanning_tree_filter",
           "port_list_is_empty", "port_loopback_filter", "unknown_l2", "mlag_port_isolation", "src_mac_is_dmac",
           "dmac_is_reserved", "mc_dmac_mismatch", "egress_vlan_filter", "split_horizon"),
    "tunnel": ("decap_error", "overlay_smac_is_mc", "overlay_smac_is_dmac", "unknown_tunnel"),
    "ip_header": ("ip_header_corrupted", "non_ip", "uc_dip_over_mc_dmac", "dip_is_loopback_address", "sip_is_mc",
                  "sip_is_loopback_address", "ipv4_sip_is_limited_bc", "ipv6_mc_dip_reserved_scope",
                  "ipv6_mc_dip_interface_local_scope", "sip_is_unspecified", "sip_is_class_e", "sip_is_dip",
                  "dip_is_local_network", "dip_is_link_local"),
}
#: reason name -> group (``other`` for the rest, ``unknown`` and codes outside the list included)
REASON_GROUP: dict[str, str] = {name: g for g, names in _GROUPS.items() for name in names}


def reason_name(code: int) -> str:
    """The spec's name of drop reason ``code``, ``"other"`` for a code it does not list."""
    return REASONS.get(int(code), "other")


def reason_names(codes: np.ndarray) -> list[str]:
    """:func:`reason_name` of each code (a column of DISCARD_DTYPE ``reason``)."""
    return [reason_name(c) for c in np.asarray(codes).tolist()]
