"""Parse the first bytes of a sampled packet (sFlow raw packet header record): the readable reference.

Used by tests only (the compiled decoder, :mod:`ingest.decode.sflow`, parses the same way). Pure functions
over ``bytes``: Ethernet (802.1Q / QinQ), IPv4, IPv6 with extension headers,
TCP/UDP/ICMP/ICMPv6, VXLAN (UDP 4789, inner frame parsed) and RoCEv2 (UDP 4791, BTH). Headers cut
short by the sampler stop the parse where the bytes end; nothing raises on malformed input. Every
parser returns a :data:`Parsed` tuple ``(ip_version, src16, dst16, src_port, dst_port, ip_protocol,
tcp_flags, tos, vlan, ip_len, vxlan_vni, roce_opcode, roce_dest_qp)``: addresses as 16 bytes (IPv4
mapped), ``ip_len`` from the IP header (-1 when unknown); for VXLAN the addresses, ports, protocol and
flags are the inner packet's while ``vlan``, ``tos`` and ``ip_len`` stay the outer ones.
"""

from __future__ import annotations

from struct import Struct
from struct import error as _StructError

__all__ = [
    "parse_header",
    "parse_ethernet",
    "parse_ipv4",
    "parse_ipv6",
    "HEADER_ETHERNET",
    "HEADER_IPV4",
    "HEADER_IPV6",
    "VXLAN_PORT",
    "ROCEV2_PORT",
    "NON_IP",
]

HEADER_ETHERNET = 1
HEADER_IPV4 = 11
HEADER_IPV6 = 12
VXLAN_PORT = 4789
ROCEV2_PORT = 4791

V4_PREFIX = b"\x00" * 10 + b"\xff\xff"
ZERO16 = b"\x00" * 16
_VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)
# IPv6 extension headers we walk over: hop-by-hop, routing, fragment, dest opts, AH.
_V6_EXT = (0, 43, 44, 60, 51)
_MAX_TAGS = 4
_MAX_EXT = 8

_H = Struct(">H").unpack_from
_HH = Struct(">HH").unpack_from
_TCP = Struct(">HH9xB").unpack_from  # ports, flags byte at offset 13
_I = Struct(">I").unpack_from
# ver_ihl, tos, total_len, flags+frag offset, protocol, src, dst
_IP4 = Struct(">BBH2xHxB2x4s4s").unpack_from
# ver/tc/flow, payload length, next header, src, dst
_IP6 = Struct(">IHBx16s16s").unpack_from

NON_IP = (0, ZERO16, ZERO16, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1)


def parse_header(h: bytes, header_protocol: int) -> tuple | None:
    """Parse a sampled header by its sFlow header protocol (1, 11, 12); None if unsupported."""
    if header_protocol == HEADER_ETHERNET:
        return parse_ethernet(h, 0, 0)
    if header_protocol == HEADER_IPV4:
        return parse_ipv4(h, 0, 0, 0)
    if header_protocol == HEADER_IPV6:
        return parse_ipv6(h, 0, 0, 0)
    return None


def parse_ethernet(h: bytes, off: int = 0, depth: int = 0) -> tuple:
    """Ethernet II frame at ``off``; the outer 802.1Q/802.1ad tag gives ``vlan``."""
    try:
        et = _H(h, off + 12)[0]
    except _StructError:
        return NON_IP
    off += 14
    vlan = 0
    tags = 0
    try:
        while et in _VLAN_TPIDS and tags < _MAX_TAGS:
            tci, et = _HH(h, off)
            if tags == 0:
                vlan = tci & 0x0FFF
            off += 4
            tags += 1
    except _StructError:
        return (0, ZERO16, ZERO16, 0, 0, 0, 0, 0, vlan, -1, -1, -1, -1)
    if et == 0x0800:
        return parse_ipv4(h, off, vlan, depth)
    if et == 0x86DD:
        return parse_ipv6(h, off, vlan, depth)
    return (0, ZERO16, ZERO16, 0, 0, 0, 0, 0, vlan, -1, -1, -1, -1)


def parse_ipv4(h: bytes, off: int, vlan: int = 0, depth: int = 0) -> tuple:
    """IPv4 header at ``off`` then its L4 header (not for non-first fragments)."""
    try:
        vi, tos, total, frag, proto, src, dst = _IP4(h, off)
    except _StructError:
        if len(h) >= off + 4 and (h[off] >> 4) == 4:
            # cut inside the IP header: the length field is still there
            return (4, ZERO16, ZERO16, 0, 0, 0, 0, h[off + 1], vlan, _H(h, off + 2)[0], -1, -1, -1)
        return (0, ZERO16, ZERO16, 0, 0, 0, 0, 0, vlan, -1, -1, -1, -1)
    src = V4_PREFIX + src
    dst = V4_PREFIX + dst
    ihl = (vi & 0x0F) << 2
    if (vi >> 4) != 4 or ihl < 20 or (frag & 0x1FFF):
        return (4, src, dst, 0, 0, proto, 0, tos, vlan, total, -1, -1, -1)
    return _l4(h, off + ihl, proto, 4, src, dst, tos, vlan, total, depth)


def parse_ipv6(h: bytes, off: int, vlan: int = 0, depth: int = 0) -> tuple:
    """IPv6 header at ``off``, walking extension headers to the L4 header."""
    try:
        vtf, plen, nh, src, dst = _IP6(h, off)
    except _StructError:
        if len(h) >= off + 6 and (h[off] >> 4) == 6:
            tc = (_I(h, off)[0] >> 20) & 0xFF
            return (6, ZERO16, ZERO16, 0, 0, 0, 0, tc, vlan, _H(h, off + 4)[0] + 40, -1, -1, -1)
        return (0, ZERO16, ZERO16, 0, 0, 0, 0, 0, vlan, -1, -1, -1, -1)
    tos = (vtf >> 20) & 0xFF
    total = plen + 40
    if (vtf >> 28) != 6:
        return (6, src, dst, 0, 0, nh, 0, tos, vlan, total, -1, -1, -1)
    p = off + 40
    n = 0
    try:
        while nh in _V6_EXT and n < _MAX_EXT:
            nxt = h[p]
            if nh == 44:  # fragment header: fixed 8 bytes
                if _H(h, p + 2)[0] & 0xFFF8:
                    return (6, src, dst, 0, 0, nxt, 0, tos, vlan, total, -1, -1, -1)
                p += 8
            elif nh == 51:  # AH: length in 4-octet units minus 2
                p += (h[p + 1] + 2) << 2
            else:
                p += (h[p + 1] + 1) << 3
            nh = nxt
            n += 1
    except (IndexError, _StructError):
        return (6, src, dst, 0, 0, nh, 0, tos, vlan, total, -1, -1, -1)
    return _l4(h, p, nh, 6, src, dst, tos, vlan, total, depth)


def _l4(h, off, proto, ipv, src, dst, tos, vlan, total, depth) -> tuple:
    try:
        if proto == 6:
            try:
                sp, dp, flags = _TCP(h, off)
            except _StructError:
                sp, dp = _HH(h, off)
                flags = 0
            return (ipv, src, dst, sp, dp, 6, flags, tos, vlan, total, -1, -1, -1)
        if proto == 17:
            sp, dp = _HH(h, off)
            if dp == ROCEV2_PORT:
                try:
                    opcode = h[off + 8]
                    qp = _I(h, off + 12)[0] & 0xFFFFFF
                except (IndexError, _StructError):
                    return (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, -1, -1)
                return (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, opcode, qp)
            if dp == VXLAN_PORT and depth == 0:
                return _vxlan(h, off + 8, (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, -1, -1))
            return (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, -1, -1)
        if proto == 1 or proto == 58:
            return (ipv, src, dst, 0, (h[off] << 8) | h[off + 1], proto, 0, tos, vlan, total, -1, -1, -1)
        if proto == 132:  # SCTP ports
            sp, dp = _HH(h, off)
            return (ipv, src, dst, sp, dp, 132, 0, tos, vlan, total, -1, -1, -1)
    except (IndexError, _StructError):
        pass
    return (ipv, src, dst, 0, 0, proto, 0, tos, vlan, total, -1, -1, -1)


def _vxlan(h, off, outer) -> tuple:
    """VXLAN header at ``off`` (8 bytes) then the inner Ethernet frame."""
    try:
        vni = _I(h, off + 4)[0] >> 8
    except _StructError:
        return outer
    inner = parse_ethernet(h, off + 8, 1)
    if inner[0] == 0:
        # inner frame cut before its IP header: keep outer addresses, mark the VNI
        return outer[:10] + (vni, -1, -1)
    return (
        inner[0], inner[1], inner[2], inner[3], inner[4], inner[5], inner[6],
        outer[7], outer[8], outer[9], vni, inner[11], inner[12],
    )
