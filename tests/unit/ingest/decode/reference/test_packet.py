"""Sampled packet header parsing on hand-built frames: the readable reference (ingest/decode/reference/packet.py),
which tests/unit/ingest/decode/test_sflow_differential.py holds the compiled parser to."""

from __future__ import annotations

import pytest

from ingest.decode.reference.packet import parse_ethernet, parse_header
from schemas.columns import addr16, addr_str
from devtools import sflow_build as b

FIELDS = ("ipv", "src", "dst", "sport", "dport", "proto", "flags", "tos", "vlan", "ip_len", "vni", "roce_op", "roce_qp")


def P(t):
    d = dict(zip(FIELDS, t))
    d["src"] = addr_str(d["src"])
    d["dst"] = addr_str(d["dst"])
    return d


def test_ipv4_tcp_flags_tos():
    f = b.eth(b.ipv4(b.tcp(1234, 80, flags=0x12), 6, "10.1.1.1", "10.2.2.2", tos=0x6B, total_len=1500))
    p = P(parse_ethernet(f))
    assert p == dict(ipv=4, src="10.1.1.1", dst="10.2.2.2", sport=1234, dport=80, proto=6, flags=0x12, tos=0x6B,
                     vlan=0, ip_len=1500, vni=-1, roce_op=-1, roce_qp=-1)


def test_dot1q_and_qinq_outer_vlan():
    inner = b.ipv4(b.udp(5, 53), 17, "10.0.0.1", "10.0.0.2")
    assert P(parse_ethernet(b.eth(inner, 0x0800, [(0x8100, 210)])))["vlan"] == 210
    q = P(parse_ethernet(b.eth(inner, 0x0800, [(0x88A8, 300), (0x8100, 42)])))
    assert q["vlan"] == 300 and q["dport"] == 53 and q["src"] == "10.0.0.1"
    q2 = P(parse_ethernet(b.eth(inner, 0x0800, [(0x8100, 7), (0x8100, 8)])))
    assert q2["vlan"] == 7 and q2["proto"] == 17


def test_ipv4_options_and_fragments():
    opt = b.ipv4(b.tcp(1, 2, flags=2), 6, options=b"\x01\x01\x01\x00")
    p = P(parse_ethernet(b.eth(opt)))
    assert (p["sport"], p["dport"], p["flags"]) == (1, 2, 2)
    # non-first fragment: no L4 ports even though bytes look like a header
    frag = b.ipv4(b.tcp(1, 2), 6, frag=100, total_len=900)
    p = P(parse_ethernet(b.eth(frag)))
    assert (p["sport"], p["dport"], p["proto"], p["ip_len"]) == (0, 0, 6, 900)
    # first fragment (MF set, offset 0): ports present
    first = b.ipv4(b.udp(7, 9), 17, frag=0x2000)
    assert P(parse_ethernet(b.eth(first)))["dport"] == 9


@pytest.mark.parametrize(
    "ext",
    [
        [(0, b.ext_hbh(0))],
        [(43, b.ext_hbh(1))],
        [(60, b.ext_hbh(2))],
        [(44, b.ext_frag(0, more=True))],
        [(51, b.ext_ah(4))],
        [(0, b.ext_hbh(0)), (60, b.ext_hbh(0)), (43, b.ext_hbh(0)), (44, b.ext_frag(0)), (51, b.ext_ah(1))],
    ],
)
def test_ipv6_extension_headers(ext):
    pkt = b.ipv6(b.tcp(5555, 9100, flags=0x11), 6, "fd00:99::30", "fd00:30::1", tc=0xB8, payload_len=1000, ext=ext)
    p = P(parse_ethernet(b.eth(pkt, 0x86DD)))
    assert p == dict(ipv=6, src="fd00:99::30", dst="fd00:30::1", sport=5555, dport=9100, proto=6, flags=0x11,
                     tos=0xB8, vlan=0, ip_len=1040, vni=-1, roce_op=-1, roce_qp=-1)


def test_ipv6_non_first_fragment_has_no_ports():
    pkt = b.ipv6(b.udp(1, 2), 17, ext=[(44, b.ext_frag(185))])
    p = P(parse_ethernet(b.eth(pkt, 0x86DD)))
    assert (p["proto"], p["sport"], p["dport"]) == (17, 0, 0)


def test_icmp_and_icmpv6_type_code():
    p = P(parse_ethernet(b.eth(b.ipv4(b.icmp(3, 4), 1))))
    assert (p["proto"], p["sport"], p["dport"]) == (1, 0, 3 * 256 + 4)
    p6 = P(parse_ethernet(b.eth(b.ipv6(b.icmp(128, 0), 58), 0x86DD)))
    assert (p6["proto"], p6["sport"], p6["dport"]) == (58, 0, 128 * 256)


def test_vxlan_inner_flow():
    inner = b.eth(b.ipv4(b.tcp(40000, 2049, flags=0x10), 6, "192.168.1.5", "192.168.2.9", tos=4), 0x0800)
    outer = b.eth(b.ipv4(b.udp(51000, 4789, b.vxlan(5001, inner)), 17, "10.0.0.1", "10.0.0.2", tos=0x60,
                         total_len=1550), 0x0800, [(0x8100, 12)])
    p = P(parse_ethernet(outer))
    assert p == dict(ipv=4, src="192.168.1.5", dst="192.168.2.9", sport=40000, dport=2049, proto=6, flags=0x10,
                     tos=0x60, vlan=12, ip_len=1550, vni=5001, roce_op=-1, roce_qp=-1)


def test_vxlan_inner_ipv6_and_cut_inner():
    inner6 = b.eth(b.ipv6(b.udp(1, 4791, b.bth(10, 0xABCDEF)), 17, "fd00::a", "fd00::b"), 0x86DD)
    outer = b.eth(b.ipv4(b.udp(5, 4789, b.vxlan(77, inner6)), 17))
    p = P(parse_ethernet(outer))
    assert (p["ipv"], p["src"], p["vni"], p["roce_op"], p["roce_qp"]) == (6, "fd00::a", 77, 10, 0xABCDEF)
    # inner frame cut before its IP header: outer addresses, VNI still set
    cut = outer[: 14 + 20 + 8 + 8 + 10]
    p = P(parse_ethernet(cut))
    assert (p["src"], p["dport"], p["vni"]) == ("10.0.0.1", 4789, 77)


def test_rocev2_bth():
    f = b.eth(b.ipv4(b.udp(49152, 4791, b.bth(0x81, 0x123456)), 17, tos=0xC0))
    p = P(parse_ethernet(f))
    assert (p["roce_op"], p["roce_qp"], p["dport"], p["tos"], p["vni"]) == (0x81, 0x123456, 4791, 0xC0, -1)
    # BTH cut short: opcode/QP unknown, ports kept
    p = P(parse_ethernet(f[: 14 + 20 + 8 + 6]))
    assert (p["roce_op"], p["roce_qp"], p["dport"]) == (-1, -1, 4791)


def test_header_protocols_ip_only():
    v4 = b.ipv4(b.udp(10, 20), 17, "1.2.3.4", "5.6.7.8", total_len=300)
    p = P(parse_header(v4, 11))
    assert (p["ipv"], p["src"], p["dport"], p["ip_len"]) == (4, "1.2.3.4", 20, 300)
    v6 = b.ipv6(b.tcp(1, 2), 6, payload_len=60)
    p = P(parse_header(v6, 12))
    assert (p["ipv"], p["ip_len"], p["sport"]) == (6, 100, 1)
    assert parse_header(v4, 7) is None


def test_truncated_headers_keep_length_fields():
    f = b.eth(b.ipv4(b.tcp(1, 2, flags=2), 6, "10.0.0.1", "10.0.0.2", total_len=9000))
    # cut inside TCP after the ports: ports kept, flags unknown
    p = P(parse_ethernet(f[: 14 + 20 + 6]))
    assert (p["sport"], p["dport"], p["flags"], p["ip_len"]) == (1, 2, 0, 9000)
    # cut inside the IPv4 header after the length field
    p = P(parse_ethernet(f[: 14 + 8]))
    assert (p["ipv"], p["ip_len"], p["src"]) == (4, 9000, "::")
    # cut inside IPv6 header after payload length
    f6 = b.eth(b.ipv6(b.tcp(1, 2), 6, payload_len=1400), 0x86DD)
    p = P(parse_ethernet(f6[: 14 + 8]))
    assert (p["ipv"], p["ip_len"]) == (6, 1440)
    # cut inside an extension header chain
    f6e = b.eth(b.ipv6(b.tcp(1, 2), 6, payload_len=100, ext=[(0, b.ext_hbh(3))]), 0x86DD)
    p = P(parse_ethernet(f6e[: 14 + 41]))
    assert (p["ipv"], p["sport"], p["ip_len"]) == (6, 0, 140)
    # only the MAC addresses
    assert P(parse_ethernet(f[:10]))["ipv"] == 0


def test_non_ip_frames():
    arp = b.eth(b"\x00" * 28, 0x0806, [(0x8100, 5)])
    p = P(parse_ethernet(arp))
    assert (p["ipv"], p["vlan"], p["ip_len"]) == (0, 5, -1)


def test_addresses_are_16_bytes():
    t = parse_ethernet(b.eth(b.ipv4(b.udp(1, 2), 17, "10.9.8.7", "10.1.1.1")))
    assert t[1] == addr16("10.9.8.7") and len(t[2]) == 16
