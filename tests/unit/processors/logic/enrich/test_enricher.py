"""Flow enrichment end to end on numpy batches."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
import pytest

from processors.config_files import read_inventory
from processors.logic.enrich.categories import CategoryRules
from processors.logic.enrich.enricher import ENRICHED_DTYPE, Enricher
from processors.logic.enrich.inventory import Inventory
from schemas.columns import FLOW_DTYPE, addr16, addr16_column, dtype_for, empty_flows
from tests.support.enrich import EXAMPLE, flows


def test_output_dtype_and_copied_fields():
    assert ENRICHED_DTYPE == dtype_for("flow_enriched")
    e = Enricher(read_inventory(EXAMPLE))
    f = flows([("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00")])
    f["vxlan_vni"] = 77
    f["exporter_addr"] = addr16_column(["10.10.255.1"])
    out = e.enrich(f)
    assert out.dtype == ENRICHED_DTYPE
    for name in FLOW_DTYPE.names:
        assert np.array_equal(out[name], f[name]), name


def test_flow_fields_in_another_order_or_with_extras_copy_by_name():
    """Exactly the flow dtype takes a positional structured copy; any other layout must still copy by name."""
    e = Enricher(read_inventory(EXAMPLE))
    f = flows([("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00")] * 3)
    f["packets"] = [5, 6, 7]
    f["vlan"] = [10, 11, 12]
    names = list(FLOW_DTYPE.names)[::-1]
    shuffled = np.zeros(len(f), dtype=[(n, FLOW_DTYPE.fields[n][0]) for n in names] + [("extra", "i8")])
    for n in names:
        shuffled[n] = f[n]
    a, b = e.enrich(f), e.enrich(shuffled)
    for name in ENRICHED_DTYPE.names:
        assert np.array_equal(a[name], b[name]), name
    assert b["vlan"].tolist() == [10, 11, 12] and b["packets"].tolist() == [5, 6, 7]


def test_labels_jobs_and_categories():
    e = Enricher(read_inventory(EXAMPLE))
    f = flows([
        ("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00"),   # collective, llm-pretrain
        ("10.10.1.11", "10.10.1.12", 17, 50000, 4791, "2026-12-04T10:00:00"),   # rocev2, finetune-a
        ("fd00:10:1::11", "fd00:10:1::12", 6, 45000, 51000, "2026-12-04T00:00:00"),  # IPv6 collective
        ("10.10.2.11", "10.10.8.7", 6, 700, 2049, "2026-12-04T10:00:00"),       # storage subnet, job over
        ("10.10.3.20", "203.0.113.9", 6, 50000, 443, "2026-12-02T10:00:00"),    # model store to the internet
        ("10.10.0.5", "10.10.2.12", 6, 51111, 22, "2026-12-02T10:00:00"),       # ssh
        ("10.10.99.99", "10.10.1.11", 17, 5353, 53, "2026-11-01T00:00:00"),     # unregistered host, dns
        ("198.51.100.4", "10.10.3.20", 6, 50000, 8443, "2026-12-02T10:00:00"),  # authorized external
    ])
    out = e.enrich(f)
    assert out["src_node"].tolist() == [
        "gpu-r1-01", "gpu-r1-01", "gpu-r1-01", "gpu-r2-01", "modelstore-01", "mgmt-01", "", ""]
    assert out["dst_node"].tolist() == [
        "gpu-r2-01", "gpu-r1-02", "gpu-r1-02", "", "", "gpu-r2-02", "gpu-r1-01", "modelstore-01"]
    assert out["src_group"].tolist() == [
        "gpu", "gpu", "gpu", "gpu", "model-store", "mgmt", "unknown", "external-authorized"]
    assert out["dst_group"].tolist() == ["gpu", "gpu", "gpu", "storage", "unknown", "gpu", "gpu", "model-store"]
    assert out["src_rack"].tolist() == ["r1", "r1", "r1", "r2", "r3", "r3", "", ""]
    assert out["dst_rack"].tolist() == ["r2", "r1", "r1", "r3", "", "r2", "r1", "r3"]
    assert out["src_switch"].tolist() == ["tor-r1", "tor-r1", "tor-r1", "tor-r2", "tor-r3", "tor-r3", "", ""]
    assert out["dst_switch"].tolist() == ["tor-r2", "tor-r1", "tor-r1", "tor-r3", "", "tor-r2", "tor-r1", "tor-r3"]
    assert out["src_job"].tolist() == ["llm-pretrain", "finetune-a", "finetune-a", "", "", "", "", ""]
    assert out["dst_job"].tolist() == ["llm-pretrain", "finetune-a", "finetune-a", "", "", "llm-pretrain", "", ""]
    assert out["category"].tolist() == [
        "collective", "rocev2", "collective", "storage", "external", "mgmt", "dns", "external"]
    for col in ("src_node", "src_group", "src_job", "category"):
        assert all(type(v) is str for v in out[col])


def test_unknown_addresses_are_labelled_and_counted_not_dropped():
    e = Enricher(read_inventory(EXAMPLE))
    f = flows([
        ("10.10.1.11", "8.8.8.8", 17, 50000, 53, "2026-12-02T10:00:00"),
        ("1.1.1.1", "2001:db8::1", 6, 1, 2, "2026-12-02T10:00:00"),
        ("10.10.1.11", "10.10.1.12", 6, 45000, 51000, "2026-12-02T10:00:00"),
    ])
    out = e.enrich(f)
    assert len(out) == 3
    assert out["dst_group"].tolist() == ["unknown", "unknown", "gpu"]
    assert out["dst_node"].tolist() == ["", "", "gpu-r1-02"]
    assert out["dst_rack"].tolist() == ["", "", "r1"] and out["dst_switch"].tolist() == ["", "", "tor-r1"]
    assert e.last_unknown == 3 and e.unknown_total == 3
    assert (e.unknown_src_total, e.unknown_dst_total) == (1, 2)
    e.enrich(f[:1])
    assert e.last_unknown == 1 and e.unknown_total == 4 and e.records_total == 4


def test_non_ip_flows_are_other_and_not_counted():
    e = Enricher(read_inventory(EXAMPLE))
    f = empty_flows(2)
    out = e.enrich(f)
    assert out["category"].tolist() == ["other", "other"]
    assert out["src_group"].tolist() == ["unknown", "unknown"]
    assert e.unknown_total == 0


def test_default_enricher_without_inventory():
    e = Enricher()
    out = e.enrich(flows([("10.0.0.1", "10.0.0.2", 6, 45000, 51000, "2026-12-02T10:00:00")]))
    assert out["src_group"][0] == "unknown" and out["category"][0] == "external"
    assert e.unknown_total == 2


def test_rules_and_inventory_swap():
    inv = read_inventory(EXAMPLE)
    e = Enricher(inv, CategoryRules(order=("mgmt",)))
    f = flows([("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00")])
    assert e.enrich(f)["category"][0] == "other"
    e.set_inventory(Inventory.empty())
    assert e.enrich(f)["src_group"][0] == "unknown"
    assert e.unknown_total == 2 and e.records_total == 2


def test_capacity_and_agent_helpers():
    e = Enricher(read_inventory(EXAMPLE))
    caps = e.node_capacity_bps(np.array(["gpu-r1-01", "modelstore-01", "mgmt-01", "nope"], dtype=object))
    assert caps[:3].tolist() == [400e9, 100e9, 25e9] and math.isnan(caps[3])
    assert e.agent_switch[addr16("10.10.255.3")] == "tor-r3"
    assert e.switch_for_agents(addr16_column(["10.10.255.2", "10.10.1.11"])).tolist() == ["tor-r2", ""]
    peer, speed = e.port_info(addr16_column(["10.10.255.2"]), np.array([2]))
    assert peer.tolist() == ["gpu-r2-02"] and speed.tolist() == [400e9]


def test_missing_flow_fields_rejected():
    with pytest.raises(ValueError, match="flows lack fields"):
        Enricher().enrich(np.zeros(1, dtype=[("src_addr", "u1", (16,))]))


def test_large_random_batch_matches_per_record_reference():
    inv = read_inventory(EXAMPLE)
    e = Enricher(inv)
    rng = np.random.default_rng(3)
    pool = ["10.10.1.11", "10.10.1.12", "10.10.2.11", "10.10.2.12", "10.10.3.20", "10.10.0.5", "10.10.8.1",
            "10.10.8.250", "fd00:10:1::11", "fd00:10:1::12", "198.51.100.1", "10.10.77.1", "8.8.8.8"]
    n = 400
    src = [pool[i] for i in rng.integers(0, len(pool), n)]
    dst = [pool[i] for i in rng.integers(0, len(pool), n)]
    days = ["2026-11-20T00:00:00", "2026-12-01T12:00:00", "2026-12-02T23:59:59", "2026-12-05T00:00:00"]
    t = [days[i] for i in rng.integers(0, 4, n)]
    out = e.enrich(flows([(s, d, 6, 45000, 51000, tt) for s, d, tt in zip(src, dst, t)]))
    by_addr = {}
    for node in inv.spec.nodes:
        for a in node.addresses:
            by_addr[a.split("/")[0]] = node
    jobs = inv.spec.jobs
    for i in range(n):
        node = by_addr.get(src[i])
        assert out["src_node"][i] == (node.name if node else "")
        when = datetime.fromisoformat(t[i]).replace(tzinfo=timezone.utc)
        expect_job = ""
        if node:
            for j in jobs:
                started = j.from_ is None or j.from_ <= when
                if node.name in j.nodes and started and (j.until is None or when < j.until):
                    expect_job = j.name
        assert out["src_job"][i] == expect_job


def test_batches_larger_than_internal_chunk():
    from processors.logic.enrich.enricher import CHUNK

    e = Enricher(read_inventory(EXAMPLE))
    base = flows([
        ("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00"),
        ("10.10.2.11", "10.10.8.7", 6, 700, 2049, "2026-12-04T10:00:00"),
        ("10.10.99.99", "8.8.8.8", 17, 5353, 53, "2026-11-01T00:00:00"),
    ])
    big = np.tile(base, CHUNK + 7)
    out = e.enrich(big)
    assert e.last_unknown == 2 * (CHUNK + 7)
    one = Enricher(read_inventory(EXAMPLE)).enrich(base)
    for col in ("src_node", "dst_group", "src_job", "category", "bytes"):
        assert out[col].tolist() == np.tile(one[col], CHUNK + 7).tolist()


LABELS = ("src_node", "dst_node", "src_group", "dst_group", "src_rack", "dst_rack", "src_switch", "dst_switch",
          "src_job", "dst_job", "category")  # fmt: skip


def test_label_codes_give_every_label_column_of_the_last_batch():
    from processors.logic.enrich.enricher import CHUNK

    inv = read_inventory(EXAMPLE)
    e = Enricher(inv)
    base = flows([
        ("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00"),
        ("10.10.1.11", "10.10.1.12", 17, 50000, 4791, "2026-12-04T10:00:00"),
        ("10.10.2.11", "10.10.8.7", 6, 700, 2049, "2026-12-04T10:00:00"),
        ("10.10.99.99", "8.8.8.8", 17, 5353, 53, "2026-11-01T00:00:00"),
    ])
    big = np.tile(base, CHUNK // 2 + 3)  # more than one internal slice
    out = e.enrich(big)
    coded = e.label_codes(out)
    assert sorted(coded) == sorted(LABELS)
    for col, (codes, table) in coded.items():
        assert len(codes) == len(out)
        assert table.strings[codes].tolist() == out[col].tolist(), col
    assert e.label_codes(out) is not None and coded["src_node"][1] is e.label_codes(out)["src_node"][1]  # tables kept
    assert e.label_codes(out.copy()) is None and e.label_codes(out[:3]) is None  # only the array enrich returned
    e.set_inventory(Inventory.empty())
    assert e.label_codes(out)["src_node"][1].strings.tolist() == inv.entry_node.tolist()  # the batch's own inventory
    later = e.enrich(base)
    assert e.label_codes(out) is None
    assert e.label_codes(later)["src_node"][0].tolist() == [0, 0, 0, 0]  # all unknown in the empty inventory
