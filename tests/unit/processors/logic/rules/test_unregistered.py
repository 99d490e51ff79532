"""Unregistered hosts and the vectorised CIDR membership behind them."""

import ipaddress

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.policy import CLUSTER, MIN, T0, assert_valid_alerts, by_state, flow, make_batch

from processors.logic.rules.policy import PolicyEngine
from processors.logic.rules.common import Networks
from schemas.columns import addr16_column

ONLY = {"exfiltration": {"enabled": False}, "external_dependency": {"enabled": False},
        "checkpoint": {"enabled": False}, "storage_on_compute": {"enabled": False}}


def test_unregistered_src_and_dst():
    e = PolicyEngine(ONLY, CLUSTER)
    b = make_batch([
        flow("10.0.9.9", "10.0.2.1", 1, 2049, nbytes=500, t=T0, dur=1000),
        flow("10.0.1.1", "10.0.9.9", 2, 22, nbytes=300, t=T0 + 5000),
        flow("10.0.1.1", "10.0.1.2", 3, 4791, t=T0),            # registered: nothing
        flow("10.0.1.1", "8.8.8.8", 4, 53, t=T0),               # outside the ranges: external, not unregistered
        flow("fd00:1::99", "fd00:1::10", 5, 4791, t=T0),         # IPv6 in range, unknown
    ])
    out = e.process(b, T0 + 10_000)
    assert_valid_alerts(out)
    got = {a["entities"]["addr"]: a for a in out}
    assert set(got) == {"10.0.9.9", "fd00:1::99"}
    a = got["10.0.9.9"]
    assert a["rule"] == "unregistered_host" and a["dedup_key"] == "unregistered_host|10.0.9.9"
    assert a["entities"]["seen_as"] == "src,dst" and a["entities"]["peer_groups"] == "gpu,storage"
    assert a["bytes_est"] == 800 and a["flows"] == 2
    assert a["first_seen_ms"] == T0 - 1000 and a["last_seen_ms"] == T0 + 5000
    assert got["fd00:1::99"]["sample_flows"] == ["tcp [fd00:1::99]:5 -> [fd00:1::10]:4791"]


def test_excluded_and_no_ranges():
    b = make_batch([flow("10.0.9.9", "10.0.2.1", t=T0)])
    assert PolicyEngine({**ONLY, "unregistered_host": {"exclude_cidrs": ["10.0.9.0/24"]}}, CLUSTER).process(b, T0) == []
    assert PolicyEngine(ONLY, []).process(b, T0) == []


def test_resolves_after_quiet():
    e = PolicyEngine(ONLY, CLUSTER)
    out = e.process(make_batch([flow("10.0.9.9", "10.0.2.1", t=T0)]), T0)
    assert by_state(out) == [("unregistered_host", "firing")]
    assert e.tick(T0 + 29 * MIN) == []
    assert by_state(e.tick(T0 + 31 * MIN)) == [("unregistered_host", "resolved")]


addrs = st.one_of(st.integers(0, 2**32 - 1).map(lambda i: str(ipaddress.IPv4Address(i))),
                  st.integers(0, 2**128 - 1).map(lambda i: str(ipaddress.IPv6Address(i))))
nets = st.one_of(
    st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 32)).map(
        lambda t: str(ipaddress.ip_network((t[0], t[1]), strict=False))),
    st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 128)).map(
        lambda t: str(ipaddress.ip_network((t[0], t[1]), strict=False))),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(addrs, min_size=1, max_size=20), st.lists(nets, max_size=4), st.data())
def test_networks_match_ipaddress(addresses, cidrs, data):
    # make some addresses fall inside the networks
    for c in cidrs:
        n = ipaddress.ip_network(c)
        addresses.append(str(n.network_address + data.draw(st.integers(0, n.num_addresses - 1))))
    got = Networks(cidrs).contains(addr16_column(addresses))
    want = np.array([any(_as_v4(ipaddress.ip_address(a)).version == _net_as_v4(ipaddress.ip_network(c)).version
                         and _as_v4(ipaddress.ip_address(a)) in _net_as_v4(ipaddress.ip_network(c)) for c in cidrs)
                     for a in addresses])
    assert (got == want).all()


_MAPPED = ipaddress.ip_network("::ffff:0:0/96")


def _as_v4(ip):
    """Flow records carry 16-byte addresses with IPv4 as ::ffff:a.b.c.d: an IPv4-mapped IPv6 address is that IPv4."""
    return ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped is not None else ip


def _net_as_v4(n):
    """... and an IPv6 network inside ::ffff:0:0/96 is the IPv4 network it maps (a wider one stays IPv6)."""
    if n.version == 6 and n.subnet_of(_MAPPED):
        return ipaddress.ip_network((int(n.network_address) & 0xFFFFFFFF, n.prefixlen - 96))
    return n


@pytest.mark.parametrize("cidr, address, inside", [
    ("0.0.0.0/0", "::ffff:0:0", True),            # the same 16 bytes as 0.0.0.0
    ("::ffff:10.0.0.0/104", "10.1.2.3", True),     # an IPv4 range written in its IPv6-mapped form
    ("::/0", "10.1.2.3", False),                   # an IPv6 network never holds IPv4 hosts otherwise
])
def test_ipv4_mapped_addresses_are_ipv4(cidr, address, inside):
    assert Networks([cidr]).contains(addr16_column([address])).tolist() == [inside]
