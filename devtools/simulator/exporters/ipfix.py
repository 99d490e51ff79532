"""IPFIX encoder (RFC 7011/7012, our own struct-based code) and exporter.

Data template 256: IPv4 5-tuple, tcpControlBits (2 bytes), ipClassOfService,
ingress/egressInterface, packetDeltaCount and octetDeltaCount (8 bytes),
flowStartMilliseconds/flowEndMilliseconds (absolute), flowDirection.
Options template 257, scope observationDomainId (149): samplingInterval (34),
samplingAlgorithm (35), samplingPacketInterval (305) = 1 and samplingPacketSpace
(306) = N - 1 (1-in-N), flowActiveTimeout (36), flowIdleTimeout (37).
The header sequence counts data records (options data included) sent before the message.
"""

from __future__ import annotations

import struct

from .base import TemplateExporter, padded_set, records_set
from .flowcache import FlowEntry

DATA_TEMPLATE_ID, OPT_SAMPLING_ID = 256, 257
DATA_FIELDS = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (6, 2), (5, 1), (10, 4), (14, 4), (2, 8), (1, 8), (152, 8),
               (153, 8), (61, 1)]  # fmt: skip
DATA_FMT = ">IIHHBHBIIQQQQB"
OPT_SCOPE = [(149, 4)]
OPT_FIELDS = [(34, 4), (35, 1), (305, 4), (306, 4), (36, 2), (37, 2)]
MASK32 = 0xFFFFFFFF


def header(length: int, export_secs: int, sequence: int, domain: int) -> bytes:
    return struct.pack(">HHIII", 10, length, export_secs & MASK32, sequence & MASK32, domain)


def template_set(tid: int, fields: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">HH", tid, len(fields)) + b"".join(struct.pack(">HH", *f) for f in fields)
    return struct.pack(">HH", 2, 4 + len(body)) + body


def options_template_set(tid: int, scopes: list[tuple[int, int]], fields: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">HHH", tid, len(scopes) + len(fields), len(scopes))
    body += b"".join(struct.pack(">HH", *f) for f in scopes + fields)
    return padded_set(3, body)


class IpfixExporter(TemplateExporter):
    header_len = 16
    record_len = struct.calcsize(DATA_FMT)
    kind = "ipfix"

    def template_sets(self):
        c = self.cfg
        n = c.sampling_interval
        opt = struct.pack(">IIBIIHH", c.source_id, n, 2 if n > 1 else 0, 1, n - 1, int(c.active_timeout_s), int(c.inactive_timeout_s))
        sets = [
            template_set(DATA_TEMPLATE_ID, DATA_FIELDS),
            options_template_set(OPT_SAMPLING_ID, OPT_SCOPE, OPT_FIELDS),
            records_set(OPT_SAMPLING_ID, [opt]),
        ]
        return sets, 2, 1

    def data_set(self, recs: list[FlowEntry], start_ms: int, skew_ms: int) -> bytes:
        base = start_ms + skew_ms
        rows = [
            struct.pack(DATA_FMT, e.src, e.dst, e.sport, e.dport, e.proto, e.tcp_flags, e.tos, e.in_if, e.out_if,
                        e.packets, e.bytes, base + e.first_ms, base + e.last_ms, 0)
            for e in recs
        ]  # fmt: skip
        return records_set(DATA_TEMPLATE_ID, rows)

    def message(self, sets, n_records, n_data, event_abs_ms, clock_abs_ms) -> bytes:
        body = b"".join(sets)
        msg = header(16 + len(body), clock_abs_ms // 1000, self.data_records, self.cfg.source_id) + body
        self.data_records += n_data
        self.messages += 1
        return msg
