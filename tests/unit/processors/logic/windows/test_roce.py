"""RoCEv2 operation classes from BTH opcodes: the table, and sFlow datagrams built from the IBTA BTH layout."""

from __future__ import annotations

import numpy as np

from ingest.decode import TemplateCache
from ingest.decode.sflow import decode_sflow
from processors.logic.windows.roce import OP_OF_OPCODE, ROCE_OPS, roce_op_codes, roce_op_columns
from devtools import sflow_build as b

# (opcode, class) from IBTA vol. 1 table 35 (RC 0x00-0x17, UC 0x20-0x2B, UD 0x64-0x65) and the RoCEv2 CNP
SPEC = [(0x00, "send"), (0x05, "send"), (0x16, "send"), (0x17, "send"), (0x06, "write"), (0x0B, "write"),
        (0x0C, "read_request"), (0x0D, "read_response"), (0x10, "read_response"), (0x11, "ack"),
        (0x12, "atomic"), (0x13, "atomic"), (0x14, "atomic"), (0x20, "send"), (0x2A, "write"), (0x64, "send"),
        (0x65, "send"), (0xA0, "send"), (0x81, "cnp")]
NOT_OPS = [-1, 0x15, 0x18, 0x1F, 0x2C, 0x31, 0x66, 0x6C, 0x80, 0x82, 0xFF, 300]


def test_table_follows_the_spec():
    got = roce_op_codes([o for o, _ in SPEC] + NOT_OPS)
    assert [ROCE_OPS[c] for c in got[: len(SPEC)]] == [c for _, c in SPEC]
    assert (got[len(SPEC):] == -1).all() and got.dtype == np.int8
    assert len(OP_OF_OPCODE) == 257


def test_opcodes_from_sflow_header_samples():
    """The decoder reads the BTH opcode (first byte after the UDP header to port 4791); the class follows."""
    samples = [b.flow_sample([b.raw_header(b.eth(b.ipv4(b.udp(49152, 4791, b.bth(opc, 0x1234)), 17)))], rate=100)
               for opc, _ in SPEC]
    r = decode_sflow(b.datagram(samples), "192.0.2.1", 1, TemplateCache())
    assert r.flows["roce_opcode"].tolist() == [o for o, _ in SPEC]
    assert r.flows["roce_dest_qp"].tolist() == [0x1234] * len(SPEC)
    cols = roce_op_columns(r.flows["roce_opcode"], r.flows["packets_est"])
    assert cols["roce_write_packets_est"].sum() == 100 * sum(c == "write" for _, c in SPEC)
    assert cols["roce_read_response_packets_est"].sum() == 200 and "roce_cnp_packets_est" not in cols
