"""softflowd NetFlow v9 (shared fixture) and our own v5/v9 captures decoded against tshark figures.

The shared capture is checked record for record against the tshark per-5-tuple
summary and the length-based structure walk; our captures under
``tests/captures/`` against the expected records we extracted from tshark.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

import dpkt
import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from schemas.columns import FLOW_DTYPE, PROTO_NETFLOW5, PROTO_NETFLOW9, addr_str, is_v4_mapped
from tests.support.fixtures_path import SHARED_FIXTURES

EXPORTS = SHARED_FIXTURES / "exports"
SUMMARIES = SHARED_FIXTURES / "summaries"
CAPTURES = Path(__file__).resolve().parents[1] / "captures"
NAME = "softflowd_v9"

needs_shared = pytest.mark.skipif(not (EXPORTS / f"{NAME}.pcap").exists(), reason="shared fixtures not present")


def udp_payloads(path: Path) -> list[tuple[float, str, bytes]]:
    """(timestamp, source address, UDP payload) of every UDP datagram in an Ethernet pcap, in order."""
    out = []
    with open(path, "rb") as fh:
        for ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            if isinstance(ip.data, dpkt.udp.UDP):
                src = ".".join(str(b) for b in ip.src) if len(ip.src) == 4 else None
                out.append((ts, src, bytes(ip.data.data)))
    return out


def key_of(r) -> str:
    proto = int(r["ip_protocol"])
    sp, dp = (0, 0) if proto in (1, 58) else (int(r["src_port"]), int(r["dst_port"]))
    return f"{addr_str(r['src_addr'])}|{addr_str(r['dst_addr'])}|{proto}|{sp}|{dp}"


def per_5tuple(flows) -> dict:
    agg = defaultdict(lambda: [0, 0, 0])
    for r in flows:
        a = agg[key_of(r)]
        a[0] += 1
        a[1] += int(r["packets"])
        a[2] += int(r["bytes"])
    return dict(agg)


def read_csv(path: Path) -> dict:
    with open(path) as fh:
        return {row["key"]: [int(row["records"]), int(row["packets"]), int(row["bytes"])] for row in csv.DictReader(fh)}


def decode_all(datagrams, cache=None):
    cache = cache or TemplateCache()
    return cache, [decode(p, src or "127.0.0.1", int(ts * 1000), cache) for ts, src, p in datagrams]


@pytest.fixture(scope="module")
def v9():
    dgs = udp_payloads(EXPORTS / f"{NAME}.pcap")
    cache, results = decode_all(dgs)
    flows = np.concatenate([r.flows for r in results])
    return dgs, cache, results, flows


@needs_shared
def test_v9_record_for_record(v9):
    _, _, results, flows = v9
    assert flows.dtype == FLOW_DTYPE
    assert len(flows) == 230
    expected = read_csv(SUMMARIES / f"{NAME}.per5tuple.csv")
    got = per_5tuple(flows)
    assert len(got) == 180
    assert got == expected
    assert int(flows["packets"].sum()) == 5771 and int(flows["bytes"].sum()) == 25224419
    assert all(not r.problems for r in results)


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
    truth = {f["key"]: f for f in json.loads((SHARED_FIXTURES / "traffic_truth.json").read_text())["flows"]}
    first, last = {}, {}
    for r in flows:
        k = key_of(r)
        t = truth[k]
        if t["proto"] in (1, 58):
            assert int(r["dst_port"]) == t["icmp_type_code"] and int(r["src_port"]) == 0
        assert t["tcp_flags"] | int(r["tcp_flags"]) == t["tcp_flags"]
        first[k] = min(first.get(k, 1 << 62), int(r["time_start_ms"]))
        last[k] = max(last.get(k, 0), int(r["time_end_ms"]))
    # v9 export time has 1 s resolution: flow times are within a second of the truth.
    for k, t in truth.items():
        assert abs(first[k] - t["first_ts"] * 1000) < 1000, k
        assert abs(last[k] - t["last_ts"] * 1000) < 1000, k


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


def _expected_records(case: str) -> list[dict]:
    return json.loads((CAPTURES / case / "expected.json").read_text())["records"]


def _record_tuple(r) -> tuple:
    return (key_of(r), int(r["packets"]), int(r["bytes"]), int(r["tos"]), int(r["tcp_flags"]), int(r["vlan"]))


def _exp_tuple(e) -> tuple:
    return (e["key"], e["packets"], e["bytes"], e["tos"], e["tcp_flags"], e["vlan"])


@pytest.mark.parametrize("case", ["softflowd_v5", "pmacct_nfprobe_v9"])
def test_own_capture_against_tshark(case):
    pcap = CAPTURES / case / f"{case}.pcap"
    if not pcap.exists():
        pytest.skip(f"capture {case} not present")
    meta = json.loads((CAPTURES / case / "expected.json").read_text())
    cache, results = decode_all(udp_payloads(pcap))
    flows = np.concatenate([r.flows for r in results])
    assert len(results) == meta["datagrams"]
    assert sorted(_record_tuple(r) for r in flows) == sorted(_exp_tuple(e) for e in meta["records"])
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
            got = sorted(zip((_record_tuple(r) for r in flows), flows[col].tolist()))
            exp = sorted(zip((_exp_tuple(e) for e in meta["records"]), (e[k] for e in meta["records"])))
            assert [abs(a[1] - b[1]) <= 1 for a, b in zip(got, exp)] == [True] * len(got)
