"""Fuzzing: NetFlow v5/v9/IPFIX decode returns a result or raises DecodeError, nothing else, and never hangs."""

from __future__ import annotations

import struct
from pathlib import Path

import dpkt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.decode import DecodeError, TemplateCache, decode
from schemas.columns import FLOW_DTYPE
from tests.support.fixtures_path import SHARED_FIXTURES

from devtools import nfbuild as b

CAPTURES = Path(__file__).resolve().parents[3] / "captures"


def _payloads(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    with open(path, "rb") as fh:
        return [bytes(dpkt.ethernet.Ethernet(buf).data.data.data) for _ts, buf in dpkt.pcap.Reader(fh)]


GOLDEN = {
    "softflowd_v9": _payloads(SHARED_FIXTURES / "exports" / "softflowd_v9.pcap"),
    "softflowd_ipfix": _payloads(SHARED_FIXTURES / "exports" / "softflowd_ipfix.pcap"),
    "softflowd_v5": _payloads(CAPTURES / "softflowd_v5" / "softflowd_v5.pcap"),
    "pmacct_nfprobe_v9": _payloads(CAPTURES / "pmacct_nfprobe_v9" / "pmacct_nfprobe_v9.pcap")[:6],
    "pmacct_nfprobe_ipfix": _payloads(CAPTURES / "pmacct_nfprobe_ipfix" / "pmacct_nfprobe_ipfix.pcap")[:6],
    "softflowd_ipfix_biflow": _payloads(CAPTURES / "softflowd_ipfix_biflow" / "softflowd_ipfix_biflow.pcap"),
}
ALL = [d for v in GOLDEN.values() for d in v]
# hand-built ones with variable-length and enterprise fields, options and withdrawals
HAND = [
    b.ipfix(
        b.ipfix_template_set((256, [(8, 4), (96, 0xFFFF), (1, 4, 9), (300, 0xFFFF, 29305), (1, 4), (2, 4)])),
        b.ipfix_options_template_set(400, [(302, 4)], [(305, 4), (306, 4), (160, 8)]),
        b.data_set(400, struct.pack("!IIIQ", 7, 1, 9, 10**12)),
        b.data_set(256, b"\x0a\x00\x00\x01" + b.varlen(b"eth0") + bytes(4) + b.varlen(b"z" * 300) + struct.pack("!II", 9, 1)),
        b.ipfix_withdraw(257),
    ),
    b.v9(
        b.v9_template_set((300, [(8, 4), (12, 4), (1, 4), (2, 4), (48, 1), (22, 4), (21, 4)])),
        b.v9_options_template_set(257, [(1, 4)], [(48, 1), (50, 4)], pad=False),
        b.data_set(257, struct.pack("!IBI", 0, 1, 10), pad=False),
        b.data_set(300, bytes(8) + struct.pack("!IIBII", 100, 1, 1, 5, 6)),
    ),
]


def _check(datagram: bytes, cache: TemplateCache | None = None) -> None:
    cache = cache if cache is not None else TemplateCache()
    try:
        r = decode(datagram, "192.0.2.1", 1000, cache)
    except DecodeError as e:
        assert e.protocol in ("netflow5", "netflow9", "ipfix", "sflow5", "unknown")  # random bytes may start like sFlow v5
        return
    assert r.flows.dtype == FLOW_DTYPE


def _primed(kind: str) -> TemplateCache:
    """A cache that knows the capture's templates, so mutated data sets reach the record decoder."""
    cache = TemplateCache()
    for d in GOLDEN.get(kind, [])[:1] + HAND:
        decode(d, "192.0.2.1", 1000, cache)
    return cache


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_every_golden_datagram_truncated_at_every_offset(name):
    dgs = GOLDEN[name]
    if not dgs:
        pytest.skip("capture not present")
    cache = _primed(name)
    for d in dgs[:4]:
        for cut in range(len(d)):
            _check(d[:cut], cache)
            _check(d[:cut])


def test_hand_built_truncated_at_every_offset():
    for d in HAND:
        for cut in range(len(d)):
            _check(d[:cut], _primed(""))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes(data):
    _check(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([5, 9, 10]), st.binary(max_size=400))
def test_random_bodies_behind_valid_versions(version, body):
    _check(struct.pack("!H", version) + body, _primed("softflowd_v9"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_golden_datagrams(data):
    pool = ALL + HAND
    d = bytearray(data.draw(st.sampled_from(pool)))
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(d) - 1))
        d[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        # also mutate a 16-bit length/id field position near a set header
        pos = data.draw(st.integers(0, max(0, len(d) - 2)))
        d[pos : pos + 2] = struct.pack("!H", data.draw(st.sampled_from([0, 1, 2, 3, 4, 5, 255, 256, 0xFFFF, 1024])))
    _check(bytes(d), _primed("softflowd_ipfix" if d[1] == 10 else "softflowd_v9"))


@pytest.mark.parametrize("init_ms, expect_init", [(1_700_000_000_000, True), (2**63 + 5, False), (2**64 - 1, False)])
def test_system_init_time_beyond_any_clock_is_not_used(init_ms, expect_init):
    """An options record's systemInitTimeMilliseconds (IE 160) beyond any clock is ignored like a missing one
    (found by the mutation fuzz above: 2**63+ overflowed int64 in the uptime arithmetic)."""
    data = b.data_set(256, struct.pack("!IIIIII", 0x0A000001, 0x0A000002, 100, 200, 1000, 3))
    flows_t = b.ipfix_template_set((256, [(8, 4), (12, 4), (22, 4), (21, 4), (1, 4), (2, 4)]))
    options = b.ipfix_options_template_set(400, [(302, 4)], [(305, 4), (306, 4), (160, 8)])
    with_init = b.ipfix(flows_t, options, b.data_set(400, struct.pack("!IIIQ", 7, 1, 9, init_ms)), data)
    r = decode(with_init, "192.0.2.1", 1000, TemplateCache())
    plain = decode(b.ipfix(flows_t, data), "192.0.2.1", 1000, TemplateCache())
    assert len(r.flows) == len(plain.flows) == 1
    if expect_init:
        assert (int(r.flows["time_start_ms"][0]), int(r.flows["time_end_ms"][0])) == (init_ms + 100, init_ms + 200)
    else:
        assert r.flows["time_end_ms"][0] == plain.flows["time_end_ms"][0]
