"""Golden decoding against tshark figures and the shared traffic truth: capture readers, per-5-tuple keys and
summaries, and the check of flow times against the truth (used by tests/golden/)."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import dpkt
import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from schemas.columns import FLOW_DTYPE, addr_str
from tests.support.fixtures_path import SHARED_FIXTURES

EXPORTS = SHARED_FIXTURES / "exports"
SUMMARIES = SHARED_FIXTURES / "summaries"
#: our own captures with the expected records extracted from tshark
CAPTURES = Path(__file__).resolve().parents[1] / "captures"


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


def needs_export(name: str):
    """Skip unless the shared fixture's export capture ``name``.pcap is present."""
    return pytest.mark.skipif(not (EXPORTS / f"{name}.pcap").exists(), reason="shared fixtures not present")


def decode_export(name: str):
    """(datagrams, template cache, results, all flows) of the shared fixture's export capture ``name``.pcap."""
    dgs = udp_payloads(EXPORTS / f"{name}.pcap")
    cache, results = decode_all(dgs)
    return dgs, cache, results, np.concatenate([r.flows for r in results])


def assert_per_5tuple_matches_tshark(name: str, results, flows, records: int, keys: int) -> None:
    """Every record decoded, ``records`` of them over ``keys`` 5-tuples, and per 5-tuple the records, packets
    and bytes of tshark's summary of export capture ``name``."""
    assert flows.dtype == FLOW_DTYPE and len(flows) == records
    got = per_5tuple(flows)
    assert len(got) == keys
    assert got == read_csv(SUMMARIES / f"{name}.per5tuple.csv")
    assert all(not r.problems for r in results)


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


def record_tuple(r) -> tuple:
    """A decoded record as the expected.json records of tests/captures/ list it (times aside)."""
    return (key_of(r), int(r["packets"]), int(r["bytes"]), int(r["tos"]), int(r["tcp_flags"]), int(r["vlan"]))


def exp_tuple(e) -> tuple:
    return (e["key"], e["packets"], e["bytes"], e["tos"], e["tcp_flags"], e["vlan"])


def traffic_truth() -> dict[str, dict]:
    """The shared fixture's input flows by 5-tuple key (traffic_truth.json)."""
    return {f["key"]: f for f in json.loads((SHARED_FIXTURES / "traffic_truth.json").read_text())["flows"]}


def times_off_truth(flows, truth: dict[str, dict], tolerance_ms: int) -> list[str]:
    """Truth keys whose first record start or last record end (over ``flows``) is ``tolerance_ms`` or more away
    from the truth's first_ts / last_ts; a key without records counts as off."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for r in flows:
        k = key_of(r)
        first[k] = min(first.get(k, 1 << 62), int(r["time_start_ms"]))
        last[k] = max(last.get(k, 0), int(r["time_end_ms"]))
    return [k for k, t in truth.items()
            if k not in first or abs(first[k] - t["first_ts"] * 1000) >= tolerance_ms
            or abs(last[k] - t["last_ts"] * 1000) >= tolerance_ms]
