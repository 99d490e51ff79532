"""Counters are unsigned on the wire and signed 64-bit (Avro long) in the records: they saturate, never wrap.

Found by fuzzing (tests/fuzz/regressions/netflow9, .../ipfix): an 8-byte octet or packet count at or above
2**63 came out negative, and so did an estimate (count x sampling rate) past 2**63 - 1. Both paths are
checked: per-datagram ``decode`` and the ingest pipeline's ``decode_into`` + ``FlowBatch``.
"""

from __future__ import annotations

import struct

import pytest

from ingest.decode import TemplateCache, decode, decode_into
from ingest.decode._nf_plan import I64_MAX, PEN_REVERSE
from ingest.decode.batch import FlowBatch
from schemas.columns import addr16

from devtools import nfbuild as b

EXP = "192.0.2.1"
T_MS = b.EXPORT_S * 1000 + 5


def _both(*datagrams):
    """The flow rows of per-datagram decode() and of the batched path, for the same datagrams."""
    ref_cache, bat_cache, batch, ref = TemplateCache(), TemplateCache(), FlowBatch(), []
    for d in datagrams:
        ref.append(decode(d, EXP, T_MS, ref_cache).flows)
        decode_into(d, EXP, T_MS, bat_cache, batch)
    rows = [r for part in ref for r in part]
    return rows, batch.decode()


def _v4(a: str) -> bytes:
    return addr16(a)[12:]


@pytest.mark.parametrize("octets,packets", [(2**64 - 1, 2**63), (2**63, 1), (2**63 - 1, 2**63 - 1)])
def test_u64_counts_at_or_above_2_63_saturate(octets, packets):
    tmpl = b.ipfix_template_set((256, [(8, 4), (12, 4), (1, 8), (2, 8)]))
    rec = _v4("10.0.0.1") + _v4("10.0.0.2") + struct.pack("!QQ", octets, packets)
    v9 = b.v9(b.v9_template_set((300, [(8, 4), (12, 4), (1, 8), (2, 8)])), b.data_set(300, rec))
    ipfix = b.ipfix(tmpl, b.data_set(256, rec))
    for d in (v9, ipfix):
        ref, got = _both(d)
        assert len(ref) == len(got) == 1
        for row in (ref[0], got[0]):
            assert (row["bytes"], row["packets"]) == (min(octets, I64_MAX), min(packets, I64_MAX))
            assert (row["bytes_est"], row["packets_est"]) == (min(octets, I64_MAX), min(packets, I64_MAX))


def test_estimates_saturate_instead_of_wrapping():
    # sampling 1:2**30 from options; 2**40 octets x 2**30 would wrap an int64
    tmpl = b.ipfix(b.ipfix_template_set((256, [(8, 4), (12, 4), (1, 8), (2, 8)])),
                   b.ipfix_options_template_set(400, [(149, 4)], [(34, 4)]),
                   b.data_set(400, struct.pack("!II", 0, 2**30)))
    data = b.ipfix(b.data_set(256, _v4("10.0.0.1") + _v4("10.0.0.2") + struct.pack("!QQ", 2**40, 3)))
    ref, got = _both(tmpl, data)
    for row in (ref[0], got[0]):
        assert row["sampling_rate"] == 2**30
        assert (row["bytes"], row["bytes_est"]) == (2**40, I64_MAX)
        assert (row["packets"], row["packets_est"]) == (3, 3 * 2**30)  # the other column is scaled as usual


def test_biflow_reverse_count_saturates():
    fields = [(8, 4), (12, 4), (1, 8), (2, 8), (1, 8, PEN_REVERSE), (2, 8, PEN_REVERSE)]
    rec = _v4("10.0.0.1") + _v4("10.0.0.2") + struct.pack("!QQQQ", 100, 1, 2**64 - 2, 2**63 + 5)
    ref, got = _both(b.ipfix(b.ipfix_template_set((256, fields)), b.data_set(256, rec)))
    assert len(ref) == len(got) == 2  # forward and reverse
    for rows in (ref, got):
        assert (rows[0]["bytes"], rows[0]["packets"]) == (100, 1)
        assert (rows[1]["bytes"], rows[1]["packets"], rows[1]["bytes_est"]) == (I64_MAX, I64_MAX, I64_MAX)
