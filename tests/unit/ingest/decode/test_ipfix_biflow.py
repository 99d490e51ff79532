"""RFC 5103 bidirectional IPFIX records: one biflow record -> a forward and (when it has packets) a reverse record."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.decode import DecodeError, TemplateCache, decode, decode_into
from ingest.decode._nf_plan import PEN_REVERSE, reverse_fields
from ingest.decode.batch import FlowBatch
from schemas.columns import FLOW_DTYPE, addr_str

from devtools import nfbuild as b

R = PEN_REVERSE
EXPORT_MS = b.EXPORT_S * 1000
# src, dst, sport, dport, proto, in_if, out_if, octets, packets, flags, start ms, end ms,
# reverse octets, reverse packets, reverse flags, reverse start ms, reverse end ms
BIFLOW = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (10, 4), (14, 4), (1, 8), (2, 8), (6, 1), (152, 8), (153, 8),
          (1, 8, R), (2, 8, R), (6, 1, R), (152, 8, R), (153, 8, R)]
_REC = struct.Struct("!4s4sHHBIIQQBQQQQBQQ")


def rec(src, dst, sport, dport, octets, pkts, r_octets, r_pkts, proto=6, flags=0x1A, r_flags=0x12,
        start=EXPORT_MS - 5000, end=EXPORT_MS - 1000, r_start=EXPORT_MS - 4900, r_end=EXPORT_MS - 1100):
    return _REC.pack(bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))), sport, dport, proto, 3, 7,
                     octets, pkts, flags, start, end, r_octets, r_pkts, r_flags, r_start, r_end)


def _decode(*records, fields=BIFLOW):
    dg = b.ipfix(b.ipfix_template_set((256, fields)), b.data_set(256, b"".join(records)), seq=0)
    return decode(dg, "192.0.2.1", EXPORT_MS + 10, TemplateCache())


def test_biflow_gives_forward_and_reverse_records_with_their_own_counters_flags_and_times():
    r = _decode(rec("10.0.0.1", "10.0.0.2", 40000, 443, 5000, 10, 90000, 70))
    f = r.flows
    assert len(f) == 2 and r.problems == {"sampling_rate_missing": 1}  # counted once, not per direction
    assert [addr_str(a) for a in f["src_addr"]] == ["10.0.0.1", "10.0.0.2"]
    assert [addr_str(a) for a in f["dst_addr"]] == ["10.0.0.2", "10.0.0.1"]
    assert f["src_port"].tolist() == [40000, 443] and f["dst_port"].tolist() == [443, 40000]
    assert f["in_if"].tolist() == [3, 7] and f["out_if"].tolist() == [7, 3]
    assert f["bytes"].tolist() == [5000, 90000] and f["packets"].tolist() == [10, 70]
    assert f["tcp_flags"].tolist() == [0x1A, 0x12]
    assert f["time_start_ms"].tolist() == [EXPORT_MS - 5000, EXPORT_MS - 4900]
    assert f["time_end_ms"].tolist() == [EXPORT_MS - 1000, EXPORT_MS - 1100]
    assert f["ip_protocol"].tolist() == [6, 6] and f["ip_version"].tolist() == [4, 4]
    assert r.header.increment == 1  # the sequence counts wire records


def test_zero_reverse_packets_gives_only_the_forward_record():
    r = _decode(rec("10.0.0.1", "10.0.0.2", 1, 2, 100, 1, 0, 0), rec("10.0.0.3", "10.0.0.4", 3, 4, 200, 2, 50, 1))
    f = r.flows
    assert [addr_str(a) for a in f["src_addr"]] == ["10.0.0.1", "10.0.0.3", "10.0.0.4"]
    assert f["packets"].tolist() == [1, 2, 1] and f["bytes"].tolist() == [100, 200, 50]
    assert r.header.increment == 2


def test_reverse_without_its_own_flags_or_times_takes_no_flags_and_the_biflow_times():
    fields = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (6, 1), (152, 8), (153, 8), (1, 4), (2, 4), (1, 4, R), (2, 4, R)]
    body = struct.pack("!4s4sHHBBQQIIII", b"\x0a\0\0\x01", b"\x0a\0\0\x02", 5, 6, 17, 0x02, EXPORT_MS - 9, EXPORT_MS - 2,
                       800, 8, 300, 3)
    f = _decode(body, fields=fields).flows
    assert f["tcp_flags"].tolist() == [0x02, 0]
    assert f["time_start_ms"].tolist() == [EXPORT_MS - 9] * 2 and f["time_end_ms"].tolist() == [EXPORT_MS - 2] * 2
    assert f["bytes"].tolist() == [800, 300] and f["src_port"].tolist() == [5, 6]


def test_sampling_applies_to_both_directions():
    fields = BIFLOW + [(34, 4)]
    body = rec("10.0.0.1", "10.0.0.2", 1, 2, 100, 1, 40, 2) + struct.pack("!I", 100)
    f = _decode(body, fields=fields).flows
    assert f["sampling_rate"].tolist() == [100, 100]
    assert f["bytes_est"].tolist() == [10000, 4000] and f["packets_est"].tolist() == [100, 200]


def test_icmp_type_stays_in_the_destination_port_and_reverse_icmp_type_is_used():
    fields = [(8, 4), (12, 4), (4, 1), (32, 2), (1, 4), (2, 4), (1, 4, R), (2, 4, R), (32, 2, R)]
    body = struct.pack("!4s4sBHIIIIH", b"\x0a\0\0\x01", b"\x0a\0\0\x02", 1, 8 << 8, 84, 1, 84, 1, 0)
    f = _decode(body, fields=fields).flows
    assert f["dst_port"].tolist() == [8 << 8, 0] and f["src_port"].tolist() == [0, 0]


def test_template_without_reverse_counters_is_not_a_biflow():
    fields, keep = reverse_fields([(8, 0, 4), (1, 0, 4), (5, R, 1)])
    assert keep is None
    f = _decode(struct.pack("!4sIB", b"\x0a\0\0\x01", 10, 4), fields=[(8, 4), (1, 4), (5, 1, R)]).flows
    assert len(f) == 1 and f["bytes"].tolist() == [10]


def test_reverse_field_list_swaps_keys_hides_one_way_fields():
    # (ie, pen, length), as templates hold them
    fields = [(8, 0, 4), (12, 0, 4), (58, 0, 2), (59, 0, 2), (15, 0, 4), (5, 0, 1), (1, 0, 4), (2, 0, 4), (2, R, 4)]
    rf, keep = reverse_fields(fields)
    assert keep == (25, 4)
    assert [(ie, pen) for ie, pen, _ in rf] == [(12, 0), (8, 0), (59, 0), (58, 0), (15, 0xFFFFFFFF), (5, 0),
                                               (1, 0xFFFFFFFF), (2, 0xFFFFFFFF), (2, 0)]
    assert [ln for *_, ln in rf] == [ln for *_, ln in fields]


def test_batched_decode_equals_per_datagram_decode_for_biflows():
    recs = [rec(f"10.0.0.{i}", "10.0.1.1", i, 80, 100 * i, i, 7 * i if i % 3 else 0, i % 3) for i in range(1, 40)]
    dgs = [b.ipfix(b.ipfix_template_set((256, BIFLOW)), b.data_set(256, b"".join(recs[i : i + 13])), seq=i)
           for i in (0, 13, 26)]
    c1, c2, batch = TemplateCache(), TemplateCache(), FlowBatch()
    want = np.concatenate([decode(d, "192.0.2.1", EXPORT_MS, c1).flows for d in dgs])
    for d in dgs:
        decode_into(d, "192.0.2.1", EXPORT_MS, c2, batch)
    assert len(want) == 39 + 26
    assert batch.decode().tobytes() == want.tobytes()


_IES = st.sampled_from([1, 2, 4, 5, 6, 7, 8, 10, 11, 12, 14, 15, 21, 22, 27, 28, 32, 34, 58, 59, 60, 61, 62, 85, 86,
                        139, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 176, 177, 243])
_FIELD = st.tuples(_IES, st.sampled_from([1, 2, 3, 4, 8, 16, 0xFFFF]), st.sampled_from([0, 0, R]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(_FIELD, min_size=1, max_size=24), data=st.binary(min_size=0, max_size=600),
       rev=st.sampled_from([(2, 4), (1, 8), (86, 2)]))
def test_random_biflow_templates_never_crash(fields, data, rev):
    fields = [(ie, ln) if pen == 0 else (ie, ln, pen) for ie, ln, pen in fields] + [(rev[0], rev[1], R)]
    dg = b.ipfix(b.ipfix_template_set((300, fields)), b.data_set(300, data, pad=False))
    for cache in (TemplateCache(),):
        try:
            r = decode(dg, "192.0.2.1", EXPORT_MS, cache)
        except DecodeError:
            continue
        assert r.flows.dtype == FLOW_DTYPE
        # never more than two rows per wire record
        assert len(r.flows) <= 2 * max(r.header.increment, 0)
        batch = FlowBatch()
        decode_into(dg, "192.0.2.1", EXPORT_MS, TemplateCache(), batch)
        assert batch.decode().tobytes() == r.flows.tobytes()
