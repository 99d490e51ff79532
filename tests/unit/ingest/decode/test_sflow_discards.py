"""sFlow discarded packet samples (sflow.org "sFlow Dropped Packet Notification Structures"), built from the
spec's layout: the compiled decoder's discard rows, values and errors, and the reference giving the same."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from ingest.decode import DecodeError, TemplateCache
from schemas.drop_reasons import REASON_GROUP, REASONS, reason_name, reason_names
from ingest.decode.reference.sflow import decode_sflow as decode_reference
from ingest.decode.result import DISCARD_DTYPE
from ingest.decode.sflow import decode_sflow, decode_sflow_many
from devtools import sflow_build as b

T = 1_700_000_000_000


def _decode(data, fn=decode_sflow):
    return fn(data, "192.0.2.9", T, TemplateCache())


def _addr(row_addr) -> str:
    a = ipaddress.ip_address(bytes(row_addr))
    return str(a.ipv4_mapped or a)


def roce_discard(reason=259, queue=3, **kw) -> bytes:
    frame = b.eth(b.ipv4(b.udp(49152, 4791, b.bth(0x0A, 77)), 17, "10.1.0.5", "10.1.0.9", total_len=4136))
    return b.discard_sample([b.raw_header(frame), b.egress_queue(queue), b.ext_switch(30)], reason=reason, **kw)


def test_discard_row_values():
    data = b.datagram([roce_discard(seq=42, source_index=7, drops=5, in_if=11, out_if=12)], agent="10.254.0.3")
    r = _decode(data)
    assert len(r.flows) == 0 and len(r.counters) == 0  # a dropped packet is not traffic
    d = r.discards
    assert d.dtype == DISCARD_DTYPE and len(d) == 1
    row = d[0]
    assert (row["sample_sequence"], row["source_id"], row["drops"], row["in_if"], row["out_if"]) == (42, 7, 5, 11, 12)
    assert row["reason"] == 259 and reason_name(row["reason"]) == "no_buffer_space"
    assert row["egress_queue"] == 3 and row["vlan"] == 30
    assert (_addr(row["src_addr"]), _addr(row["dst_addr"]), row["ip_protocol"]) == ("10.1.0.5", "10.1.0.9", 17)
    assert (row["dst_port"], row["roce_opcode"], row["bytes"], row["ip_version"]) == (4791, 0x0A, 4136, 4)
    assert _addr(row["exporter_addr"]) == "10.254.0.3" and row["time_received_ms"] == T
    assert not r.problems


def test_discard_beside_flows_and_counters_keeps_order_and_rows():
    flow = b.flow_sample([b.raw_header(b.tcp_frame())], rate=100)
    ctr = b.counter_sample([b.generic_counters(if_index=11)])
    data = b.datagram([flow, roce_discard(reason=258), ctr, roce_discard(reason=999, queue=0)])
    r = _decode(data)
    assert len(r.flows) == 1 and len(r.counters) == 1 and len(r.discards) == 2
    assert reason_names(r.discards["reason"]) == ["acl", "other"]  # a code the spec does not list: "other"
    many = decode_sflow_many([data, b.datagram([flow])], "192.0.2.9", T, TemplateCache())
    assert len(many[0].discards) == 2 and len(many[1].discards) == 0


def test_discard_without_header_and_unknown_record():
    data = b.datagram([b.discard_sample([b.record(1038, b"\x00\x00\x00\x03abc")], reason=257, out_if=0)])
    r = _decode(data)
    row = r.discards[0]
    assert row["ip_version"] == 0 and row["egress_queue"] == -1 and row["roce_opcode"] == -1 and row["bytes"] == 0
    assert r.problems["unknown_record_type"] == 1  # extended_function is skipped and counted like any unknown record


@pytest.mark.parametrize("body, reason", [
    (b.raw_sample(5, b"\x00" * 28), "bad_length"),  # shorter than its fixed fields
    (b.raw_sample(5, struct.pack(">8I", 1, 0, 1, 0, 1, 0, 259, 9)), "bad_count"),  # 9 records in no bytes
])
def test_broken_discard_sample_is_one_decode_error(body, reason):
    for data in (b.datagram([body]), b.datagram([roce_discard(), body])):
        with pytest.raises(DecodeError) as e:
            _decode(data)
        with pytest.raises(DecodeError) as ref:
            _decode(data, decode_reference)
        assert e.value.reason == reason
        assert (e.value.reason, e.value.offset, e.value.detail) == (ref.value.reason, ref.value.offset, ref.value.detail)


def test_reference_agrees_on_discards():
    data = b.datagram([roce_discard(), b.discard_sample([b.sampled_ipv6(80, 6, "fd00::1", "fd00::2", 1, 2)],
                                                       source_type=1, source_index=70000, reason=279)])
    got, ref = _decode(data), _decode(data, decode_reference)
    assert got.discards.tobytes() == ref.discards.tobytes() and dict(got.problems) == dict(ref.problems)
    assert got.discards[1]["source_id"] == (1 << 24) | (70000 & 0xFFFFFF)


def test_egress_queue_record_in_a_flow_sample_is_known():
    r = _decode(b.datagram([b.flow_sample([b.raw_header(b.tcp_frame()), b.egress_queue(2)])]))
    assert not r.problems and len(r.flows) == 1


def test_reason_names_cover_the_spec_list():
    assert len(REASONS) == 16 + 48 and REASONS[303] == "split_horizon" and REASONS[0] == "net_unreachable"
    assert REASON_GROUP["no_buffer_space"] == "buffer" and REASON_GROUP["acl"] == "acl"
    assert set(REASON_GROUP) <= set(REASONS.values())


def test_seed_files_are_the_built_datagrams_and_decode():
    from tests.support.discard_seeds import DIR, seeds

    built = seeds()
    assert sorted(p.name for p in DIR.glob("*.bin")) == sorted(built)
    reasons = {}
    for name, data in built.items():
        assert (DIR / name).read_bytes() == data, f"{name}: rebuild with python -m tests.support.discard_seeds"
        r, ref = _decode(data), _decode(data, decode_reference)
        assert r.discards.tobytes() == ref.discards.tobytes() and r.flows.tobytes() == ref.flows.tobytes()
        reasons[name] = reason_names(r.discards["reason"])
    assert reasons == {"buffer_drop_roce_v4.bin": ["no_buffer_space"],
                       "acl_drop_sampled_v6_expanded_source.bin": ["acl"],
                       "mixed_flow_counter_discards.bin": ["unknown_buffer", "other"]}
