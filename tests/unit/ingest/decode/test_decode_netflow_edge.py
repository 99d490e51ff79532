"""Hand-built NetFlow v5 / v9 datagrams: every branch the captures do not reach."""

from __future__ import annotations

import struct

import pytest

from ingest.decode import DecodeError, TemplateCache, decode
from schemas.columns import FLOW_DTYPE, PROTO_NETFLOW5, PROTO_NETFLOW9, addr16, addr_str, is_v4_mapped

from devtools import nfbuild as b
from tests.support.captures import decode_error

EXP = "192.0.2.1"
EXPORT_MS = b.EXPORT_S * 1000
V4 = [(8, 4), (12, 4), (22, 4), (21, 4), (1, 4), (2, 4), (7, 2), (11, 2), (4, 1), (6, 1), (5, 1), (10, 2), (14, 2), (61, 1)]


def v4rec(src="10.0.0.1", dst="10.0.0.2", first=90_000, last=99_000, octets=1500, pkts=3, sport=1000, dport=80,
          proto=6, flags=0x12, tos=0x68, inif=5, outif=6, direction=1) -> bytes:
    return struct.pack("!4s4sIIIIHHBBBHHB", addr16(src)[12:], addr16(dst)[12:], first, last, octets, pkts, sport, dport,
                       proto, flags, tos, inif, outif, direction)


# -- NetFlow v5 --------------------------------------------------------------------------------------------
def test_v5_fields_sampling_and_times():
    d = b.v5([b.v5_record(), b.v5_record(proto=1, sport=0, dport=0x0800, pkts=2, octets=168)], sampling=(1 << 14) | 100)
    r = decode(d, EXP, 123, TemplateCache())
    f = r.flows
    assert f.dtype == FLOW_DTYPE and len(f) == 2
    export_ms = EXPORT_MS + 500
    assert r.header.export_time_ms == export_ms and r.header.increment == 2 and r.header.domain == (1 << 8) | 2
    assert (f["export_protocol"] == PROTO_NETFLOW5).all() and (f["observation_domain"] == 258).all()
    assert addr_str(f["src_addr"][0]) == "10.0.0.1" and is_v4_mapped(f["dst_addr"]).all()
    assert addr_str(f["exporter_addr"][0]) == EXP
    assert f["sampling_rate"].tolist() == [100, 100]
    assert f["bytes_est"].tolist() == [100_000, 16_800] and f["packets_est"].tolist() == [1000, 200]
    assert f["time_start_ms"][0] == export_ms - 10_000 and f["time_end_ms"][0] == export_ms - 1_000
    assert f["dst_port"][1] == 0x0800 and f["tcp_flags"][0] == 0x1B and f["in_if"][0] == 1 and f["out_if"][0] == 2
    assert f["time_received_ms"][0] == 123 and f["ip_version"][0] == 4 and f["vxlan_vni"][0] == -1
    assert not r.problems


def test_v5_uptime_wrap():
    # sysUptime wrapped to 5 s; the flow started 10 s earlier, before the wrap.
    d = b.v5([b.v5_record(first=(1 << 32) - 5_000, last=1_000)], uptime=5_000, sampling=1)
    f = decode(d, EXP, 0, TemplateCache()).flows
    assert f["time_start_ms"][0] == EXPORT_MS + 500 - 10_000
    assert f["time_end_ms"][0] == EXPORT_MS + 500 - 4_000


def test_v5_missing_rate_uses_override():
    d = b.v5([b.v5_record()])
    r = decode(d, EXP, 0, TemplateCache(sampling_overrides={EXP: 7}))
    assert r.problems["sampling_rate_missing"] == 1 and r.flows["sampling_rate"][0] == 7 and r.flows["bytes_est"][0] == 7000
    r = decode(d, "198.51.100.9", 0, TemplateCache(sampling_overrides={EXP: 7}))
    assert r.flows["sampling_rate"][0] == 1


def test_v5_truncated_and_bad_version():
    d = b.v5([b.v5_record(), b.v5_record()])
    with pytest.raises(DecodeError) as e:
        decode(d[:-1], EXP, 0, TemplateCache())
    assert e.value.reason == "truncated" and e.value.protocol == "netflow5"
    with pytest.raises(DecodeError):
        decode(d[:20], EXP, 0, TemplateCache())


# -- NetFlow v9 --------------------------------------------------------------------------------------------
def test_v9_template_data_padding_and_count_ignored():
    tmpl = b.v9_template_set((300, V4))
    recs = v4rec() + v4rec(src="10.0.0.3", octets=10)
    # header Count says 1 (data records only, like softflowd); sets are walked by length
    d = b.v9(tmpl, b.data_set(300, recs), count=1, uptime=100_000)
    r = decode(d, EXP, 0, TemplateCache(sampling_overrides={EXP: 1}))
    f = r.flows
    assert len(f) == 2 and r.templates_learned == 1 and r.header.increment == 1
    assert (f["export_protocol"] == PROTO_NETFLOW9).all()
    assert f["bytes"].tolist() == [1500, 10] and f["packets"].tolist() == [3, 3]
    assert f["time_start_ms"][0] == EXPORT_MS - 10_000 and f["time_end_ms"][0] == EXPORT_MS - 1_000
    assert (f["tos"][0], f["tcp_flags"][0], f["in_if"][0], f["out_if"][0], f["direction"][0]) == (0x68, 0x12, 5, 6, 1)
    assert r.problems["sampling_rate_missing"] == 1  # no options record: counted, override used


def test_v9_unpadded_odd_options_set_then_data():
    """softflowd style: options template/data sets of odd length, a data set that follows."""
    otmpl = b.v9_options_template_set(256, [(1, 4)], [(34, 4), (35, 1)], pad=False)
    odata = b.data_set(256, struct.pack("!IIB", 0, 10, 2), pad=False)  # SAMPLING_INTERVAL 10
    assert len(otmpl) % 4 and len(odata) % 4
    d = b.v9(b.v9_template_set((300, V4)), otmpl, odata, b.data_set(300, v4rec() + b"\x00"))
    r = decode(d, EXP, 0, TemplateCache())
    assert len(r.flows) == 1 and not r.problems
    assert r.flows["sampling_rate"][0] == 10 and r.flows["bytes_est"][0] == 15_000


def test_v9_sampling_by_sampler_id_and_by_source_id():
    cache = TemplateCache()
    ot = b.v9_options_template_set(257, [(1, 4)], [(48, 1), (49, 1), (50, 4)])
    od = b.data_set(257, struct.pack("!IBBI", 0, 3, 2, 64) + struct.pack("!IBBI", 0, 5, 2, 10))
    tmpl = b.v9_template_set((300, V4 + [(48, 1)]))
    recs = v4rec() + b"\x03" + v4rec() + b"\x05" + v4rec() + b"\x09"
    r = decode(b.v9(ot, od, tmpl, b.data_set(300, recs), source_id=1), EXP, 0, cache)
    f = r.flows
    assert f["sampler_id"].tolist() == [3, 5, 9]
    # sampler 9 is unknown and the source id has no domain-wide rate: counted, rate 1
    assert f["sampling_rate"].tolist() == [64, 10, 1] and r.problems["sampling_rate_missing"] == 1
    assert f["packets_est"].tolist() == [192, 30, 3]
    # per source id: SAMPLING_INTERVAL without sampler id applies to every record of that source id only
    ot2 = b.v9_options_template_set(258, [(1, 4)], [(34, 4), (35, 1)])
    od2 = b.data_set(258, struct.pack("!IIB", 0, 32, 2))
    r2 = decode(b.v9(ot2, od2, b.v9_template_set((300, V4)), b.data_set(300, v4rec()), source_id=2), EXP, 0, cache)
    assert r2.flows["sampling_rate"][0] == 32 and r2.flows["observation_domain"][0] == 2
    r3 = decode(b.v9(b.data_set(300, recs), source_id=1), EXP, 0, cache)
    assert r3.flows["sampling_rate"].tolist() == [64, 10, 1]


def test_v9_template_collision_across_exporters_and_source_ids():
    cache = TemplateCache(sampling_overrides={"192.0.2.1": 1, "192.0.2.2": 1})
    v6 = [(27, 16), (28, 16), (1, 8), (2, 8), (4, 1)]
    v6rec = addr16("2001:db8::1") + addr16("2001:db8::2") + struct.pack("!QQB", 9000, 9, 17)
    decode(b.v9(b.v9_template_set((300, V4))), "192.0.2.1", 0, cache)
    decode(b.v9(b.v9_template_set((300, v6))), "192.0.2.2", 0, cache)
    decode(b.v9(b.v9_template_set((300, v6)), source_id=7), "192.0.2.1", 0, cache)
    assert len(cache) == 3
    a = decode(b.v9(b.data_set(300, v4rec())), "192.0.2.1", 0, cache).flows
    c = decode(b.v9(b.data_set(300, v6rec)), "192.0.2.2", 0, cache).flows
    d = decode(b.v9(b.data_set(300, v6rec), source_id=7), "192.0.2.1", 0, cache).flows
    assert addr_str(a["src_addr"][0]) == "10.0.0.1" and a["ip_version"][0] == 4
    for f in (c, d):
        assert addr_str(f["src_addr"][0]) == "2001:db8::1" and f["bytes"][0] == 9000 and f["ip_version"][0] == 6
    assert d["observation_domain"][0] == 7


def test_v9_reduced_size_and_icmp_with_ports():
    tmpl = [(8, 4), (12, 4), (1, 3), (2, 2), (4, 1), (7, 2), (11, 2), (32, 2), (10, 1), (58, 2)]
    rec_tcp = addr16("10.0.0.1")[12:] + addr16("10.0.0.2")[12:] + (70000).to_bytes(3, "big") + struct.pack("!HBHHHBH", 5, 6, 1000, 80, 0, 3, 110)
    rec_icmp = addr16("10.0.0.1")[12:] + addr16("10.0.0.2")[12:] + (84).to_bytes(3, "big") + struct.pack("!HBHHHBH", 1, 1, 0, 0, 0x0800, 3, 110)
    r = decode(b.v9(b.v9_template_set((400, tmpl)), b.data_set(400, rec_tcp + rec_icmp)), EXP, 0, TemplateCache())
    f = r.flows
    assert f["bytes"].tolist() == [70000, 84] and f["packets"].tolist() == [5, 1]
    assert f["src_port"].tolist() == [1000, 0] and f["dst_port"].tolist() == [80, 0x0800]
    assert f["vlan"].tolist() == [110, 110] and f["in_if"].tolist() == [3, 3]
    # no time fields: flow times are the export time
    assert (f["time_start_ms"] == EXPORT_MS).all() and (f["time_end_ms"] == EXPORT_MS).all()


def test_v9_out_counters_when_in_absent_and_dual_stack():
    tmpl = [(8, 4), (12, 4), (27, 16), (28, 16), (23, 4), (24, 4), (60, 1)]
    r4 = addr16("10.1.1.1")[12:] + addr16("10.1.1.2")[12:] + bytes(32) + struct.pack("!IIB", 100, 2, 4)
    r6 = bytes(8) + addr16("fd00::1") + addr16("fd00::2") + struct.pack("!IIB", 200, 3, 6)
    f = decode(b.v9(b.v9_template_set((500, tmpl)), b.data_set(500, r4 + r6)), EXP, 0, TemplateCache()).flows
    assert f["bytes"].tolist() == [100, 200] and f["packets"].tolist() == [2, 3]
    assert [addr_str(a) for a in f["src_addr"]] == ["10.1.1.1", "fd00::1"] and f["ip_version"].tolist() == [4, 6]
    assert addr_str(f["dst_addr"][1]) == "fd00::2"


def test_v9_template_refresh_change_and_expiry():
    cache = TemplateCache(expiry_s=10)
    t = b.v9_template_set((300, V4))
    assert decode(b.v9(t), EXP, 0, cache).templates_learned == 1
    assert decode(b.v9(t), EXP, 5_000, cache).templates_learned == 0
    assert cache.learned_total == 1 and cache.refreshed_total == 1
    # refreshed at 5 s: still valid at 14 s
    assert len(decode(b.v9(b.data_set(300, v4rec())), EXP, 14_000, cache).flows) == 1
    r = decode(b.v9(b.data_set(300, v4rec())), EXP, 15_001, cache)
    assert len(r.flows) == 0 and r.problems["template_expired"] == 1
    assert cache.expired_total == 1 and len(cache) == 0
    # a changed definition replaces the old one
    decode(b.v9(t), EXP, 20_000, cache)
    r = decode(b.v9(b.v9_template_set((300, V4[:2] + [(1, 4)])), b.data_set(300, bytes(8) + struct.pack("!I", 77))), EXP, 21_000, cache)
    assert r.templates_learned == 1 and r.flows["bytes"].tolist() == [77] and cache.learned_total == 3


def test_v9_bad_lengths():
    good = b.v9(b.v9_template_set((300, V4)), b.data_set(300, v4rec()))
    bad = bytearray(good)
    struct.pack_into("!H", bad, 22, 3)  # first FlowSet length 3 < 4
    assert decode_error(bytes(bad), EXP).reason == "bad_length"
    struct.pack_into("!H", bad, 22, 4000)
    assert decode_error(bytes(bad), EXP).reason == "truncated"
    # template field count beyond its FlowSet
    bad = bytearray(good)
    struct.pack_into("!H", bad, 26, 200)
    assert decode_error(bytes(bad), EXP).reason == "bad_template"


def test_v9_limits_and_pending_bounds():
    cache = TemplateCache(max_templates_per_exporter=2, max_pending_sets=1)
    r = decode(b.v9(b.v9_template_set((300, V4), (301, V4), (302, V4))), EXP, 0, cache)
    assert r.templates_learned == 2 and r.problems["template_limit"] == 1 and cache.rejected_total == 1
    assert len(decode(b.v9(b.v9_template_set((300, V4))), "192.0.2.99", 0, cache).flows) == 0 and len(cache) == 3
    r = decode(b.v9(b.data_set(600, v4rec()), b.data_set(601, v4rec())), EXP, 0, cache)
    assert cache.pending_count() == 1 and r.problems["unknown_template"] == 1
    off = TemplateCache(pending_hold_s=0)
    assert decode(b.v9(b.data_set(600, v4rec())), EXP, 0, off).problems["unknown_template"] == 1


def test_persistence_roundtrip(tmp_path):
    path = str(tmp_path / "templates.json")
    cache = TemplateCache(path=path)
    ot = b.v9_options_template_set(257, [(1, 4)], [(34, 4)])
    decode(b.v9(b.v9_template_set((300, V4)), ot, b.data_set(257, struct.pack("!II", 0, 16))), EXP, 1000, cache)
    cache.save()
    again = TemplateCache(path=path)
    assert len(again) == 2 and again.peek((EXP, 9, 0, 257)).kind == "options"
    f = decode(b.v9(b.data_set(300, v4rec())), EXP, 2000, again).flows
    assert len(f) == 1 and f["sampling_rate"][0] == 16
