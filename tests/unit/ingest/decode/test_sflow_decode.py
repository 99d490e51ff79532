"""sFlow v5 datagram decoding on hand-built datagrams (what real exporters rarely emit)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ingest.decode import DecodeError, TemplateCache, decode
from ingest.decode.sflow import decode_sflow
from ingest.decode.sflow import decode_sflow_many
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, PROTO_SFLOW5, addr_str
from devtools import sflow_build as b

T = 1_700_000_000_000


def dec(dgram, templates=None, exporter="192.0.2.9"):
    return decode(dgram, exporter, T, templates if templates is not None else TemplateCache())


def test_basic_flow_sample_columns():
    frame = b.tcp_frame("10.30.0.1", "10.30.0.2", 40000, 29400, flags=0x10, size=9000, tos=2)
    d = b.datagram(
        [b.flow_sample([b.ext_switch(0), b.raw_header(frame)], rate=100, source_type=0, source_index=7, in_if=3,
                       out_if=0x3FFFFFFF)],
        agent="10.254.1.1", sub_agent=4, seq=42, uptime=12345,
    )
    r = dec(d)
    assert r.header.protocol == "sflow5" and r.header.exporter == "10.254.1.1"
    assert (r.header.domain, r.header.sequence, r.header.increment, r.header.uptime_ms) == (4, 42, 1, 12345)
    assert r.header.export_time_ms is None
    f = r.flows
    assert f.dtype == FLOW_DTYPE and len(f) == 1 and len(r.counters) == 0
    row = f[0]
    assert row["export_protocol"] == PROTO_SFLOW5
    assert addr_str(row["exporter_addr"]) == "10.254.1.1"  # agent, not the UDP source
    assert (row["observation_domain"], row["sampler_id"], row["sampling_rate"]) == (4, 7, 100)
    assert (row["bytes"], row["packets"], row["bytes_est"], row["packets_est"]) == (9000, 1, 900000, 100)
    assert (addr_str(row["src_addr"]), addr_str(row["dst_addr"])) == ("10.30.0.1", "10.30.0.2")
    assert (row["src_port"], row["dst_port"], row["ip_protocol"], row["tcp_flags"], row["tos"]) == (40000, 29400, 6,
                                                                                                  0x10, 2)
    assert (row["in_if"], row["out_if"], row["vlan"], row["ip_version"]) == (3, 0x3FFFFFFF, 0, 4)
    for col in ("time_start_ms", "time_end_ms", "time_received_ms", "time_export_ms"):
        assert row[col] == T
    assert (row["vxlan_vni"], row["roce_opcode"], row["roce_dest_qp"]) == (-1, -1, -1)
    assert not r.problems


def test_ipv6_agent_and_source_id():
    d = b.datagram([b.flow_sample([b.raw_header(b.tcp_frame())], source_type=2, source_index=0x10203)],
                   agent="2001:db8::1", sub_agent=9)
    r = dec(d)
    assert r.header.exporter == "2001:db8::1"
    assert addr_str(r.flows[0]["exporter_addr"]) == "2001:db8::1"
    assert r.flows[0]["sampler_id"] == (2 << 24) | 0x10203
    assert r.flows[0]["observation_domain"] == 9


def test_expanded_flow_sample_and_ifindex_formats():
    frame = b.tcp_frame(size=700)
    d = b.datagram([
        b.flow_sample_expanded([b.raw_header(frame)], source_type=3, source_index=0x1000000, rate=512,
                               in_fmt=0, in_val=0x12345678, out_fmt=0, out_val=0x3FFFFFFF),
        b.flow_sample_expanded([b.raw_header(frame)], in_fmt=1, in_val=258, out_fmt=2, out_val=7),
        # compact format: discarded (format 1) and multiple interfaces (format 2)
        b.flow_sample([b.raw_header(frame)], in_if=(1 << 30) | 3, out_if=(2 << 30) | 4),
    ])
    r = dec(d)
    f = r.flows
    assert len(f) == 3
    # expanded source id index has 32 bits on the wire; the column keeps type<<24 | low 24 bits
    assert f[0]["sampler_id"] == (3 << 24) and f[0]["sampling_rate"] == 512
    assert (f[0]["in_if"], f[0]["out_if"]) == (0x12345678, 0x3FFFFFFF)
    assert (f[1]["in_if"], f[1]["out_if"]) == ((1 << 30) | 258, (2 << 30) | 7)
    assert (f[2]["in_if"], f[2]["out_if"]) == ((1 << 30) | 3, (2 << 30) | 4)
    assert (f["bytes"] == 700).all()


def test_counter_samples_generic_and_ethernet():
    big = (1 << 64) - 5  # u64 counter above 2^63: same 64 bits, reads negative
    d = b.datagram([
        b.counter_sample([b.generic_counters(if_index=5, if_type=6, if_speed=400_000_000_000, if_direction=1,
                                             if_status=3, in_octets=big, in_ucast_pkts=77, in_errors=2,
                                             out_octets=123, out_discards=9, promiscuous=1),
                          b.ethernet_counters(*range(1, 14))], seq=11, source_index=5),
        b.counter_sample_expanded([b.generic_counters(if_index=6, if_status=1)], seq=12, source_type=0,
                                  source_index=6),
        b.counter_sample([b.ethernet_counters(1)], seq=13),  # no generic record: no row
    ], agent="10.1.1.1", sub_agent=2, uptime=999)
    r = dec(d)
    c = r.counters
    assert c.dtype == COUNTER_DTYPE and len(c) == 2 and len(r.flows) == 0
    assert r.problems["counter_sample_without_generic"] == 1
    a = c[0]
    assert addr_str(a["exporter_addr"]) == "10.1.1.1"
    assert (a["observation_domain"], a["source_id"], a["sample_sequence"], a["agent_uptime_ms"]) == (2, 5, 11, 999)
    assert (a["if_index"], a["if_type"], a["if_speed"], a["if_direction"]) == (5, 6, 400_000_000_000, 1)
    assert a["if_admin_up"] and a["if_oper_up"]
    assert int(a["in_octets"]) & 0xFFFFFFFFFFFFFFFF == big
    assert (a["in_ucast_pkts"], a["in_errors"], a["out_octets"], a["out_discards"], a["promiscuous"]) == (77, 2, 123,
                                                                                                          9, 1)
    assert a["has_ethernet"]
    assert a["dot3_alignment_errors"] == 1 and a["dot3_symbol_errors"] == 13 and a["dot3_frame_too_longs"] == 11
    e = c[1]
    assert (e["if_index"], e["sample_sequence"], e["source_id"]) == (6, 12, 6)
    assert e["if_admin_up"] and not e["if_oper_up"] and not e["has_ethernet"]
    assert a["time_received_ms"] == T


def test_sampled_ipv4_and_ipv6_records():
    d = b.datagram([
        b.flow_sample([b.sampled_ipv4(1400, 6, "10.0.0.1", "10.0.0.9", 1111, 2222, flags=0x18, tos=0x20)], rate=10),
        b.flow_sample([b.sampled_ipv6(900, 17, "fd00::1", "fd00::2", 3333, 4791, priority=5)], rate=10),
        b.flow_sample([b.sampled_ipv4(84, 1, "10.0.0.1", "10.0.0.2", 8, 0)]),
        # raw header wins over a sampled IPv4 record in the same sample
        b.flow_sample([b.sampled_ipv4(1, 17, "1.1.1.1", "2.2.2.2", 1, 2),
                       b.raw_header(b.tcp_frame("10.5.5.5", "10.6.6.6", size=333))]),
    ])
    f = dec(d).flows
    assert (f[0]["ip_version"], addr_str(f[0]["src_addr"]), f[0]["dst_port"], f[0]["tcp_flags"], f[0]["tos"]) == (
        4, "10.0.0.1", 2222, 0x18, 0x20)
    assert (f[0]["bytes"], f[0]["bytes_est"]) == (1400, 14000)
    assert (f[1]["ip_version"], addr_str(f[1]["dst_addr"]), f[1]["ip_protocol"], f[1]["bytes"], f[1]["tos"]) == (
        6, "fd00::2", 17, 900, 5)
    assert (f[2]["ip_protocol"], f[2]["src_port"], f[2]["dst_port"]) == (1, 0, 8 * 256)
    assert (addr_str(f[3]["src_addr"]), f[3]["bytes"]) == ("10.5.5.5", 333)


def test_ipv4_and_ipv6_header_protocols():
    v4 = b.ipv4(b.udp(1, 2), 17, "10.0.0.1", "10.0.0.2", total_len=200)
    v6 = b.ipv6(b.tcp(3, 4), 6, "fd00::1", "fd00::2", payload_len=100)
    d = b.datagram([b.flow_sample([b.raw_header(v4, proto=11, stripped=0)]),
                    b.flow_sample([b.raw_header(v6, proto=12, stripped=0)])])
    f = dec(d).flows
    assert (f[0]["ip_version"], f[0]["bytes"], f[0]["dst_port"]) == (4, 200, 2)
    assert (f[1]["ip_version"], f[1]["bytes"], f[1]["src_port"]) == (6, 140, 3)


def test_unsupported_header_protocol_and_non_ip():
    arp = b.eth(b"\x00" * 28, 0x0806)
    d = b.datagram([b.flow_sample([b.raw_header(arp, frame_length=64, stripped=4)], rate=2),
                    b.flow_sample([b.raw_header(b"\x00" * 40, proto=7, frame_length=100, stripped=0)])])
    r = dec(d)
    f = r.flows
    assert (f[0]["ip_version"], f[0]["bytes"], f[0]["bytes_est"]) == (0, 60, 120)
    assert (f[1]["ip_version"], f[1]["bytes"]) == (0, 100)
    assert r.problems["unsupported_header_protocol"] == 1


def test_switch_vlan_qinq_vxlan_roce_in_one_datagram():
    qinq = b.eth(b.ipv4(b.udp(1, 53), 17), 0x0800, [(0x88A8, 100), (0x8100, 200)])
    inner = b.eth(b.ipv4(b.tcp(7000, 8000), 6, "172.16.0.1", "172.16.0.2"))
    vx = b.eth(b.ipv4(b.udp(60000, 4789, b.vxlan(0xABCDE, inner)), 17, total_len=1450))
    roce = b.eth(b.ipv4(b.udp(49152, 4791, b.bth(4, 0x0BEEF1)), 17, tos=0x6B, total_len=4148))
    d = b.datagram([
        b.flow_sample([b.raw_header(qinq)]),
        b.flow_sample([b.ext_switch(110), b.raw_header(qinq)]),  # extended switch VLAN wins
        b.flow_sample([b.ext_router(), b.raw_header(vx)]),
        b.flow_sample([b.raw_header(roce), b.ext_switch(0)]),
    ])
    r = dec(d)
    f = r.flows
    assert list(f["vlan"]) == [100, 110, 0, 0]
    assert (f[2]["vxlan_vni"], addr_str(f[2]["src_addr"]), f[2]["dst_port"], f[2]["bytes"]) == (0xABCDE, "172.16.0.1",
                                                                                                8000, 1450)
    assert (f[3]["roce_opcode"], f[3]["roce_dest_qp"], f[3]["tos"], f[3]["bytes"]) == (4, 0x0BEEF1, 0x6B, 4148)
    assert not r.problems  # extended router is known and skipped silently


def test_unknown_record_and_sample_types_skipped_by_length():
    frame = b.tcp_frame(size=100)
    d = b.datagram([
        b.raw_sample(7, b"\x01" * 20),  # unknown standard sample type
        b.raw_sample((9 << 12) | 1, b"\x02" * 12),  # enterprise 9 sample
        b.flow_sample([b.record(2000, b"\x00" * 10), b.record(1, b"x" * 8, enterprise=4413), b.raw_header(frame),
                       b.record(1010, b"\x00" * 4)]),
        b.counter_sample([b.record(7, b"\x00" * 8), b.generic_counters(if_index=1)]),
    ])
    r = dec(d)
    assert len(r.flows) == 1 and r.flows[0]["bytes"] == 100
    assert len(r.counters) == 1
    assert r.problems["unknown_sample_type"] == 2
    assert r.problems["unknown_record_type"] == 4


def test_rate_zero_uses_override_or_one():
    frame = b.tcp_frame(size=1000)
    d = b.datagram([b.flow_sample([b.raw_header(frame)], rate=0), b.flow_sample([b.raw_header(frame)], rate=4)])
    r = dec(d)
    assert list(r.flows["sampling_rate"]) == [1, 4]
    assert list(r.flows["bytes_est"]) == [1000, 4000]
    assert r.problems["sampling_rate_missing"] == 1
    r2 = dec(d, TemplateCache(sampling_overrides={"192.0.2.9": 256}))
    assert list(r2.flows["sampling_rate"]) == [256, 4]
    assert list(r2.flows["packets_est"]) == [256, 4]
    r3 = dec(d, TemplateCache(default_sampling_rate=32))
    assert list(r3.flows["sampling_rate"]) == [32, 4]


def test_truncated_sampled_header_uses_length_fields():
    big = b.eth(b.ipv4(b.tcp(1, 2), 6, total_len=9000))
    v6 = b.eth(b.ipv6(b.tcp(1, 2), 6, payload_len=8960), 0x86DD)
    d = b.datagram([b.flow_sample([b.raw_header(big, snap=14 + 8, frame_length=9018)]),
                    b.flow_sample([b.raw_header(v6, snap=14 + 30, frame_length=9018)])])
    f = dec(d).flows
    assert (f[0]["bytes"], f[0]["ip_version"], f[0]["src_port"]) == (9000, 4, 0)
    assert (f[1]["bytes"], f[1]["ip_version"]) == (9000, 6)


def test_header_length_longer_than_record_is_clamped():
    frame = b.tcp_frame(size=64)
    rec = b.raw_header(frame, header_len=500)
    d = b.datagram([b.flow_sample([rec])])
    r = dec(d)
    assert r.flows[0]["bytes"] == 64 and r.problems["header_length_clamped"] == 1


def test_many_samples_and_memoryview_input():
    frames = [b.tcp_frame(sport=1000 + i, size=100 + i) for i in range(30)]
    d = b.datagram([b.flow_sample([b.raw_header(fr)], seq=i) for i, fr in enumerate(frames)])
    f = decode_sflow(memoryview(d), "x", T, TemplateCache()).flows
    assert list(f["src_port"]) == [1000 + i for i in range(30)]
    assert list(f["bytes"]) == [100 + i for i in range(30)]


def test_empty_datagram_and_trailing_bytes():
    r = dec(b.datagram([]) + b"\x00" * 7)
    assert len(r.flows) == 0 and len(r.counters) == 0 and r.header.sequence == 1


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda d: d[:10], "truncated"),
        (lambda d: d[:27], "truncated"),
        (lambda d: struct.pack(">I", 4) + d[4:], "bad_version"),
        (lambda d: d[:4] + struct.pack(">I", 3) + d[8:], "unsupported"),
        (lambda d: d[:24] + struct.pack(">I", 1000) + d[28:], "bad_count"),
        (lambda d: d[:24] + struct.pack(">I", 100000) + d[28:], "too_many"),
        (lambda d: d[:-4], "truncated"),  # last sample runs past the datagram
        (lambda d: d[:32] + struct.pack(">I", 8) + d[36:], "bad_length"),  # flow sample shorter than its header
    ],
)
def test_structural_errors_raise_decode_error(mutate, reason):
    d = b.datagram([b.flow_sample([b.raw_header(b.tcp_frame())])])
    with pytest.raises(DecodeError) as ei:
        decode_sflow(mutate(d), "x", T, TemplateCache())
    assert ei.value.protocol == "sflow5" and ei.value.reason == reason


def test_record_running_past_sample_is_bad_length():
    s = bytearray(b.flow_sample([b.raw_header(b.tcp_frame())]))
    # record length field sits after sample header (8) + flow sample fields (32) + record format (4)
    struct.pack_into(">I", s, 8 + 32 + 4, 4000)
    with pytest.raises(DecodeError) as ei:
        dec(b.datagram([bytes(s)]))
    assert ei.value.reason == "bad_length"
    s2 = bytearray(b.flow_sample([b.raw_header(b.tcp_frame())]))
    struct.pack_into(">I", s2, 8 + 28, 50)  # number of records
    with pytest.raises(DecodeError) as ei:
        dec(b.datagram([bytes(s2)]))
    assert ei.value.reason == "bad_count"


def test_dispatcher_routes_sflow():
    d = b.datagram([b.flow_sample([b.raw_header(b.tcp_frame())])])
    assert len(decode(d, "x", T, TemplateCache()).flows) == 1
    assert np.array_equal(decode(d, "x", T, TemplateCache()).flows, decode_sflow(d, "x", T, TemplateCache()).flows)


def _unpadded(fmt: int, body: bytes) -> bytes:
    return struct.pack(">II", fmt, len(body)) + body  # a length that is not a multiple of 4, no padding


@pytest.mark.parametrize("where", ["sample header", "flow record header", "counter record header"])
def test_error_offset_stays_inside_the_datagram_when_padding_runs_past_its_end(where):
    """Found by fuzzing (tests/fuzz/regressions/sflow): a 9-byte element at the very end, one more element
    announced; the next header would start at the padded end, 3 bytes past the datagram."""
    odd = _unpadded(99, b"\x01" * 9)
    if where == "sample header":
        d = b.datagram([odd, b""])  # two samples announced, the first one ends the datagram
    elif where == "flow record header":
        body = struct.pack(">IIIIIIII", 1, 1, 1, 1, 0, 1, 2, 2) + odd  # two records announced
        d = b.datagram([_unpadded(1, body)])
    else:
        d = b.datagram([_unpadded(2, struct.pack(">III", 1, 1, 2) + odd)])
    assert len(d) % 4 == 1
    with pytest.raises(DecodeError) as ei:
        decode_sflow(d, "x", T, TemplateCache())
    e = ei.value
    assert (e.reason, e.offset, e.detail) == ("truncated" if where == "sample header" else "bad_length", len(d), where)
    [many] = decode_sflow_many([d], "x", T, TemplateCache())
    assert isinstance(many, DecodeError) and (many.reason, many.offset) == (e.reason, e.offset)
    assert many.__traceback__ is None  # a value, not a raised exception holding the decoder's frame
