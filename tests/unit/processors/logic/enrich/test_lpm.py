"""Longest-prefix match against a brute-force reference."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.logic.enrich.lpm import PrefixTable, parse_prefix, prefix_str
from schemas.columns import addr16_column, addr_halves


def _mapped_net(c: str) -> ipaddress.IPv6Network:
    n = ipaddress.ip_network(c)
    if n.version == 4:
        return ipaddress.IPv6Network(((0xFFFF << 32) | int(n.network_address), 96 + n.prefixlen))
    return n


def brute(cidrs: list[str], addrs: list[str]) -> list[int]:
    """Reference: linear scan in the IPv4-mapped 128-bit space (the documented semantics)."""
    nets = [_mapped_net(c) for c in cidrs]
    out = []
    for a in addrs:
        ip = ipaddress.ip_address(a)
        if ip.version == 4:
            ip = ipaddress.IPv6Address((0xFFFF << 32) | int(ip))
        best, best_len = -1, -1
        for i, n in enumerate(nets):
            if ip in n and n.prefixlen > best_len:
                best, best_len = i, n.prefixlen
        out.append(best)
    return out


def test_v4_v6_hosts_and_overlapping_prefixes():
    cidrs = ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3",
             "fd00::/8", "fd00:1::/32", "fd00:1::7", "0.0.0.0/0"]
    addrs = ["10.1.2.3", "10.1.2.4", "10.1.3.1", "10.2.0.1", "11.0.0.1",
             "fd00:1::7", "fd00:1::8", "fd01::1", "2001:db8::1"]
    got = PrefixTable.from_cidrs(cidrs).lookup(addr16_column(addrs))
    assert got.dtype == np.int32
    assert got.tolist() == [3, 2, 1, 0, 7, 6, 5, 4, -1]  # IPv4 0/0 does not catch IPv6
    assert got.tolist() == brute(cidrs, addrs)


def test_ipv4_prefixes_never_match_ipv6_but_v6_default_matches_all():
    t = PrefixTable.from_cidrs(["0.0.0.0/0"])
    assert t.lookup(addr16_column(["1.2.3.4", "::1", "2001:db8::1"])).tolist() == [0, -1, -1]
    t = PrefixTable.from_cidrs(["::/0", "10.0.0.0/8"])
    assert t.lookup(addr16_column(["10.9.9.9", "1.2.3.4", "::1"])).tolist() == [1, 0, 0]


def test_empty_table_and_empty_input():
    assert PrefixTable([]).lookup(addr16_column(["1.2.3.4"])).tolist() == [-1]
    assert PrefixTable.from_cidrs(["10.0.0.0/8"]).lookup(np.zeros((0, 16), np.uint8)).shape == (0,)


def test_duplicate_and_host_bits_rejected():
    with pytest.raises(ValueError, match=r"duplicate prefix 10\.0\.0\.0/8"):
        PrefixTable.from_cidrs(["10.0.0.0/8", "10.0.0.0/8"])
    with pytest.raises(ValueError):
        PrefixTable.from_cidrs(["10.0.0.1/8"])
    with pytest.raises(ValueError, match="host bits"):
        PrefixTable([(parse_prefix("10.0.0.0/8")[0] | 1, 104)])


def test_parse_and_print_prefix():
    assert prefix_str(*parse_prefix("10.1.0.0/16")) == "10.1.0.0/16"
    assert parse_prefix("10.1.0.0/16")[1] == 112
    assert prefix_str(*parse_prefix("fd00::1")) == "fd00::1/128"
    hi, lo = addr_halves(addr16_column(["::ffff:1.2.3.4", "fd00::1"]))
    assert hi.tolist() == [0, 0xFD00 << 48]
    assert lo.tolist() == [(0xFFFF << 32) | 0x01020304, 1]


# ---- property test against brute force

def _v4_net(draw):
    length = draw(st.integers(0, 32))
    value = draw(st.integers(0, 2**32 - 1)) >> (32 - length) << (32 - length) if length else 0
    return ipaddress.IPv4Network((value, length))


def _v6_net(draw):
    length = draw(st.integers(0, 128))
    # a narrow top so that prefixes overlap often
    value = (0xFD00 << 112) | draw(st.integers(0, 2**112 - 1)) if draw(st.booleans()) else draw(
        st.integers(0, 2**128 - 1))
    value = value >> (128 - length) << (128 - length) if length else 0
    return ipaddress.IPv6Network((value, length))


@st.composite
def table_and_queries(draw):
    nets = {}
    for _ in range(draw(st.integers(0, 25))):
        n = _v4_net(draw) if draw(st.booleans()) else _v6_net(draw)
        nets[n] = None
    nets = list(nets)
    queries = []
    for _ in range(draw(st.integers(1, 40))):
        if nets and draw(st.booleans()):
            n = draw(st.sampled_from(nets))
            host = draw(st.integers(0, n.num_addresses - 1))
            queries.append(str(n.network_address + host))
        elif draw(st.booleans()):
            queries.append(str(ipaddress.IPv4Address(draw(st.integers(0, 2**32 - 1)))))
        else:
            queries.append(str(ipaddress.IPv6Address(draw(st.integers(0, 2**128 - 1)))))
    return [str(n) for n in nets], queries


@settings(max_examples=150, deadline=None)
@given(table_and_queries())
def test_matches_brute_force(tq):
    cidrs, queries = tq
    got = PrefixTable.from_cidrs(cidrs).lookup(addr16_column(queries)).tolist()
    assert got == brute(cidrs, queries)


@pytest.mark.parametrize("collide", [False, True])
def test_many_host_routes_and_colliding_slots(monkeypatch, collide):
    """Thousands of host routes (long probe runs in the hash tables); with ``collide`` every prefix of a length
    hashes to one of two slots, so lookups walk long chains and stop at empty slots or the probe limit."""
    from processors.logic.enrich import lpm

    if collide:
        monkeypatch.setattr(lpm, "_slots", lambda hi, lo, shift: (lo & np.uint64(1)).view(np.int64) * 7)
    rng = np.random.default_rng(4)
    hosts = sorted({f"10.{a}.{b}.{c}" for a, b, c in rng.integers(0, 8, (1500, 3)).tolist()})
    cidrs = hosts + ["10.0.0.0/8", "10.1.0.0/16", "10.2.3.0/24", "fd00::/8", "fd00::5"]
    table = PrefixTable.from_cidrs(cidrs)
    assert max(lv.max_probe for lv in table._levels) > (20 if collide else 0)
    queries = hosts[::7] + [f"10.{a}.{b}.{c}" for a, b, c in rng.integers(0, 12, (400, 3)).tolist()]
    queries += ["11.0.0.1", "fd00::5", "fd00::6", "2001:db8::1"]
    assert table.lookup(addr16_column(queries)).tolist() == brute(cidrs, queries)
