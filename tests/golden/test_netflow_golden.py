"""softflowd NetFlow v9 (shared fixture) and our own v5/v9 captures decoded against tshark figures.

The shared capture is checked record for record against the tshark per-5-tuple
summary and the length-based structure walk; our captures under
``tests/captures/`` against the expected records we extracted from tshark.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from schemas.columns import PROTO_NETFLOW5, PROTO_NETFLOW9, addr_str, is_v4_mapped
from tests.support.golden import CAPTURES, EXPORTS, SUMMARIES, assert_per_5tuple_matches_tshark, decode_all
from tests.support.golden import decode_export, exp_tuple, key_of, needs_export, per_5tuple, read_csv, record_tuple
from tests.support.golden import times_off_truth, traffic_truth, udp_payloads

NAME = "softflowd_v9"

needs_shared = needs_export(NAME)


@pytest.fixture(scope="module")
def v9():
    return decode_export(NAME)


@needs_shared
def test_v9_record_for_record(v9):
    _, _, results, flows = v9
    assert_per_5tuple_matches_tshark(NAME, results, flows, records=230, keys=180)
    assert int(flows["packets"].sum()) == 5771 and int(flows["bytes"].sum()) == 25224419


@needs_shared
def test_v9_structure_and_header(v9):
    dgs, cache, results, flows = v9
    structure = json.loads((SUMMARIES / f"{NAME}.structure.json").read_text())
    assert len(results) == structure["datagrams"] == 10
    assert [len(r.flows) for r in results] == [d["data_records"] for d in structure["per_datagram"]]
    assert sum(r.templates_learned for r in results) == structure["template_records"] == 5
    assert {k[3]: cache.peek(k).kind for k in cache.keys()} == {
        1024: "data", 1025: "data", 2048: "data", 2049: "data", 256: "options"
    }
    assert cache.learned_total == 5 and len(cache) == 5
    h = [r.header for r in results]
    assert [x.sequence for x in h] == list(range(1, 11))
    assert all(x.increment == 1 and x.protocol == "netflow9" and x.domain == 0 for x in h)
    summary = json.loads((SUMMARIES / f"{NAME}.summary.json").read_text())
    assert min(x.uptime_ms for x in h) / 1000 == summary["header"]["sysuptime_s_min"]
    assert max(x.uptime_ms for x in h) / 1000 == summary["header"]["sysuptime_s_max"]


@needs_shared
def test_v9_columns(v9):
    _, _, _, flows = v9
    assert (flows["export_protocol"] == PROTO_NETFLOW9).all()
    # options record: SAMPLING_INTERVAL 1 -> rate 1, estimates equal raw counters
    assert (flows["sampling_rate"] == 1).all()
    assert (flows["bytes_est"] == flows["bytes"]).all() and (flows["packets_est"] == flows["packets"]).all()
    assert Counter(flows["ip_version"].tolist()) == {4: 190, 6: 40}
    v4 = flows["ip_version"] == 4
    assert is_v4_mapped(flows["src_addr"][v4]).all() and is_v4_mapped(flows["dst_addr"][v4]).all()
    assert not is_v4_mapped(flows["src_addr"][~v4]).any()
    assert all(addr_str(a) == "127.0.0.1" for a in flows["exporter_addr"][:3])
    assert (flows["vxlan_vni"] == -1).all() and (flows["roce_opcode"] == -1).all()
    assert set(flows["direction"].tolist()) <= {0, 1}


@needs_shared
def test_v9_icmp_and_times_against_truth(v9):
    _, _, _, flows = v9
    truth = traffic_truth()
    for r in flows:
        t = truth[key_of(r)]
        if t["proto"] in (1, 58):
            assert int(r["dst_port"]) == t["icmp_type_code"] and int(r["src_port"]) == 0
        assert t["tcp_flags"] | int(r["tcp_flags"]) == t["tcp_flags"]
    # v9 export time has 1 s resolution: flow times are within a second of the truth.
    assert times_off_truth(flows, truth, 1000) == []


@needs_shared
def test_v9_data_before_template():
    """Datagrams 2..10 first (all held), then the template datagram releases them."""
    dgs = udp_payloads(EXPORTS / f"{NAME}.pcap")
    cache = TemplateCache(pending_hold_s=60)
    held = [decode(p, "127.0.0.1", 1000, cache) for _, _, p in dgs[1:]]
    assert all(len(r.flows) == 0 and not r.problems for r in held)
    assert cache.pending_count() == sum(len(d["sets"]) for d in json.loads(
        (SUMMARIES / f"{NAME}.structure.json").read_text())["per_datagram"][1:])
    r = decode(dgs[0][2], "127.0.0.1", 2000, cache)
    assert len(r.flows) == 230 and cache.pending_count() == 0
    assert per_5tuple(r.flows) == read_csv(SUMMARIES / f"{NAME}.per5tuple.csv")
    assert (r.flows["sampling_rate"] == 1).all() and not r.problems
    assert set(r.flows["time_received_ms"].tolist()) == {1000, 2000}


@needs_shared
def test_v9_pending_expires():
    dgs = udp_payloads(EXPORTS / f"{NAME}.pcap")
    cache = TemplateCache(pending_hold_s=5)
    decode(dgs[1][2], "127.0.0.1", 1000, cache)
    assert cache.pending_count() == 2
    r = decode(dgs[0][2], "127.0.0.1", 7000, cache)
    assert r.problems["pending_expired"] == 2
    assert len(r.flows) == 16 and cache.pending_expired_total == 2


@pytest.mark.parametrize("case", ["softflowd_v5", "pmacct_nfprobe_v9"])
def test_own_capture_against_tshark(case):
    pcap = CAPTURES / case / f"{case}.pcap"
    if not pcap.exists():
        pytest.skip(f"capture {case} not present")
    meta = json.loads((CAPTURES / case / "expected.json").read_text())
    cache, results = decode_all(udp_payloads(pcap))
    flows = np.concatenate([r.flows for r in results])
    assert len(results) == meta["datagrams"]
    assert sorted(record_tuple(r) for r in flows) == sorted(exp_tuple(e) for e in meta["records"])
    assert Counter(flows["ip_version"].tolist()) == Counter({int(k): v for k, v in meta["ip_versions"].items()})
    if case == "softflowd_v5":
        assert (flows["export_protocol"] == PROTO_NETFLOW5).all()
        assert [r.header.sequence for r in results] == meta["sequences"]
        seqs = [r.header.sequence + r.header.increment for r in results]
        assert seqs[:-1] == [r.header.sequence for r in results][1:]
        # softflowd v5 carries no sampling interval: counted, rate 1
        assert all(r.problems["sampling_rate_missing"] == 1 for r in results)
    else:
        assert (flows["export_protocol"] == PROTO_NETFLOW9).all()
    for k in ("first_ms", "last_ms"):
        if k in meta["records"][0]:
            col = "time_start_ms" if k == "first_ms" else "time_end_ms"
            got = sorted(zip((record_tuple(r) for r in flows), flows[col].tolist()))
            exp = sorted(zip((exp_tuple(e) for e in meta["records"]), (e[k] for e in meta["records"])))
            assert [abs(a[1] - b[1]) <= 1 for a, b in zip(got, exp)] == [True] * len(got)
