"""NetFlow v9 encoder (RFC 3954, our own struct-based code) and exporter.

One data template (256) with IPv4 5-tuple, ToS, TCP flags, interfaces, 64-bit packet
and byte counters, FIRST/LAST_SWITCHED (sysUptime ms), DIRECTION and FLOW_SAMPLER_ID;
two options templates: 257 (scope System: SAMPLING_INTERVAL 34, SAMPLING_ALGORITHM 35,
FLOW_ACTIVE_TIMEOUT 36, FLOW_INACTIVE_TIMEOUT 37) and 258 (scope System:
FLOW_SAMPLER_ID 48, FLOW_SAMPLER_MODE 49, FLOW_SAMPLER_RANDOM_INTERVAL 50).
The header sequence counts export packets; ``count`` counts all records in the packet.
"""

from __future__ import annotations

import struct

from .base import TemplateExporter, pad4, padded_set, records_set
from .flowcache import FlowEntry

DATA_TEMPLATE_ID, OPT_SAMPLING_ID, OPT_SAMPLER_ID = 256, 257, 258
SAMPLER_ID = 1
# (field type, length)
DATA_FIELDS = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (6, 1), (5, 1), (10, 4), (14, 4), (2, 8), (1, 8), (22, 4),
               (21, 4), (61, 1), (48, 2)]  # fmt: skip
DATA_FMT = ">IIHHBBBIIQQIIBH"
SCOPE_SYSTEM = 1
OPT_SAMPLING_FIELDS = [(34, 4), (35, 1), (36, 2), (37, 2)]
OPT_SAMPLER_FIELDS = [(48, 2), (49, 1), (50, 4)]
MASK32 = 0xFFFFFFFF


def header(count: int, sys_uptime_ms: int, unix_secs: int, sequence: int, source_id: int) -> bytes:
    return struct.pack(">HHIIII", 9, count, sys_uptime_ms & MASK32, unix_secs & MASK32, sequence & MASK32, source_id)


def template_flowset(templates: list[tuple[int, list[tuple[int, int]]]]) -> bytes:
    body = b"".join(struct.pack(">HH", tid, len(f)) + b"".join(struct.pack(">HH", *x) for x in f) for tid, f in templates)
    return pad4(struct.pack(">HH", 0, 4 + len(body)) + body)


def options_template_flowset(tid: int, scopes: list[tuple[int, int]], fields: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">HHH", tid, 4 * len(scopes), 4 * len(fields))
    body += b"".join(struct.pack(">HH", *x) for x in scopes + fields)
    return padded_set(1, body)


class Netflow9Exporter(TemplateExporter):
    header_len = 20
    record_len = struct.calcsize(DATA_FMT)
    kind = "netflow9"

    def template_sets(self):
        c = self.cfg
        sets = [
            template_flowset([(DATA_TEMPLATE_ID, DATA_FIELDS)]),
            options_template_flowset(OPT_SAMPLING_ID, [(SCOPE_SYSTEM, 4)], OPT_SAMPLING_FIELDS),
            options_template_flowset(OPT_SAMPLER_ID, [(SCOPE_SYSTEM, 4)], OPT_SAMPLER_FIELDS),
            records_set(OPT_SAMPLING_ID, [struct.pack(">IIBHH", c.source_id, c.sampling_interval, 2 if c.sampling_interval > 1 else 0,
                                                       int(c.active_timeout_s), int(c.inactive_timeout_s))]),
            records_set(OPT_SAMPLER_ID, [struct.pack(">IHBI", c.source_id, SAMPLER_ID, 2 if c.sampling_interval > 1 else 0,
                                                      c.sampling_interval)]),
        ]  # fmt: skip
        return sets, 3, 2

    def data_set(self, recs: list[FlowEntry], start_ms: int, skew_ms: int) -> bytes:
        up = start_ms - self.boot_ms
        rows = [
            struct.pack(DATA_FMT, e.src, e.dst, e.sport, e.dport, e.proto, e.tcp_flags & 0xFF, e.tos, e.in_if, e.out_if,
                        e.packets, e.bytes, (up + e.first_ms) & MASK32, (up + e.last_ms) & MASK32, 0, SAMPLER_ID)
            for e in recs
        ]  # fmt: skip
        self.data_records += len(recs)
        return records_set(DATA_TEMPLATE_ID, rows)

    def message(self, sets, n_records, n_data, event_abs_ms, clock_abs_ms) -> bytes:
        self.messages += 1
        hdr = header(n_records, event_abs_ms - self.boot_ms, clock_abs_ms // 1000, self.messages, self.cfg.source_id)
        return hdr + b"".join(sets)
