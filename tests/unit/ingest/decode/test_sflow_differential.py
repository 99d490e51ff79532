"""Differential tests: the compiled sFlow decoder equals the readable reference exactly.

Compared for every datagram: ``decode_sflow`` (the compiled decoder, one
datagram per call), ``decode_sflow_many`` (the same, many datagrams per call)
and ``decode_sflow_reference`` (``ingest.decode.reference.sflow``, plain
Python, every sampled header parsed by ``ingest.decode.reference.packet``):
flow and counter bytes, dtypes, header, problems, or the DecodeError's
reason, offset and detail. Inputs: the real pmacct captures, the benchmark's
synthetic stream, hypothesis-built sampled headers of random shapes cut at
every length, mutated datagrams and garbage.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.sflow_build import synthetic
from ingest.decode import DecodeError, TemplateCache, decode
from ingest.decode import _sflow_compiled, _sflow_packet
from ingest.decode.reference.packet import parse_ethernet
from ingest.decode.reference.sflow import decode_sflow as decode_sflow_reference
from ingest.decode.sflow import decode_sflow, decode_sflow_many
from ingest.pcapread import read_udp
from tests.support.fixtures_path import SHARED_FIXTURES
from ingest.decode.reference.packet import parse_header
from devtools import sflow_build as b


CAPTURES = Path(__file__).resolve().parents[3] / "captures"
PCAPS = [
    SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate1.pcap",
    SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate8.pcap",
    CAPTURES / "pmacct_sfprobe_fabric" / "pmacct_sfprobe_fabric.pcap",
]


def _outcome(fn, data, exporter="192.0.2.7", t=1_700_000_000_123, cache=None):
    try:
        return fn(data, exporter, t, cache if cache is not None else TemplateCache())
    except DecodeError as e:
        return e


def _assert_same(got, ref):
    if isinstance(ref, DecodeError):
        assert isinstance(got, DecodeError), f"expected {ref}, got a result"
        assert (got.protocol, got.reason, got.offset, got.detail) == (ref.protocol, ref.reason, ref.offset, ref.detail)
        return
    assert not isinstance(got, DecodeError), f"unexpected {got}"
    assert got.flows.dtype == ref.flows.dtype and got.counters.dtype == ref.counters.dtype
    assert got.flows.tobytes() == ref.flows.tobytes()
    assert got.counters.tobytes() == ref.counters.tobytes()
    assert got.header == ref.header
    assert dict(got.problems) == dict(ref.problems)
    # the flow samples' sequence, sample_pool and drops (sampler loss), one row per flow row
    assert got.samples is not None and ref.samples is not None and len(got.samples) == len(got.flows)
    assert got.samples.tobytes() == ref.samples.tobytes()
    assert got.discards.dtype == ref.discards.dtype and got.discards.tobytes() == ref.discards.tobytes()
    assert (got.templates_learned, got.templates_withdrawn) == (ref.templates_learned, ref.templates_withdrawn)


def _check_all(datagrams, cache=None, exporter="192.0.2.7", t=1_700_000_000_123):
    refs = [_outcome(decode_sflow_reference, d, exporter, t, cache) for d in datagrams]
    for d, ref in zip(datagrams, refs):
        _assert_same(_outcome(decode_sflow, d, exporter, t, cache), ref)
    many = decode_sflow_many(datagrams, exporter, t, cache if cache is not None else TemplateCache())
    assert len(many) == len(datagrams)
    for got, ref in zip(many, refs):
        _assert_same(got, ref)
    return refs


def _pcap(path):
    if not path.exists():
        pytest.skip(f"{path.name} not present")
    return [p.payload for p in read_udp(path)]


# ---------------------------------------------------------------- real captures and the bench stream


@pytest.mark.parametrize("path", PCAPS, ids=lambda p: p.stem)
def test_pmacct_captures_identical(path):
    dgrams = _pcap(path)
    refs = _check_all(dgrams)
    assert sum(len(r.flows) for r in refs) > 0
    facts = np.concatenate([r.samples for r in refs if not isinstance(r, DecodeError)])
    assert (facts["pool"] > 0).all() and (facts["seq"] > 0).all()  # the sample headers' facts are read


def test_fabric_capture_exercises_the_odd_header_shapes():
    """The fabric capture holds VXLAN, QinQ / 802.1ad, IPv6 and RoCEv2 samples, so the test above covers them."""
    dgrams = _pcap(PCAPS[2])
    f = np.concatenate([r.flows for r in decode_sflow_many(dgrams, "x", 1, TemplateCache())
                        if not isinstance(r, DecodeError)])
    assert (f["vxlan_vni"] >= 0).any() and (f["ip_version"] == 6).any() and (f["roce_opcode"] >= 0).any()
    assert (f["vlan"] > 0).any()


def test_bench_synthetic_stream_identical():
    dgrams = synthetic(300, 7, seed=3)
    _check_all(dgrams)
    # in mixed batches of varied size, with per-datagram exporters and times
    rng = random.Random(5)
    cache = TemplateCache()
    i = 0
    while i < len(dgrams):
        n = rng.randrange(1, 40)
        part = dgrams[i : i + n]
        ex = [f"10.0.0.{j % 7}" for j in range(len(part))]
        ts = [1_000 + j for j in range(len(part))]
        for d, e, t, got in zip(part, ex, ts, decode_sflow_many(part, ex, ts, cache)):
            _assert_same(got, _outcome(decode_sflow_reference, d, e, t, cache))
        i += n


def test_mixed_batch_with_errors_and_odd_datagrams():
    good = synthetic(6, 5, seed=9)
    odd = [
        b.every_sample_kind(),
        b.datagram([b.flow_sample_expanded([b.raw_header(b.tcp_frame(vlan=7))], in_fmt=1, in_val=5, out_fmt=2,
                                           out_val=3, source_type=2, source_index=77)]),
        b.datagram([b.flow_sample([b.raw_header(b.tcp_frame(), header_len=200)])]),
        b.datagram([b.flow_sample([b.raw_header(b.tcp_frame()[:20], proto=11)])]),
        b.datagram([b.counter_sample([b.ethernet_counters(1)])]),
        b.datagram([b.flow_sample([])]),
        b.datagram([], agent="10.1.1.1"),
        b.datagram([b.flow_sample([b.raw_header(b.tcp_frame())], rate=0xFFFFFFFF, )]),
        b"", b"\x00\x00\x00\x05", b"\x00\x00\x00\x05\x00\x00\x00\x03" + b"\x00" * 40, b"\x00\x00\x00\x04" * 8,
    ]
    rng = random.Random(1)
    for _ in range(20):
        batch = good + odd + [good[0][: rng.randrange(len(good[0]))], odd[0][: rng.randrange(len(odd[0]))]]
        rng.shuffle(batch)
        _check_all(batch)
    cache = TemplateCache(sampling_overrides={"192.0.2.7": 512})
    _check_all(odd, cache=cache)


# ---------------------------------------------------------------- hypothesis: sampled header shapes

_TPIDS = st.sampled_from([0x8100, 0x8100, 0x88A8, 0x9100, 0x0800, 0x1234])


@st.composite
def _l4(draw, proto):
    sport = draw(st.sampled_from([1, 53, 4789, 4791, 40000, 65535]) | st.integers(0, 65535))
    dport = draw(st.sampled_from([80, 4789, 4791, 2049, 29400]) | st.integers(0, 65535))
    if proto == 6:
        return b.tcp(sport, dport, draw(st.integers(0, 255)), draw(st.binary(max_size=20)))
    if proto == 17:
        if dport == 4791:
            body = b.bth(draw(st.integers(0, 255)), draw(st.integers(0, (1 << 24) - 1)))
        elif dport == 4789:
            body = b.vxlan(draw(st.integers(0, (1 << 24) - 1)), draw(_frame(depth=1)))
        else:
            body = draw(st.binary(max_size=20))
        return b.udp(sport, dport, body)
    if proto in (1, 58):
        return b.icmp(draw(st.integers(0, 255)), draw(st.integers(0, 255)))
    return draw(st.binary(max_size=24))


@st.composite
def _frame(draw, depth=0):
    proto = draw(st.sampled_from([6, 6, 17, 17, 1, 58, 132, 47]))
    l4 = draw(_l4(proto)) if depth < 2 else draw(st.binary(max_size=16))
    kind = draw(st.sampled_from(["v4", "v4", "v6", "v6x", "raw"]))
    if kind == "v4":
        opts = draw(st.sampled_from([b"", b"", b"\x01\x01\x01\x00"]))
        frag = draw(st.sampled_from([0, 0, 0x4000, 0x2000, 0x0001, 0x1FFF]))
        pkt = b.ipv4(l4, proto, "10.1.2.3", "10.4.5.6", tos=draw(st.integers(0, 255)),
                     total_len=draw(st.none() | st.integers(0, 65535)), frag=frag, options=opts)
        if draw(st.integers(0, 9)) == 0:
            pkt = bytes([draw(st.integers(0, 255))]) + pkt[1:]
        et = 0x0800
    elif kind in ("v6", "v6x"):
        ext = []
        if kind == "v6x":
            ext = draw(st.lists(st.sampled_from([(0, b.ext_hbh(0)), (60, b.ext_hbh(1)), (43, b.ext_hbh(0)),
                                                 (44, b.ext_frag(0)), (44, b.ext_frag(3)), (51, b.ext_ah(4))]),
                                max_size=3))
        pkt = b.ipv6(l4, proto, "fd00::1", "fd00:2::9", tc=draw(st.integers(0, 255)),
                     payload_len=draw(st.none() | st.integers(0, 65535)), ext=ext)
        if draw(st.integers(0, 9)) == 0:
            pkt = bytes([draw(st.integers(0, 255))]) + pkt[1:]
        et = 0x86DD
    else:
        pkt = draw(st.binary(max_size=60))
        et = draw(st.sampled_from([0x0806, 0x8847, 0x0800, 0x86DD]))
    tags = draw(st.lists(st.tuples(_TPIDS, st.integers(0, 4095)), max_size=3))
    return b.eth(pkt, et, tags)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_frame())
def test_compiled_header_parse_equals_walker_at_every_length(frame):
    frame = frame[:160]
    pad = frame + b"\xAB" * 100  # bytes after the header end must not be read
    for cut in range(len(frame) + 1):
        ref = parse_ethernet(frame[:cut], 0, 0)
        assert _sflow_packet.parse_header(pad, cut, 1) == ref, cut
        for proto, l3 in ((11, 14), (12, 14)):  # the same bytes as a header that starts at the IP layer
            if cut >= l3:
                assert _sflow_packet.parse_header(pad[l3:], cut - l3, proto) == parse_header(frame[l3:cut], proto)


def test_two_raw_header_records_in_a_sample_identical():
    """Only the last raw header record of a sample makes the row, but every record's problems count
    (hypothesis found the batch path missing an earlier non-Ethernet record's problem)."""
    frame = b.eth(b.ipv4(b.udp(5000, 4791, bytes(20)), 17))
    two = [b.raw_header(frame[14:], proto=5), b.raw_header(frame)]  # first: header protocol 5, unsupported
    dgrams = [b.datagram([b.flow_sample(two)] + [b.flow_sample([b.raw_header(frame)])] * 3, seq=i) for i in range(48)]
    refs = _check_all(dgrams)
    assert dict(refs[0].problems) == {"unsupported_header_protocol": 1} and len(refs[0].flows) == 4


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_frame(), st.integers(0, 200), st.sampled_from([1, 1, 1, 11, 12, 5]),
                          st.sampled_from([0, 0, 110, 4095, 0x1001])), min_size=1, max_size=12),
       st.integers(0, 3))
def test_random_headers_cut_anywhere_identical(items, shift):
    samples = []
    for frame, cut, hproto, vlan in items:
        hdr = frame[: max(0, len(frame) - cut)][:128]
        payload = hdr if hproto == 1 else hdr[14 + 4 * shift % 8 :]
        recs = [b.raw_header(payload, proto=hproto, frame_length=len(frame) + 4)]
        if vlan:
            recs.insert(shift % 2, b.ext_switch(vlan))
        samples.append(b.flow_sample(recs, rate=1 + shift * 1000, in_if=shift, out_if=0x3FFFFFFF))
    dgrams = [b.datagram(samples[i : i + 4], seq=i) for i in range(0, len(samples), 4)]
    _check_all(dgrams)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_datagrams_identical(data):
    corpus = synthetic(4, 5, seed=data.draw(st.integers(0, 3)))
    batch = []
    for base in corpus:
        buf = bytearray(base)
        for _ in range(data.draw(st.integers(0, 6))):
            pos = data.draw(st.integers(0, len(buf) - 1))
            kind = data.draw(st.sampled_from(["byte", "word", "cut"]))
            if kind == "byte":
                buf[pos] = data.draw(st.integers(0, 255))
            elif kind == "word" and pos + 4 <= len(buf):
                struct.pack_into(">I", buf, pos, data.draw(st.sampled_from([0, 1, 2, 3, 4, 16, 1001, 1002, 0xFFFFFFFF])))
            else:
                del buf[pos:]
                break
        batch.append(bytes(buf))
    _check_all(batch)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=5), st.sampled_from([0, 1, 2, 5]))
def test_garbage_identical(tails, atype):
    head = struct.pack(">II", 5, atype) + (b"\x0a\x00\x00\x01" if atype == 1 else b"\x20" * 16 if atype == 2 else b"")
    _check_all([head + t for t in tails] + tails)


def test_truncated_at_every_length_identical():
    base = synthetic(2, 3, seed=11)[1]
    _check_all([base[:cut] for cut in range(len(base) + 1)])


def test_compiled_rows_have_the_dtypes_layout():
    """The compiled decoder's row structs are checked against the dtypes; a changed dtype is refused."""
    from ingest.decode.result import DISCARD_DTYPE, SAMPLE_DTYPE
    from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE

    flows, samples, counters = np.zeros(1, FLOW_DTYPE), np.zeros(1, SAMPLE_DTYPE), np.zeros(1, COUNTER_DTYPE)
    discards = np.zeros(1, DISCARD_DTYPE)
    assert _sflow_compiled.check_layouts(flows, samples, counters, discards)
    wrong = np.dtype([(n, "<i4" if n == "bytes" else FLOW_DTYPE.fields[n][0]) for n in FLOW_DTYPE.names])
    with pytest.raises(ValueError):
        _sflow_compiled.check_layouts(np.zeros(1, wrong), samples, counters, discards)
    wrong_d = np.dtype([(n, "<i8" if n == "reason" else DISCARD_DTYPE.fields[n][0]) for n in DISCARD_DTYPE.names])
    with pytest.raises(ValueError):
        _sflow_compiled.check_layouts(flows, samples, counters, np.zeros(1, wrong_d))


def _discard_datagram() -> bytes:
    roce = b.eth(b.ipv6(b.udp(7, 4791, b.bth(0x81, 9)), 17), 0x86DD, [(0x8100, 12)])
    return b.datagram([
        b.flow_sample([b.raw_header(b.tcp_frame())], rate=50),
        b.discard_sample([b.raw_header(roce), b.egress_queue(6), b.ext_switch(12), b.ext_router()], reason=259,
                         drops=1, in_if=3, out_if=9),
        b.discard_sample([b.sampled_ipv4(60, 17, "10.0.0.1", "10.0.0.2", 5, 4791), b.record(1042, b"x")],
                         source_type=2, source_index=5, reason=0xFFFFFFFF),
        b.counter_sample([b.generic_counters(if_index=9)]),
    ], seq=3)


def test_discards_identical_at_every_length_and_mutated():
    base = _discard_datagram()
    _check_all([base[:cut] for cut in range(len(base) + 1)])
    rnd = random.Random(5)
    mutated = []
    for _ in range(300):
        buf = bytearray(base)
        pos = rnd.randrange(0, len(buf) - 4) & ~3
        struct.pack_into(">I", buf, pos, rnd.choice([0, 1, 5, 8, 31, 32, 1036, 0xFFFFFFFF, rnd.getrandbits(32)]))
        mutated.append(bytes(buf))
    _check_all(mutated)


def test_dispatch_uses_compiled_decoder():
    d = synthetic(1, 7)[0]
    _assert_same(decode(d, "x", 1, TemplateCache()), decode_sflow_reference(d, "x", 1, TemplateCache()))
