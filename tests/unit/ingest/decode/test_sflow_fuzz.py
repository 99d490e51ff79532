"""Fuzzing: the sFlow decoder returns a result or raises DecodeError, nothing else."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.decode import DecodeError, TemplateCache
from ingest.decode.reference.packet import parse_ethernet, parse_header
from ingest.decode.sflow import decode_sflow
from ingest.pcapread import read_udp
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE
from tests.support.fixtures_path import SHARED_FIXTURES
from devtools import sflow_build as b

EXPORTS = SHARED_FIXTURES / "exports"


def _golden(n_each: int = 10) -> list[bytes]:
    out = []
    for name in ("pmacct_sfprobe_rate1", "pmacct_sfprobe_rate8"):
        path = EXPORTS / f"{name}.pcap"
        if not path.exists():
            continue
        pkts = [p.payload for p in read_udp(path)]
        step = max(1, len(pkts) // n_each)
        chosen = pkts[::step][:n_each]
        chosen.append(pkts[-1])  # the last datagrams carry the counter samples
        out.extend(chosen)
    fabric = Path(__file__).resolve().parents[3] / "captures" / "pmacct_sfprobe_fabric" / "pmacct_sfprobe_fabric.pcap"
    if fabric.exists():
        pkts = [p.payload for p in read_udp(fabric)]
        out.extend([pkts[0], pkts[5], pkts[12], pkts[-1]])  # VXLAN, QinQ/IPv6 ext, RoCE, counters
    return out


def _hand_built() -> list[bytes]:
    return [
        b.every_sample_kind(),
        b.datagram([  # discarded packet samples (sFlow drop notifications)
            b.discard_sample([b.raw_header(b.eth(b.ipv4(b.udp(1, 4791, b.bth(0x81, 3)), 17))), b.egress_queue(4),
                              b.ext_switch(7)], reason=259, drops=2, in_if=3, out_if=4),
            b.discard_sample([b.sampled_ipv4(60, 6, "10.0.0.1", "10.0.0.2", 5, 6)], source_type=2, reason=999),
        ]),
    ]


GOLDEN = _golden()
HAND = _hand_built()


def _check(data: bytes) -> None:
    try:
        r = decode_sflow(data, "198.51.100.1", 1, TemplateCache())
    except DecodeError as e:
        assert e.protocol == "sflow5"
        assert 0 <= e.offset <= len(data)
        return
    assert r.flows.dtype == FLOW_DTYPE and r.counters.dtype == COUNTER_DTYPE
    assert (r.flows["sampling_rate"] >= 1).all()


def test_golden_sample_present():
    if not EXPORTS.is_dir():
        pytest.skip("shared fixtures not present")
    assert len(GOLDEN) >= 20


@pytest.mark.parametrize("idx", range(len(GOLDEN) + len(HAND)))
def test_truncated_at_every_offset(idx):
    data = (GOLDEN + HAND)[idx]
    full = decode_sflow(data, "x", 1, TemplateCache())
    assert len(full.flows) + len(full.counters) + len(full.discards) > 0
    for cut in range(len(data)):
        _check(data[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_random_bytes(data):
    _check(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.sampled_from([1, 2, 0, 7]))
def test_random_bytes_after_valid_header(tail, atype):
    head = struct.pack(">II", 5, atype) + (b"\x0a\x00\x00\x01" if atype == 1 else b"\x20" * 16 if atype == 2 else b"")
    _check(head + tail)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_datagrams(data):
    corpus = GOLDEN + HAND
    base = bytearray(data.draw(st.sampled_from(corpus)))
    n_mut = data.draw(st.integers(1, 8))
    for _ in range(n_mut):
        pos = data.draw(st.integers(0, len(base) - 1))
        kind = data.draw(st.sampled_from(["byte", "word", "ff"]))
        if kind == "byte":
            base[pos] = data.draw(st.integers(0, 255))
        elif kind == "word" and pos + 4 <= len(base):
            struct.pack_into(">I", base, pos, data.draw(st.sampled_from([0, 1, 3, 4, 0x7FFFFFFF, 0xFFFFFFFF, 1001])))
        else:
            base[pos] = 0xFF
    _check(bytes(base))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([1, 11, 12, 99]))
def test_packet_parser_never_raises(h, proto):
    t = parse_header(h, proto)
    assert t is None or len(t) == 13
    assert len(parse_ethernet(h)) == 13
