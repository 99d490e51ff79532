"""Differential tests: batched NetFlow v9/IPFIX decoding (decode_into + FlowBatch) vs per-datagram decode().

The per-datagram decoder is the reference (its results are pinned against
tshark by the golden tests). The batched path must give, per exporter, the
same rows in the same order, and per datagram the same header, problems,
template counts and DecodeError -- over the real captures and over generated
sequences with template redefinition mid-batch, withdrawal, options
(sampling, system init), padding, variable-length and enterprise fields,
reduced-size encoding, data before its template, template expiry, truncated
sets and malformed datagrams, mixed NetFlow v9/IPFIX and two exporters.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ingest.decode import DecodeError, TemplateCache, decode, decode_into
from ingest.decode.batch import FlowBatch, concat_rows
from ingest.pcapread import read_udp
from schemas.columns import FLOW_DTYPE
from tests.support.fixtures_path import SHARED_FIXTURES
from devtools import nfbuild as b

CAPTURES = Path(__file__).resolve().parents[3] / "captures"
PCAPS = [
    SHARED_FIXTURES / "exports" / "softflowd_v9.pcap",
    SHARED_FIXTURES / "exports" / "softflowd_ipfix.pcap",
    CAPTURES / "shared" / "exports" / "softflowd_v9.pcap",
    CAPTURES / "shared" / "exports" / "softflowd_ipfix.pcap",
    CAPTURES / "pmacct_nfprobe_v9" / "pmacct_nfprobe_v9.pcap",
    CAPTURES / "pmacct_nfprobe_ipfix" / "pmacct_nfprobe_ipfix.pcap",
    CAPTURES / "softflowd_v5" / "softflowd_v5.pcap",
    SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate8.pcap",
]


def _cache(**kw) -> TemplateCache:
    return TemplateCache(**kw)


def _outcome(res) -> tuple:
    return (res.header, dict(res.problems), res.templates_learned, res.templates_withdrawn, len(res.counters))


def run_reference(steps, **cache_kw):
    """Per-datagram decode(): rows per exporter (arrival order) and per-datagram outcomes."""
    cache = _cache(**cache_kw)
    rows: dict[str, list] = {}
    outcomes = []
    for d, exporter, recv_ms, _flush in steps:
        try:
            res = decode(d, exporter, recv_ms, cache)
        except DecodeError as e:
            outcomes.append(("error", e.protocol, e.reason, e.offset))
            continue
        outcomes.append(_outcome(res))
        if len(res.flows):
            rows.setdefault(exporter, []).append(res.flows)
    return {k: concat_rows(v) for k, v in rows.items()}, outcomes


def run_batched(steps, **cache_kw):
    """decode_into() + one FlowBatch per exporter, decoded at every flush point (as the pipeline does)."""
    cache = _cache(**cache_kw)
    batches: dict[str, FlowBatch] = {}
    rows: dict[str, list] = {}
    outcomes = []
    counted: Counter = Counter()

    def flush():
        for exp, bt in batches.items():
            arr = bt.decode()
            assert not bt.failed_records
            assert arr.dtype == FLOW_DTYPE and len(arr) == bt.records
            if len(arr):
                rows.setdefault(exp, []).append(arr)
        batches.clear()

    for d, exporter, recv_ms, do_flush in steps:
        bt = batches.setdefault(exporter, FlowBatch())
        before = bt.records
        try:
            res = decode_into(d, exporter, recv_ms, cache, bt)
        except DecodeError as e:
            assert bt.records == before  # a malformed datagram adds nothing
            outcomes.append(("error", e.protocol, e.reason, e.offset))
        else:
            outcomes.append(_outcome(res))
            if len(res.flows):
                bt.add_rows(res.flows)
            counted[exporter] += bt.records - before
        if do_flush:
            flush()
    flush()
    out = {k: concat_rows(v) for k, v in rows.items()}
    assert {k: len(v) for k, v in out.items()} == {k: v for k, v in counted.items() if v}
    return out, outcomes


def assert_same(steps, **cache_kw):
    ref_rows, ref_out = run_reference(steps, **cache_kw)
    new_rows, new_out = run_batched(steps, **cache_kw)
    assert new_out == ref_out
    assert sorted(new_rows) == sorted(ref_rows)
    for exp, ref in ref_rows.items():
        got = new_rows[exp]
        assert len(got) == len(ref), exp
        if got.tobytes() != ref.tobytes():
            for name in FLOW_DTYPE.names:  # name the first differing column
                np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
        assert got.tobytes() == ref.tobytes()
    return ref_rows


# --------------------------------------------------------------------------- real captures


def _payloads(path: Path) -> list[bytes]:
    return [pkt.payload for pkt in read_udp(str(path))] if path.exists() else []


@pytest.mark.parametrize("path", PCAPS, ids=lambda p: p.name)
@pytest.mark.parametrize("flush_every", [1, 3, 1000])
def test_captures_batched_equals_per_datagram(path, flush_every):
    data = _payloads(path)
    if not data:
        pytest.skip(f"{path} not present")
    steps = [(d, "192.0.2.7", 1_700_000_000_000 + i, (i + 1) % flush_every == 0) for i, d in enumerate(data)]
    rows = assert_same(steps)
    if "sfprobe" not in path.name:
        assert sum(len(v) for v in rows.values()) > 0


def test_all_captures_interleaved_two_exporters():
    """v9, IPFIX, v5 and sFlow from two exporters interleaved; flushed every 5 datagrams."""
    streams = [_payloads(p) for p in PCAPS]
    steps, i = [], 0
    while any(streams):
        for k, s in enumerate(streams):
            if s:
                steps.append((s.pop(0), f"192.0.2.{k % 2 + 1}", 1_700_000_000_000 + i, i % 5 == 4))
                i += 1
    if not steps:
        pytest.skip("no captures")
    assert_same(steps)


def test_bench_stream_two_templates_per_datagram():
    """The bench's softflowd-shaped stream: an IPv4 and an IPv6 set per datagram (reordering matters)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
    from devtools.loadgen import netflow_stream

    for version in (9, 10):
        s = netflow_stream(version, pool=40)
        steps = [(s.templates[0], "10.0.0.1", 1_700_000_000_000, False)]
        steps += [(d, "10.0.0.1", 1_700_000_000_000 + i, i % 17 == 16) for i, d in enumerate(s.data)]
        rows = assert_same(steps)
        assert len(rows["10.0.0.1"]) == sum(s.records)


# --------------------------------------------------------------------------- generated sequences

# (IE, lengths) for data templates; NetFlow v9 and IPFIX share these numbers.
FIELD_POOL = [
    (8, [4]), (12, [4]), (27, [16]), (28, [16]), (1, [4, 8, 2, 3]), (2, [4, 8, 1]), (4, [1]), (5, [1]), (6, [1, 2]),
    (7, [2]), (11, [2]), (10, [2, 4]), (14, [4]), (21, [4]), (22, [4]), (150, [4]), (151, [4]), (152, [8]),
    (153, [8]), (154, [8]), (155, [8]), (156, [8, 4]), (157, [8]), (158, [4]), (159, [4]), (32, [2]), (176, [1]),
    (177, [1]), (139, [2]), (48, [1, 2]), (302, [4]), (34, [4]), (305, [4]), (306, [4]), (309, [4]), (310, [4]),
    (60, [1]), (61, [1]), (58, [2]), (243, [2]), (160, [8]), (999, [3]), (85, [8]), (86, [8]),
]
TIDS = [256, 257, 300]
OPT_TID = 400


@st.composite
def template_fields(draw, ipfix: bool):
    k = draw(st.integers(1, 9))
    picks = draw(st.lists(st.sampled_from(FIELD_POOL), min_size=k, max_size=k))
    fields = [(ie, draw(st.sampled_from(lens))) for ie, lens in picks]
    if ipfix and draw(st.integers(0, 3)) == 0:
        fields.insert(draw(st.integers(0, len(fields))), (96, 0xFFFF))  # variable length
    if ipfix and draw(st.integers(0, 4)) == 0:
        fields.append((1, 4, 29305))  # enterprise-specific: skipped
    return fields


def _rec_len(fields) -> int:
    return sum(f[1] for f in fields if f[1] != 0xFFFF)


def _record(draw, fields) -> bytes:
    out = b""
    for f in fields:
        if f[1] == 0xFFFF:
            out += b.varlen(draw(st.binary(max_size=6)), long=draw(st.booleans()))
        elif f[0] in (4,) and draw(st.booleans()):
            out += bytes([draw(st.sampled_from([1, 6, 17, 58]))])  # ICMP sometimes
        elif f[0] == 60 and draw(st.booleans()):
            out += bytes([draw(st.sampled_from([4, 6]))])
        else:
            out += draw(st.binary(min_size=f[1], max_size=f[1]))
    return out


@st.composite
def datagram(draw, defs: dict):
    """One v9 or IPFIX datagram; ``defs`` tracks (version, domain, tid) -> fields as the generator sees it."""
    ipfix = draw(st.booleans())
    version = 10 if ipfix else 9
    domain = draw(st.integers(0, 1))
    sets = []
    known = [k[2] for k in defs if k[:2] == (version, domain) and k[2] != OPT_TID]
    if not known and draw(st.integers(0, 9)) < 7:  # mostly: a template before the data
        tid = draw(st.sampled_from(TIDS))
        fields = defs[(version, domain, tid)] = draw(template_fields(ipfix))
        sets.append(b.ipfix_template_set((tid, fields)) if ipfix else b.v9_template_set((tid, fields)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["data", "data", "data", "template", "options_t", "options_d", "withdraw", "junk"]))
        if kind == "template":
            tid = draw(st.sampled_from(TIDS))
            fields = draw(template_fields(ipfix))
            defs[(version, domain, tid)] = fields
            sets.append(b.ipfix_template_set((tid, fields)) if ipfix else b.v9_template_set((tid, fields)))
        elif kind == "options_t":
            opt = [(34, 4), (48, 1), (160, 8)] if draw(st.booleans()) else [(305, 4), (306, 4)]
            defs[(version, domain, OPT_TID)] = [(1 if not ipfix else 302, 4)] + opt
            if ipfix:
                sets.append(b.ipfix_options_template_set(OPT_TID, [(302, 4)], opt))
            else:
                sets.append(b.v9_options_template_set(OPT_TID, [(1, 4)], opt, pad=draw(st.booleans())))
        elif kind == "options_d":
            fields = defs.get((version, domain, OPT_TID))
            if fields is None:
                continue
            recs = b""
            for _ in range(draw(st.integers(1, 2))):
                for ie, ln in fields:
                    if ie == 160:
                        recs += struct.pack("!Q", draw(st.integers(0, 1 << 50)))
                    elif ie == 48:
                        recs += bytes([draw(st.integers(0, 3))])
                    else:
                        recs += draw(st.integers(0, 5000)).to_bytes(ln, "big")
            sets.append(b.data_set(OPT_TID, recs, pad=not ipfix and draw(st.booleans())))
        elif kind == "withdraw":
            if ipfix:
                tid = draw(st.sampled_from(TIDS + [2]))
                sets.append(b.ipfix_withdraw(tid))
                if tid == 2:
                    for key in [k for k in defs if k[:2] == (version, domain) and k[2] != OPT_TID]:
                        del defs[key]
                else:
                    defs.pop((version, domain, tid), None)
        elif kind == "junk":
            set_id = draw(st.sampled_from([4, 100, 255]))  # reserved ids
            sets.append(struct.pack("!HH", set_id, 8) + draw(st.binary(min_size=4, max_size=4)))
        else:
            known = [k[2] for k in defs if k[:2] == (version, domain) and k[2] != OPT_TID]
            tid = draw(st.sampled_from(known)) if known and draw(st.integers(0, 4)) else draw(st.sampled_from(TIDS))
            fields = defs.get((version, domain, tid))
            if fields is None:  # data before (or without) its template: random bytes
                body = draw(st.binary(max_size=60))
            else:
                n = draw(st.integers(0, 30))
                body = b"".join(_record(draw, fields) for _ in range(n))
                body += draw(st.binary(max_size=max(0, _rec_len(fields) - 1)))  # a truncated last record
            sets.append(b.data_set(tid, body, pad=draw(st.booleans())))
    seq = draw(st.integers(0, 50))
    if ipfix:
        d = b.ipfix(*sets, seq=seq, domain=domain, export_s=b.EXPORT_S + draw(st.integers(0, 5)))
    else:
        d = b.v9(*sets, seq=seq, source_id=domain, uptime=draw(st.sampled_from([100_000, 5, 0xFFFFFFF0])))
    if draw(st.integers(0, 9)) == 0:  # malformed: cut somewhere (often a DecodeError)
        d = d[: draw(st.integers(0, len(d)))]
    return d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_sequences_batched_equals_per_datagram(data):
    defs: dict = {}
    steps = []
    recv = 1_700_000_000_000
    for _ in range(data.draw(st.integers(1, 14))):
        d = data.draw(datagram(defs))
        # occasionally a long silence: templates (expiry 60 s) and held sets (hold 30 s) expire
        recv += data.draw(st.sampled_from([1, 1, 1, 10, 61_000]))
        exporter = data.draw(st.sampled_from(["192.0.2.1", "192.0.2.1", "2001:db8::2"]))
        steps.append((d, exporter, recv, data.draw(st.integers(0, 4)) == 0))
    rows = assert_same(steps, expiry_s=60.0, pending_hold_s=30.0)
    n = sum(len(v) for v in rows.values())
    event(f"records: {'0' if n == 0 else '1-20' if n <= 20 else '>20'}")
    starts = np.concatenate([v["time_start_ms"] for v in rows.values()]) if n else np.zeros(0)
    event(f"distinct time_start values: {'>1' if len(np.unique(starts)) > 1 else '<=1'}")


def test_template_redefined_between_arrival_and_flush():
    """Sets keep the template in effect when they arrived, even after a redefinition with the same id."""
    t1 = [(8, 4), (12, 4), (1, 4)]
    t2 = [(12, 4), (8, 4), (2, 4), (1, 8)]
    r1 = b"\x0a\x00\x00\x01\x0a\x00\x00\x02" + struct.pack("!I", 100)
    r2 = b"\x0a\x00\x00\x03\x0a\x00\x00\x04" + struct.pack("!IQ", 7, 200)
    steps = [
        (b.v9(b.v9_template_set((256, t1)), b.data_set(256, r1 * 3)), "10.0.0.1", 1000, False),
        (b.v9(b.data_set(256, r1)), "10.0.0.1", 1001, False),
        (b.v9(b.v9_template_set((256, t2)), b.data_set(256, r2 * 2)), "10.0.0.1", 1002, False),
        (b.ipfix(b.ipfix_template_set((256, t1)), b.data_set(256, r1)), "10.0.0.1", 1003, False),
        (b.ipfix(b.ipfix_withdraw(256), b.data_set(256, r1)), "10.0.0.1", 1004, False),
    ]
    rows = assert_same(steps)["10.0.0.1"]
    assert rows["bytes"].tolist() == [100, 100, 100, 100, 200, 200, 100]
    assert rows["export_protocol"].tolist() == [3] * 6 + [4]


def test_sampling_learned_after_arrival_does_not_change_earlier_sets():
    """A rate announced by a later options record applies to later sets only (as per datagram)."""
    tmpl = [(8, 4), (12, 4), (1, 4), (2, 4)]
    rec = bytes(8) + struct.pack("!II", 1000, 10)
    opts = b.v9_options_template_set(OPT_TID, [(1, 4)], [(34, 4), (35, 1)], pad=False)
    steps = [
        (b.v9(b.v9_template_set((256, tmpl)), b.data_set(256, rec)), "10.0.0.1", 1000, False),
        (b.v9(opts, b.data_set(OPT_TID, struct.pack("!IIB", 0, 100, 2), pad=False), b.data_set(256, rec)),
         "10.0.0.1", 1001, False),
    ]
    rows = assert_same(steps)["10.0.0.1"]
    assert rows["sampling_rate"].tolist() == [1, 100]
    assert rows["bytes_est"].tolist() == [1000, 100_000]


def test_malformed_datagram_adds_nothing_and_raises_at_receive():
    tmpl = b.v9_template_set((256, [(8, 4), (12, 4)]))
    good = b.data_set(256, bytes(8) * 4)
    bad = struct.pack("!HH", 256, 2)  # set length < 4
    cache, bt = TemplateCache(), FlowBatch()
    with pytest.raises(DecodeError) as e:
        decode_into(b.v9(tmpl, good, bad), "10.0.0.1", 1, cache, bt)
    assert e.value.reason == "bad_length"
    assert bt.records == 0 and len(bt.decode()) == 0


def test_kernel_failure_drops_only_that_set():
    """A decoder bug at flush costs the failing set's records (counted), not the batch."""
    cache, bt = TemplateCache(), FlowBatch()
    tmpl = b.v9_template_set((256, [(8, 4), (12, 4), (1, 4)]))
    decode_into(b.v9(tmpl, b.data_set(256, bytes(12) * 2)), "10.0.0.1", 1, cache, bt)
    decode_into(b.v9(b.data_set(256, bytes(12) * 3)), "10.0.0.1", 2, cache, bt)
    g = next(iter(bt._groups.values()))
    t, plan, const, body, n, *rest = g.sets[1]
    g.sets[1] = (t, plan, const, body[:-1], n, *rest)  # corrupt: one byte short
    arr = bt.decode()
    assert len(arr) == 2 and bt.failed_records == {"netflow9": 3}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_column_kernel_equals_byte_gather(data):
    """The column-wise kernel writes exactly the bytes of the plan's byte-gather index."""
    from ingest.decode import _nf_plan as P
    from ingest.decode.batch import _gather_bytes

    ipfix = data.draw(st.booleans())
    fields = [f for f in data.draw(template_fields(ipfix)) if f[1] != 0xFFFF]
    plan = P.plan_for([(f[0], f[2] if len(f) == 3 else 0, f[1]) for f in fields], "ipfix" if ipfix else "netflow9")
    if plan.rec_len == 0:
        return
    counts = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    consts = b"".join(
        P.const_block(data.draw(st.sampled_from([3, 4])), data.draw(st.binary(min_size=16, max_size=16)),
                      data.draw(st.integers(0, 2**32)), data.draw(st.integers(0, 2**42)),
                      data.draw(st.integers(0, 2**42)), data.draw(st.integers(1, 2**40)))
        for _ in counts
    )
    records = data.draw(st.binary(min_size=sum(counts) * plan.rec_len, max_size=sum(counts) * plan.rec_len))
    cnt = np.asarray(counts, dtype=np.intp)
    ref = _gather_bytes(plan, consts, records, cnt, len(counts), int(cnt.sum()))
    got = P.gather_columns(plan, plan.columns(), consts, records, cnt, len(counts), int(cnt.sum()))
    assert got.tobytes() == ref.tobytes()
    if len(counts) == 1:  # the per-datagram gather is the same kernel
        assert plan.gather(records, counts[0], consts).tobytes() == ref.tobytes()


def test_fallback_keeps_arrival_order_across_templates():
    """The set-by-set fallback returns the remaining rows in arrival order (two templates + decoded rows)."""
    ta, tb = [(8, 4), (12, 4), (1, 4)], [(1, 4), (2, 4)]
    tmpl = b.v9_template_set((256, ta), (257, tb))
    sets = [
        (256, b"".join(bytes(8) + struct.pack("!I", 100 + i) for i in range(2))),
        (257, b"".join(struct.pack("!II", 200 + i, 1) for i in range(3))),
        (256, b"".join(bytes(8) + struct.pack("!I", 300 + i) for i in range(2))),
    ]
    cache, bt = TemplateCache(), FlowBatch()
    decode_into(b.v9(tmpl), "10.0.0.1", 1, cache, bt)
    for k, (tid, recs) in enumerate(sets):
        decode_into(b.v9(b.data_set(tid, recs)), "10.0.0.1", 2 + k, cache, bt)
    extra = decode(b.v9(b.data_set(257, struct.pack("!II", 400, 1))), "10.0.0.1", 9, cache).flows
    bt.add_rows(extra)
    assert bt.decode()["bytes"].tolist() == [100, 101, 200, 201, 202, 300, 301, 400]
    g = bt._groups[cache.peek(("10.0.0.1", 9, 0, 256))]
    t, plan, const, body, n, *rest = g.sets[0]
    g.sets[0] = (t, plan, const, body[:-1], n, *rest)
    assert bt.decode()["bytes"].tolist() == [200, 201, 202, 300, 301, 400]
    assert bt.failed_records == {"netflow9": 2}
