"""SequenceTracker: gaps, reordering, duplicates, wrap, restarts and per-protocol semantics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.decode.result import ExportHeader
from ingest.decode.sequence import SequenceTracker


def H(seq, inc=1, proto="sflow5", exporter="10.0.0.1", domain=0, uptime=None):
    return ExportHeader(proto, exporter, domain, seq & 0xFFFFFFFF, inc, None, uptime)


def feed(tr, headers):
    return [tr.observe(h) for h in headers]


def test_in_order_no_loss():
    tr = SequenceTracker()
    assert feed(tr, [H(s) for s in range(1, 101)]) == [0] * 100
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert (s.lost, s.received, s.packets, s.duplicates, s.restarts, s.reordered) == (0, 100, 100, 0, 0, 0)


def test_gap_counts_lost_datagrams():
    tr = SequenceTracker()
    out = feed(tr, [H(1), H(2), H(5), H(6), H(10)])
    assert out == [0, 0, 2, 0, 3]
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert s.lost == 5 and s.received == 5
    assert abs(s.loss_ratio - 0.5) < 1e-9


def test_reordered_packet_fills_gap():
    tr = SequenceTracker()
    out = feed(tr, [H(1), H(2), H(4), H(3), H(5)])
    assert out == [0, 0, 1, -1, 0]
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert (s.lost, s.reordered, s.duplicates, s.received) == (0, 1, 0, 5)


def test_duplicates_are_not_loss():
    tr = SequenceTracker()
    out = feed(tr, [H(1), H(2), H(2), H(3), H(1)])
    assert out == [0, 0, 0, 0, 0]
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert (s.lost, s.duplicates, s.received, s.packets) == (0, 2, 3, 5)
    # a late packet that already filled its gap arrives again: duplicate
    tr2 = SequenceTracker()
    feed(tr2, [H(1), H(3), H(2), H(2)])
    s2 = tr2.get("10.0.0.1", "sflow5", 0)
    assert (s2.lost, s2.reordered, s2.duplicates) == (0, 1, 1)


def test_32bit_wrap_is_not_loss():
    tr = SequenceTracker()
    seqs = [0xFFFFFFFD, 0xFFFFFFFE, 0xFFFFFFFF, 0, 1, 3]
    assert feed(tr, [H(s) for s in seqs]) == [0, 0, 0, 0, 0, 1]
    assert tr.get("10.0.0.1", "sflow5", 0).restarts == 0


def test_wrap_with_records_and_reorder_across_wrap():
    tr = SequenceTracker()
    out = feed(tr, [H(0xFFFFFFF0, 10, "ipfix"), H(0xFFFFFFFA + 20, 5, "ipfix"), H(0xFFFFFFFA, 20, "ipfix")])
    assert out == [0, 20, -20]
    assert tr.get("10.0.0.1", "ipfix", 0).lost == 0


def test_restart_by_big_backwards_jump():
    tr = SequenceTracker()
    out = feed(tr, [H(50000), H(50001), H(3), H(4), H(6)])
    assert out == [0, 0, 0, 0, 1]
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert (s.restarts, s.lost, s.duplicates) == (1, 1, 0)


def test_restart_by_uptime_going_backwards():
    tr = SequenceTracker()
    # sequence continues plausibly but uptime resets: restart, and the jump is not loss
    out = feed(tr, [H(100, uptime=3_600_000), H(101, uptime=3_601_000), H(900, uptime=500), H(901, uptime=1500)])
    assert out == [0, 0, 0, 0]
    s = tr.get("10.0.0.1", "sflow5", 0)
    assert (s.restarts, s.lost) == (1, 0)


def test_uptime_jitter_and_wrap_are_not_restarts():
    tr = SequenceTracker()
    # late packet with slightly older uptime fills its gap instead of being a restart
    out = feed(tr, [H(1, uptime=100_000), H(3, uptime=102_000), H(2, uptime=101_000)])
    assert out == [0, 1, -1]
    # 32-bit millisecond uptime wrap
    out = feed(tr, [H(4, uptime=0xFFFFFF00), H(5, uptime=0x100)])
    assert out == [0, 0]
    assert tr.get("10.0.0.1", "sflow5", 0).restarts == 0


def test_netflow5_counts_flows():
    tr = SequenceTracker()
    # v5 header flow_sequence = flows before this packet; count 30 per packet; one packet of 30 lost
    out = feed(tr, [H(0, 30, "netflow5"), H(30, 30, "netflow5"), H(90, 12, "netflow5"), H(102, 30, "netflow5")])
    assert out == [0, 0, 30, 0]
    s = tr.get("10.0.0.1", "netflow5", 0)
    assert (s.lost, s.received) == (30, 102)


def test_netflow9_counts_packets():
    tr = SequenceTracker()
    out = feed(tr, [H(10, 1, "netflow9", domain=7), H(11, 1, "netflow9", domain=7), H(15, 1, "netflow9", domain=7)])
    assert out == [0, 0, 3]
    assert tr.get("10.0.0.1", "netflow9", 7).lost == 3
    assert tr.get("10.0.0.1", "netflow9", 8) is None


def test_ipfix_rfc_semantics():
    tr = SequenceTracker()
    # RFC 7011: sequence = records before this message
    out = feed(tr, [H(0, 5, "ipfix"), H(5, 3, "ipfix"), H(8, 7, "ipfix"), H(25, 2, "ipfix")])
    assert out == [0, 0, 0, 10]


def test_ipfix_softflowd_off_by_current():
    tr = SequenceTracker()
    # softflowd: sequence = records including this message
    out = feed(tr, [H(5, 5, "ipfix"), H(8, 3, "ipfix"), H(15, 7, "ipfix"), H(17, 2, "ipfix"), H(30, 3, "ipfix")])
    assert out == [0, 0, 0, 0, 10]
    s = tr.get("10.0.0.1", "ipfix", 0)
    assert (s.lost, s.duplicates, s.restarts) == (10, 0, 0)


def test_ipfix_off_by_current_with_equal_counts_first():
    tr = SequenceTracker()
    # equal counts cannot tell the readings apart; the first differing count decides
    out = feed(tr, [H(30, 30, "ipfix"), H(60, 30, "ipfix"), H(65, 5, "ipfix"), H(95, 30, "ipfix")])
    assert out == [0, 0, 0, 0]
    assert tr.get("10.0.0.1", "ipfix", 0).lost == 0


def test_streams_are_independent():
    tr = SequenceTracker()
    tr.observe(H(1, exporter="a"))
    tr.observe(H(100, exporter="b"))
    tr.observe(H(3, exporter="a"))
    tr.observe(H(101, exporter="b"))
    tr.observe(H(1, domain=2, exporter="a"))
    assert tr.get("a", "sflow5", 0).lost == 1
    assert tr.get("b", "sflow5", 0).lost == 0
    assert tr.get("a", "sflow5", 2).received == 1
    assert set(tr.stats) == {("a", "sflow5", 0), ("b", "sflow5", 0), ("a", "sflow5", 2)}


def test_max_streams_bound():
    tr = SequenceTracker(max_streams=3)
    for i in range(10):
        tr.observe(H(1, exporter=f"e{i}"))
    assert len(tr.stats) == 3


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=80, unique=True), st.randoms(use_true_random=False),
       st.integers(0, 0xFFFFFFFF))
def test_loss_equals_missing_after_local_shuffle(kept, rnd, base):
    """Any subset of a sequence, locally shuffled: final loss = missing inside the observed span."""
    kept = sorted(kept)
    order = list(kept)
    # shuffle within small blocks (bounded reordering)
    for i in range(0, len(order), 4):
        blk = order[i : i + 4]
        rnd.shuffle(blk)
        order[i : i + 4] = blk
    tr = SequenceTracker()
    for s in order:
        tr.observe(H(base + s))
    st_ = tr.get("10.0.0.1", "sflow5", 0)
    first = order[0]
    span_hi = max(kept)
    # packets before the first one observed are late, never loss
    expected_lost = sum(1 for x in range(first, span_hi + 1) if x not in set(kept))
    assert st_.lost == expected_lost
    assert st_.restarts == 0
    assert st_.duplicates == 0
    assert st_.received == len(kept)
