"""VLAN in/out, 802.1p priority and next hops from NetFlow v5 / v9 / IPFIX information elements."""

from __future__ import annotations

import ipaddress
import struct

from ingest.decode import TemplateCache, decode
from ingest.decode._nf_plan import PEN_REVERSE
from schemas.columns import addr_str

from devtools import nfbuild as b


def _ip(a: str) -> bytes:
    return ipaddress.ip_address(a).packed


def test_ipfix_vlans_priority_and_ipv4_next_hops():
    fields = [(8, 4), (12, 4), (58, 2), (59, 2), (244, 1), (15, 4), (18, 4), (1, 4), (2, 4)]
    rec = struct.pack("!4s4sHHB4s4sII", _ip("10.0.0.1"), _ip("10.0.0.2"), 100, 200, 5, _ip("10.0.0.254"),
                      _ip("192.0.2.1"), 1000, 1)
    f = decode(b.ipfix(b.ipfix_template_set((256, fields)), b.data_set(256, rec)), "192.0.2.9", 1, TemplateCache()).flows
    assert (f["vlan"][0], f["vlan_out"][0], f["vlan_priority_in"][0]) == (100, 200, 5)
    assert addr_str(f["next_hop"][0]) == "10.0.0.254" and addr_str(f["bgp_next_hop"][0]) == "192.0.2.1"
    assert f["vlan_priority_out"][0] == 0


def test_v9_ipv6_next_hops_and_defaults():
    fields = [(27, 16), (28, 16), (62, 16), (63, 16), (1, 4), (2, 4)]
    rec = _ip("fd00::1") + _ip("fd00::2") + _ip("fd00::fe") + _ip("2001:db8::1") + struct.pack("!II", 10, 1)
    f = decode(b.v9(b.v9_template_set((300, fields)), b.data_set(300, rec)), "192.0.2.9", 1, TemplateCache()).flows
    assert addr_str(f["next_hop"][0]) == "fd00::fe" and addr_str(f["bgp_next_hop"][0]) == "2001:db8::1"
    assert f["vlan_out"][0] == 0
    rec = struct.pack("!4s4sII", _ip("10.0.0.1"), _ip("10.0.0.2"), 1, 1)  # no such fields: :: and 0
    f = decode(b.v9(b.v9_template_set((301, [(8, 4), (12, 4), (1, 4), (2, 4)])), b.data_set(301, rec)), "x", 1,
               TemplateCache()).flows
    assert not f["next_hop"].any() and not f["bgp_next_hop"].any() and f["vlan_out"][0] == 0


def test_v5_next_hop():
    f = decode(b.v5([b.v5_record()]), "192.0.2.9", 1, TemplateCache()).flows
    assert len(f) == 1 and f["next_hop"][0][10:12].tolist() == [255, 255]  # IPv4-mapped (nexthop field)


def test_biflow_reverse_swaps_vlans_and_leaves_the_next_hop_unknown():
    R = PEN_REVERSE
    fields = [(8, 4), (12, 4), (58, 2), (59, 2), (15, 4), (1, 4), (2, 4), (1, 4, R), (2, 4, R)]
    rec = struct.pack("!4s4sHH4sIIII", _ip("10.0.0.1"), _ip("10.0.0.2"), 100, 200, _ip("10.0.0.254"), 500, 5, 300, 3)
    f = decode(b.ipfix(b.ipfix_template_set((256, fields)), b.data_set(256, rec)), "192.0.2.9", 1, TemplateCache()).flows
    assert f["vlan"].tolist() == [100, 200] and f["vlan_out"].tolist() == [200, 100]
    assert [addr_str(a) for a in f["next_hop"]] == ["10.0.0.254", "::"]
