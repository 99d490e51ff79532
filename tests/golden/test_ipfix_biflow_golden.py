"""softflowd bidirectional IPFIX (RFC 5103, ``softflowd -b``) decoded against tshark's figures.

tests/captures/softflowd_ipfix_biflow/: 132 biflow records of the shared
fixture's traffic; tshark's decode (``tests/support/tshark_expected.py --biflow``) gives 247
directional records, which together carry every packet and IP byte of the
input traffic (5,771 packets, 25,224,419 bytes).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from ingest.decode import TemplateCache, decode
from ingest.decode.batch import FlowBatch
from schemas.columns import FLOW_DTYPE, addr_str
from tests.support.golden import CAPTURES, udp_payloads

CASE = CAPTURES / "softflowd_ipfix_biflow"


def _tuple(src, dst, proto, sp, dp, packets, nbytes, tos, flags):
    ports = (0, 0) if proto in (1, 58) else (sp, dp)
    return (src, dst, proto, *ports, packets, nbytes, tos, flags)


@pytest.fixture(scope="module")
def biflow():
    dgs = udp_payloads(CASE / "softflowd_ipfix_biflow.pcap")
    cache = TemplateCache()
    results = [decode(p, src, int(ts * 1000), cache) for ts, src, p in dgs]
    return dgs, results, np.concatenate([r.flows for r in results])


def test_biflow_records_become_directional_records(biflow):
    _, results, flows = biflow
    exp = json.loads((CASE / "expected.json").read_text())
    assert flows.dtype == FLOW_DTYPE and len(flows) == exp["directional_records"] == 247
    got = Counter(_tuple(addr_str(r["src_addr"]), addr_str(r["dst_addr"]), int(r["ip_protocol"]), int(r["src_port"]),
                         int(r["dst_port"]), int(r["packets"]), int(r["bytes"]), int(r["tos"]), int(r["tcp_flags"]))
                  for r in flows)
    want = Counter(_tuple(e["src"], e["dst"], e["proto"], e["src_port"], e["dst_port"], e["packets"], e["bytes"],
                          e["tos"], e["tcp_flags"]) for e in exp["records"])
    assert got == want
    # every packet and IP byte of the input traffic, once
    assert int(flows["packets"].sum()) == 5771 and int(flows["bytes"].sum()) == 25_224_419
    assert all(not r.problems for r in results)


def test_biflow_header_sequence_counts_wire_records(biflow):
    _, results, _ = biflow
    h = [r.header for r in results]
    # the IPFIX sequence counts biflow (wire) records, not the directional rows they give
    assert sum(x.increment for x in h) == 132
    assert [b.sequence - a.sequence for a, b in zip(h, h[1:])] == [x.increment for x in h[1:]]


def test_reverse_rows_follow_their_forward_row_and_share_its_times(biflow):
    _, _, flows = biflow
    a, b = flows[:-1], flows[1:]
    pair = ((a["src_addr"] == b["dst_addr"]).all(axis=1) & (a["dst_addr"] == b["src_addr"]).all(axis=1)
            & (a["ip_protocol"] == b["ip_protocol"])
            & (np.isin(a["ip_protocol"], (1, 58)) | ((a["src_port"] == b["dst_port"]) & (a["dst_port"] == b["src_port"]))))
    # each of the 115 reverse rows comes right after its forward row (ICMP pairs may also be two forward rows)
    assert int(pair.sum()) >= 247 - 132
    i = np.flatnonzero(pair & ~np.isin(a["ip_protocol"], (1, 58)))
    assert (flows["time_start_ms"][i] == flows["time_start_ms"][i + 1]).all()
    assert (flows["time_end_ms"][i] == flows["time_end_ms"][i + 1]).all()


def test_batched_decode_gives_the_same_rows(biflow):
    dgs, _, flows = biflow
    from ingest.decode import decode_into

    cache = TemplateCache()
    batch = FlowBatch()
    for ts, src, p in dgs:
        decode_into(p, src, int(ts * 1000), cache, batch)
    assert batch.decode().tobytes() == flows.tobytes()
