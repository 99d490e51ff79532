"""softflowd IPFIX (shared fixture) and our pmacct nfprobe IPFIX capture decoded against tshark figures."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from schemas.columns import PROTO_IPFIX, is_v4_mapped
from tests.support.golden import CAPTURES, EXPORTS, SUMMARIES, assert_per_5tuple_matches_tshark, decode_all
from tests.support.golden import decode_export, exp_tuple, key_of, needs_export, per_5tuple, read_csv, record_tuple
from tests.support.golden import times_off_truth, traffic_truth, udp_payloads

NAME = "softflowd_ipfix"

needs_shared = needs_export(NAME)


@pytest.fixture(scope="module")
def ipfix():
    return decode_export(NAME)


@needs_shared
def test_ipfix_record_for_record(ipfix):
    _, _, results, flows = ipfix
    assert_per_5tuple_matches_tshark(NAME, results, flows, records=230, keys=180)


@needs_shared
def test_ipfix_structure_header_templates(ipfix):
    _, cache, results, _ = ipfix
    structure = json.loads((SUMMARIES / f"{NAME}.structure.json").read_text())
    assert [len(r.flows) for r in results] == [d["data_records"] for d in structure["per_datagram"]]
    assert sum(r.templates_learned for r in results) == structure["template_records"] == 5
    assert {k[3]: cache.peek(k).kind for k in cache.keys()} == {
        1024: "data", 1025: "data", 2048: "data", 2049: "data", 256: "options"
    }
    opts = cache.peek(("127.0.0.1", 10, 0, 256))
    assert opts.scope_count == 1 and [f[0] for f in opts.fields] == [143, 160, 305, 306, 304, 82]
    h = [r.header for r in results]
    summary = json.loads((SUMMARIES / f"{NAME}.summary.json").read_text())
    assert h[0].sequence == summary["header"]["sequence_min"] and h[-1].sequence == summary["header"]["sequence_max"]
    # softflowd's sequence counts records including this message's: seq[i] - seq[i-1] == increment[i]
    assert [b.sequence - a.sequence for a, b in zip(h, h[1:])] == [x.increment for x in h[1:]]
    assert all(x.protocol == "ipfix" and x.domain == 0 for x in h)
    state = cache.sampling_state("127.0.0.1", 10, 0)
    assert state.default_rate == 1 and state.system_init_ms is not None


@needs_shared
def test_ipfix_columns_and_times(ipfix):
    _, _, _, flows = ipfix
    assert (flows["export_protocol"] == PROTO_IPFIX).all()
    assert (flows["sampling_rate"] == 1).all() and (flows["bytes_est"] == flows["bytes"]).all()
    assert Counter(flows["ip_version"].tolist()) == {4: 190, 6: 40}
    v4 = flows["ip_version"] == 4
    assert is_v4_mapped(flows["dst_addr"][v4]).all() and not is_v4_mapped(flows["dst_addr"][~v4]).any()
    truth = traffic_truth()
    for r in flows:
        t = truth[key_of(r)]
        if t["proto"] in (1, 58):
            assert int(r["dst_port"]) == t["icmp_type_code"] and int(r["src_port"]) == 0
    # flowStart/EndSysUpTime + systemInitTimeMilliseconds: ms-exact up to exporter rounding
    assert times_off_truth(flows, truth, 5) == []


@needs_shared
def test_ipfix_data_before_template():
    dgs = udp_payloads(EXPORTS / f"{NAME}.pcap")
    cache = TemplateCache()
    held = [decode(p, "127.0.0.1", 500, cache) for _, _, p in reversed(dgs[1:])]
    assert all(len(r.flows) == 0 for r in held) and cache.pending_count() > 0
    r = decode(dgs[0][2], "127.0.0.1", 900, cache)
    assert len(r.flows) == 230 and not r.problems and cache.pending_count() == 0
    assert per_5tuple(r.flows) == read_csv(SUMMARIES / f"{NAME}.per5tuple.csv")
    # held records get the system init time learned with the template
    assert r.flows["time_start_ms"].min() > 1_700_000_000_000
    assert r.header.increment == 16


def test_pmacct_ipfix_capture_against_tshark():
    case = "pmacct_nfprobe_ipfix"
    pcap = CAPTURES / case / f"{case}.pcap"
    if not pcap.exists():
        pytest.skip("capture not present")
    meta = json.loads((CAPTURES / case / "expected.json").read_text())
    cache, results = decode_all(udp_payloads(pcap))
    flows = np.concatenate([r.flows for r in results])
    assert len(results) == meta["datagrams"] and len(flows) == meta["totals"]["records"]
    assert sorted(record_tuple(r) for r in flows) == sorted(exp_tuple(e) for e in meta["records"])
    assert sorted(zip(flows["src_port"].tolist(), flows["dst_port"].tolist())) == sorted(
        (e["src_port"], e["dst_port"]) for e in meta["records"])
    assert {int(v) for v in flows["vlan"]} == {0, 110, 210}
    assert Counter(flows["ip_version"].tolist()) == Counter({int(k): v for k, v in meta["ip_versions"].items()})
    got = sorted((record_tuple(r), int(r["time_start_ms"]), int(r["time_end_ms"])) for r in flows)
    exp = sorted((exp_tuple(e), e["first_ms"], e["last_ms"]) for e in meta["records"])
    assert got == exp
    assert (flows["export_protocol"] == PROTO_IPFIX).all()
