"""Hand-built IPFIX messages: enterprise and variable-length fields, withdrawal, sampling, timestamps."""

from __future__ import annotations

import struct

import pytest

from ingest.decode import DecodeError, TemplateCache, decode
from schemas.columns import PROTO_IPFIX, addr16, addr_str, is_v4_mapped

from devtools import nfbuild as b
from tests.support.captures import decode_error

EXP = "192.0.2.1"
EXPORT_MS = b.EXPORT_S * 1000
BASE = [(8, 4), (12, 4), (1, 4), (2, 4), (4, 1)]
NTP = 2208988800


def base_rec(src="10.0.0.1", dst="10.0.0.2", octets=1000, pkts=2, proto=17) -> bytes:
    return addr16(src)[12:] + addr16(dst)[12:] + struct.pack("!IIB", octets, pkts, proto)


def cache():
    return TemplateCache(sampling_overrides={EXP: 1})


def test_enterprise_and_variable_length_fields():
    # enterprise IE 1 (PEN 9) must not be read as octetDeltaCount; var-length fields with 1- and 3-byte lengths
    tmpl = [(8, 4), (96, 0xFFFF), (1, 4, 9), (12, 4), (300, 0xFFFF, 29305), (1, 4), (2, 4), (4, 1)]
    rec1 = addr16("10.0.0.1")[12:] + b.varlen(b"eth0") + struct.pack("!I", 999) + addr16("10.0.0.2")[12:] \
        + b.varlen(b"x" * 300) + struct.pack("!IIB", 1500, 3, 6)
    rec2 = addr16("10.0.0.3")[12:] + b.varlen(b"", long=True) + struct.pack("!I", 999) + addr16("10.0.0.4")[12:] \
        + b.varlen(b"y") + struct.pack("!IIB", 40, 1, 17)
    r = decode(b.ipfix(b.ipfix_template_set((256, tmpl)), b.data_set(256, rec1 + rec2)), EXP, 0, cache())
    f = r.flows
    assert len(f) == 2 and set(r.problems) == {"sampling_rate_missing"} and r.header.increment == 2
    assert f["bytes"].tolist() == [1500, 40] and f["packets"].tolist() == [3, 1] and f["ip_protocol"].tolist() == [6, 17]
    assert [addr_str(a) for a in f["dst_addr"]] == ["10.0.0.2", "10.0.0.4"]
    assert (f["export_protocol"] == PROTO_IPFIX).all()


def test_variable_length_record_past_set_end_is_counted():
    tmpl = [(8, 4), (96, 0xFFFF)]
    body = addr16("10.0.0.1")[12:] + b.varlen(b"abcd") + addr16("10.0.0.9")[12:] + b"\x20ab"
    r = decode(b.ipfix(b.ipfix_template_set((256, tmpl)), b.data_set(256, body, pad=False)), EXP, 0, cache())
    assert len(r.flows) == 1 and r.problems["bad_record"] == 1


def test_withdrawal_single_and_all():
    c = cache()
    decode(b.ipfix(b.ipfix_template_set((256, BASE), (257, BASE)), domain=1), EXP, 0, c)
    decode(b.ipfix(b.ipfix_options_template_set(258, [(149, 4)], [(305, 4)]), domain=1), EXP, 0, c)
    assert len(c) == 3
    r = decode(b.ipfix(b.ipfix_withdraw(256), b.data_set(256, base_rec()), domain=1), EXP, 0, c)
    assert r.templates_withdrawn == 1 and len(r.flows) == 0 and c.pending_count() == 1
    assert len(decode(b.ipfix(b.data_set(257, base_rec()), domain=1), EXP, 0, c).flows) == 1
    r = decode(b.ipfix(b.ipfix_withdraw(2), domain=1), EXP, 0, c)  # all data templates
    assert r.templates_withdrawn == 1 and len(c) == 1 and c.withdrawn_total == 2
    r = decode(b.ipfix(b.ipfix_withdraw(3, options=True), domain=1), EXP, 0, c)  # all options templates
    assert r.templates_withdrawn == 1 and len(c) == 0
    # the held set is decoded when 256 comes back
    r = decode(b.ipfix(b.ipfix_template_set((256, BASE)), domain=1), EXP, 0, c)
    assert len(r.flows) == 1 and r.header.increment == 0


def test_template_collision_across_domains():
    c = cache()
    other = [(27, 16), (28, 16), (1, 4)]
    decode(b.ipfix(b.ipfix_template_set((256, BASE)), domain=1), EXP, 0, c)
    decode(b.ipfix(b.ipfix_template_set((256, other)), domain=2), EXP, 0, c)
    f1 = decode(b.ipfix(b.data_set(256, base_rec()), domain=1), EXP, 0, c).flows
    f2 = decode(b.ipfix(b.data_set(256, addr16("fd00::1") + addr16("fd00::2") + struct.pack("!I", 5)), domain=2), EXP, 0, c).flows
    assert addr_str(f1["src_addr"][0]) == "10.0.0.1" and f1["observation_domain"][0] == 1
    assert addr_str(f2["src_addr"][0]) == "fd00::1" and f2["bytes"][0] == 5 and f2["observation_domain"][0] == 2


def test_sampling_by_selector_id_and_domain():
    c = TemplateCache()
    # options: scope selectorId (302), samplingPacketInterval/Space: 1 in (1+99) = 100
    ot = b.ipfix_options_template_set(400, [(302, 4)], [(305, 4), (306, 4)])
    od = b.data_set(400, struct.pack("!III", 7, 1, 99) + struct.pack("!III", 8, 1, 3))
    tmpl = b.ipfix_template_set((256, BASE + [(302, 4)]))
    data = b.data_set(256, base_rec() + struct.pack("!I", 7) + base_rec() + struct.pack("!I", 8))
    r = decode(b.ipfix(ot, od, tmpl, data), EXP, 0, c)
    assert r.flows["sampling_rate"].tolist() == [100, 4] and r.flows["bytes_est"].tolist() == [100_000, 4000]
    assert r.flows["sampler_id"].tolist() == [7, 8] and not r.problems
    # domain-wide rate: samplingInterval (34) without a selector
    ot2 = b.ipfix_options_template_set(401, [(149, 4)], [(34, 4), (35, 1)])
    r2 = decode(b.ipfix(ot2, b.data_set(401, struct.pack("!IIB", 3, 50, 2)), b.ipfix_template_set((256, BASE)),
                        b.data_set(256, base_rec()), domain=3), EXP, 0, c)
    assert r2.flows["sampling_rate"][0] == 50 and r2.flows["packets_est"][0] == 100
    # sampling fields inside the data record itself
    r3 = decode(b.ipfix(b.ipfix_template_set((300, BASE + [(305, 4), (306, 4)])),
                        b.data_set(300, base_rec() + struct.pack("!II", 2, 14)), domain=4), EXP, 0, c)
    assert r3.flows["sampling_rate"][0] == 8


def test_missing_rate_counted_per_batch():
    r = decode(b.ipfix(b.ipfix_template_set((256, BASE)), b.data_set(256, base_rec() * 3)), EXP, 0, TemplateCache(default_sampling_rate=5))
    assert r.problems["sampling_rate_missing"] == 1 and r.flows["sampling_rate"].tolist() == [5, 5, 5]


@pytest.mark.parametrize(
    "fields,values,start,end",
    [
        ([(152, 8), (153, 8)], struct.pack("!QQ", EXPORT_MS - 5000, EXPORT_MS - 1000), EXPORT_MS - 5000, EXPORT_MS - 1000),
        ([(150, 4), (151, 4)], struct.pack("!II", b.EXPORT_S - 5, b.EXPORT_S - 1), EXPORT_MS - 5000, EXPORT_MS - 1000),
        # dateTimeMicroseconds / Nanoseconds: NTP format (seconds since 1900, 2^-32 fractions); 0x80000000 = .5 s
        ([(154, 8), (155, 8)], struct.pack("!IIII", b.EXPORT_S + NTP - 5, 1 << 31, b.EXPORT_S + NTP - 1, 0), EXPORT_MS - 4500, EXPORT_MS - 1000),
        ([(156, 8), (157, 8)], struct.pack("!IIII", b.EXPORT_S + NTP - 5, 1 << 30, b.EXPORT_S + NTP - 1, 0), EXPORT_MS - 4750, EXPORT_MS - 1000),
        ([(158, 4), (159, 4)], struct.pack("!II", 5_000_000, 1_000_000), EXPORT_MS - 5000, EXPORT_MS - 1000),
        # flowStart/EndSysUpTime with no systemInitTime known: export time
        ([(22, 4), (21, 4)], struct.pack("!II", 1000, 2000), EXPORT_MS, EXPORT_MS),
    ],
)
def test_timestamps(fields, values, start, end):
    r = decode(b.ipfix(b.ipfix_template_set((256, BASE + fields)), b.data_set(256, base_rec() + values)), EXP, 0, cache())
    assert (r.flows["time_start_ms"][0], r.flows["time_end_ms"][0]) == (start, end)


def test_relative_times_with_system_init_from_options():
    c = cache()
    ot = b.ipfix_options_template_set(400, [(149, 4)], [(160, 8)])
    od = b.data_set(400, struct.pack("!IQ", 0, EXPORT_MS - 60_000))
    r = decode(b.ipfix(ot, od, b.ipfix_template_set((256, BASE + [(22, 4), (21, 4)])),
                       b.data_set(256, base_rec() + struct.pack("!II", 1000, 2000))), EXP, 0, c)
    assert (r.flows["time_start_ms"][0], r.flows["time_end_ms"][0]) == (EXPORT_MS - 59_000, EXPORT_MS - 58_000)


def test_reduced_size_vlan_direction_icmp6_and_mapped_v6():
    tmpl = [(27, 16), (28, 16), (1, 2), (2, 1), (4, 1), (139, 2), (243, 2), (61, 1), (6, 2)]
    rec = addr16("::ffff:10.9.9.9") + addr16("fd00::2") + struct.pack("!HBBHHBH", 840, 7, 58, 0x8000, 210, 1, 0x0112)
    f = decode(b.ipfix(b.ipfix_template_set((256, tmpl)), b.data_set(256, rec)), EXP, 0, cache()).flows
    assert f["bytes"][0] == 840 and f["packets"][0] == 7
    assert f["dst_port"][0] == 0x8000 and f["src_port"][0] == 0 and f["vlan"][0] == 210 and f["direction"][0] == 1
    assert f["tcp_flags"][0] == 0x12  # low byte of the 2-byte tcpControlBits
    # an IPv4-mapped IPv6 address is stored exactly like the IPv4 form
    assert is_v4_mapped(f["src_addr"]).all() and bytes(f["src_addr"][0]) == addr16("10.9.9.9")


def test_padding_and_message_length():
    d = b.ipfix(b.ipfix_template_set((256, BASE)), b.data_set(256, base_rec() + bytes(3), pad=False))
    assert len(decode(d, EXP, 0, cache()).flows) == 1
    assert decode_error(d[:-1], EXP, cache()).reason == "truncated"
    bad = bytearray(d)
    struct.pack_into("!H", bad, 2, 8)
    assert decode_error(bytes(bad), EXP, cache()).reason == "bad_length"
    # trailing bytes after the message length are ignored
    assert len(decode(d + b"\x00" * 5, EXP, 0, cache()).flows) == 1


def test_many_tiny_records_in_one_set():
    # 1-byte records: 3000 of them in one set (gathered in chunks)
    r = decode(b.ipfix(b.ipfix_template_set((256, [(4, 1)])), b.data_set(256, bytes(range(200)) * 15)), EXP, 0, cache())
    assert len(r.flows) == 3000 and r.flows["ip_protocol"][:200].tolist() == list(range(200))
    assert r.flows["ip_protocol"][2999] == 199
