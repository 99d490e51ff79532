"""App category rules: positive and negative cases, order, configuration."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from processors.logic.enrich.categories import CATEGORIES, CategoryRules, categorize_groups

TCP, UDP, ICMP = 6, 17, 1


def cat(proto, sport, dport, sg="gpu", dg="gpu", s_in=True, d_in=True, rules=None, is_ip=True):
    out = categorize_groups(
        np.array([proto]), np.array([sport]), np.array([dport]), [sg], [dg],
        np.array([s_in]), np.array([d_in]), rules, np.array([is_ip]),
    )
    assert out.dtype == object
    return out[0]


@pytest.mark.parametrize("args,expected", [
    # collective: TCP between two gpu nodes on dynamic ports
    ((TCP, 45000, 51234), "collective"),
    ((TCP, 51234, 45000), "collective"),
    ((TCP, 45000, 51234, "gpu", "storage"), "other"),
    ((TCP, 45000, 51234, "mgmt", "gpu"), "other"),
    ((UDP, 45000, 51234), "other"),
    ((TCP, 22, 51234), "mgmt"),  # well-known port on one side: not collective
    # rocev2
    ((UDP, 50000, 4791), "rocev2"),
    ((UDP, 4791, 50000, "gpu", "unknown", True, False), "rocev2"),
    ((TCP, 50000, 4791, "gpu", "storage"), "other"),
    # storage: NFS/iSCSI/Lustre any groups, either side
    ((TCP, 800, 2049, "gpu", "storage"), "storage"),
    ((UDP, 2049, 800, "storage", "gpu"), "storage"),
    ((TCP, 40000, 3260, "gpu", "gpu"), "storage"),  # well-known iSCSI port between gpus: not collective
    ((TCP, 1023, 988, "gpu", "storage"), "storage"),
    ((UDP, 50000, 3260, "gpu", "storage"), "other"),
    # S3 ports only towards the storage group
    ((TCP, 50000, 443, "gpu", "storage"), "storage"),
    ((TCP, 9000, 50000, "storage", "gpu"), "storage"),
    ((TCP, 50000, 443, "gpu", "mgmt"), "other"),
    ((TCP, 50000, 9000, "storage", "gpu"), "other"),  # port on the non-storage side
    # dns
    ((UDP, 50000, 53, "gpu", "mgmt"), "dns"),
    ((TCP, 53, 50000, "mgmt", "gpu"), "dns"),
    ((UDP, 50000, 5353, "gpu", "mgmt"), "other"),
    # mgmt
    ((TCP, 50000, 22, "mgmt", "gpu"), "mgmt"),
    ((UDP, 161, 50000, "gpu", "mgmt"), "mgmt"),
    ((UDP, 50000, 162, "gpu", "mgmt"), "mgmt"),
    ((UDP, 50000, 623, "mgmt", "gpu"), "mgmt"),
    ((UDP, 50000, 22, "mgmt", "gpu"), "other"),
    ((TCP, 50000, 161, "mgmt", "gpu"), "other"),
    # external
    ((TCP, 50000, 8443, "gpu", "unknown", True, False), "external"),
    ((TCP, 50000, 8443, "unknown", "gpu", False, True), "external"),
    ((TCP, 50000, 8443, "gpu", "external-authorized", True, True), "external"),
    ((TCP, 50000, 8443, "gpu", "unknown", True, True), "other"),  # unregistered but inside: not external
    ((TCP, 50000, 22, "unknown", "mgmt", False, True), "mgmt"),  # mgmt comes first in the default order
    # ICMP's dst_port carries type/code: never a port rule
    ((ICMP, 0, 53, "gpu", "mgmt"), "other"),
    ((ICMP, 0, 2049, "gpu", "storage"), "other"),
])
def test_default_rules(args, expected):
    assert cat(*args) == expected


def test_non_ip_is_other():
    assert cat(UDP, 50000, 4791, is_ip=False) == "other"
    assert cat(0, 0, 0, "unknown", "unknown", False, False, is_ip=False) == "other"


def test_order_is_configurable():
    rules = CategoryRules(order=("external", "mgmt", "dns"))
    assert cat(TCP, 50000, 22, "unknown", "mgmt", False, True, rules=rules) == "external"
    assert cat(TCP, 45000, 51234, rules=rules) == "other"  # collective not in order


def test_configurable_ports_and_groups():
    rules = CategoryRules(
        collective_ports=("tcp/50000-50100",), collective_groups=("gpu", "gpu-b"),
        storage_groups=("storage", "model-store"), mgmt_ports=("tcp/22", "tcp/8443"),
        dns_ports=("any/53",),
    )
    assert cat(TCP, 33333, 50050, "gpu", "gpu-b", rules=rules) == "collective"
    assert cat(TCP, 33333, 40000, "gpu", "gpu", rules=rules) == "other"
    assert cat(TCP, 50000, 443, "gpu", "model-store", rules=rules) == "storage"
    assert cat(TCP, 50000, 8443, "mgmt", "gpu", rules=rules) == "mgmt"
    assert cat(132, 50000, 53, "mgmt", "gpu", rules=rules) == "dns"


@pytest.mark.parametrize("kwargs", [
    {"order": ("dns", "dns")},
    {"order": ("bogus",)},
    {"mgmt_ports": ("ssh/22",)},
    {"mgmt_ports": ("tcp/70000",)},
    {"mgmt_ports": ("tcp/30-20",)},
    {"unknown_field": 1},
])
def test_bad_rules_rejected(kwargs):
    with pytest.raises(ValidationError):
        CategoryRules(**kwargs)


def test_vectorised_batch_matches_single_calls():
    rng = np.random.default_rng(7)
    n = 500
    groups = np.array(["gpu", "storage", "mgmt", "unknown", "external-authorized"], dtype=object)
    proto = rng.choice([TCP, UDP, ICMP], n)
    ports = np.array([22, 53, 80, 161, 443, 623, 988, 2049, 3260, 4791, 9000, 40000, 51234, 1023])
    sp, dp = rng.choice(ports, n), rng.choice(ports, n)
    sg, dg = groups[rng.integers(0, 5, n)], groups[rng.integers(0, 5, n)]
    si, di = rng.random(n) < 0.8, rng.random(n) < 0.8
    batch = categorize_groups(proto, sp, dp, sg, dg, si, di)
    single = [cat(proto[i], sp[i], dp[i], sg[i], dg[i], si[i], di[i]) for i in range(n)]
    assert batch.tolist() == single
    assert set(batch) <= set(CATEGORIES)
