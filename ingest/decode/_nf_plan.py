"""Compiled record layouts for NetFlow v5/v9 and IPFIX data records.

A template (list of ``(ie, pen, length)`` fixed-length fields) is compiled once
into a :class:`Plan`: a byte-gather index that turns ``n`` wire records
(big-endian, packed) plus a small per-datagram constant block directly into
``n`` rows of ``FLOW_DTYPE`` with one numpy fancy-index, followed by a few
vectorised fix-ups (timestamps, ICMP ports, dual-stack addresses, sampling).
Reduced-size encoding falls out of the gather: a 4-byte octetDeltaCount is its
4 bytes plus 4 zero bytes. Unknown and enterprise-specific fields are skipped.

Pure: no I/O, no clock. Used by ``netflow5``, ``netflow9`` and ``ipfix``.
"""

from __future__ import annotations

import struct
import sys

import numpy as np

from schemas.columns import FLOW_DTYPE

# Information elements we map (IANA numbers; NetFlow v9 types 1..79 are the same).
IE_IN_BYTES = 1
IE_IN_PKTS = 2
IE_PROTOCOL = 4
IE_TOS = 5
IE_TCP_FLAGS = 6
IE_L4_SRC_PORT = 7
IE_IPV4_SRC = 8
IE_INPUT_SNMP = 10
IE_L4_DST_PORT = 11
IE_IPV4_DST = 12
IE_OUTPUT_SNMP = 14
IE_LAST_SWITCHED = 21
IE_FIRST_SWITCHED = 22
IE_OUT_BYTES = 23
IE_OUT_PKTS = 24
IE_IPV6_SRC = 27
IE_IPV6_DST = 28
IE_ICMP_TYPE = 32
IE_SAMPLING_INTERVAL = 34
IE_SAMPLING_ALGORITHM = 35
IE_FLOW_SAMPLER_ID = 48
IE_FLOW_SAMPLER_MODE = 49
IE_FLOW_SAMPLER_RANDOM_INTERVAL = 50
IE_SRC_VLAN = 58
IE_IP_VERSION = 60
IE_DIRECTION = 61
IE_OCTET_TOTAL = 85
IE_PKT_TOTAL = 86
IE_ICMP_TYPE_CODE_V6 = 139
IE_FLOW_START_S = 150
IE_FLOW_END_S = 151
IE_FLOW_START_MS = 152
IE_FLOW_END_MS = 153
IE_FLOW_START_US = 154
IE_FLOW_END_US = 155
IE_FLOW_START_NS = 156
IE_FLOW_END_NS = 157
IE_FLOW_START_DELTA_US = 158
IE_FLOW_END_DELTA_US = 159
IE_SYSTEM_INIT_MS = 160
IE_ICMP_TYPE_V4 = 176
IE_ICMP_CODE_V4 = 177
IE_ICMP_TYPE_V6 = 178
IE_ICMP_CODE_V6 = 179
IE_DOT1Q_VLAN = 243
IE_POST_VLAN = 59
IE_DOT1Q_PRIORITY = 244
IE_NEXT_HOP_V4 = 15
IE_BGP_NEXT_HOP_V4 = 18
IE_NEXT_HOP_V6 = 62
IE_BGP_NEXT_HOP_V6 = 63

# RFC 5103 bidirectional flows: a reverse information element is the forward
# IE number under this private enterprise number (reverseOctetDeltaCount = 29305/1).
PEN_REVERSE = 29305
# Stands in for the PEN of fields a reverse plan must not read (never a real PEN in templates we build).
_PEN_HIDDEN = 0xFFFFFFFF
# Key fields whose source/destination roles swap in the reverse direction.
_REVERSE_SWAP = {8: 12, 12: 8, 27: 28, 28: 27, 7: 11, 11: 7, 10: 14, 14: 10}
# Non-key fields that describe one direction only: the reverse record takes them from their
# reverse IE or leaves them absent (the forward value would be wrong for the other direction).
_DIRECTIONAL = frozenset((1, 2, 23, 24, 85, 86, 6, 15, 62, 18, 63))
_REVERSE_COUNTERS = (2, 24, 86, 1, 23, 85)  # packets first: which reverse count decides whether a record exists
IE_SELECTOR_ID = 302
IE_SAMPLING_PACKET_INTERVAL = 305
IE_SAMPLING_PACKET_SPACE = 306
IE_SAMPLING_SIZE = 309
IE_SAMPLING_POPULATION = 310

NTP_UNIX_OFFSET_S = 2208988800  # seconds from 1900-01-01 to 1970-01-01

LITTLE = sys.byteorder == "little"  # host byte order: where a big-endian field's bytes go in a native integer

# Per-datagram constant block placed in front of the record bytes; the gather
# index points into it for columns that do not come from the record.
C_ZERO = 0
C_FF = 1
C_PROTO = 2
C_V4 = 3
C_V6 = 4
C_EXPORTER = 5  # 16 bytes
C_DOMAIN = 21  # native int64
C_RECV = 29
C_EXPORT = 37
C_RATE = 45
CONST_LEN = 53
_CONST_TAIL = struct.Struct("=qqqq")


def const_block(proto_code: int, exporter16: bytes, domain: int, recv_ms: int, export_ms: int, rate: int) -> bytes:
    """The constant bytes gathered into every row of one batch."""
    return bytes((0, 255, proto_code, 4, 6)) + exporter16 + _CONST_TAIL.pack(domain, recv_ms, export_ms, rate)


_COLS = {name: (FLOW_DTYPE.fields[name][0], FLOW_DTYPE.fields[name][1]) for name in FLOW_DTYPE.names}
ITEMSIZE = FLOW_DTYPE.itemsize

# Time sources by priority: (start IE, end IE, kind).
_TIME_SOURCES = (
    (IE_FLOW_START_MS, IE_FLOW_END_MS, "ms"),
    (IE_FLOW_START_US, IE_FLOW_END_US, "ntp"),
    (IE_FLOW_START_NS, IE_FLOW_END_NS, "ntp"),
    (IE_FLOW_START_S, IE_FLOW_END_S, "s"),
    (IE_FIRST_SWITCHED, IE_LAST_SWITCHED, "uptime"),
    (IE_FLOW_START_DELTA_US, IE_FLOW_END_DELTA_US, "delta_us"),
)


# Gather tables: per plan at most TABLE_ROWS rows (258 kB), all plans together at most _TABLE_BUDGET
# bytes, so many distinct templates (an exporter redefining one id with ever new layouts, or a fuzzer)
# cannot grow memory without bound: found by fuzzing, 4,096 biflow layouts held 5.9 GB before. At
# 128 rows the table and the column kernel cost about the same (docs/fuzzing.md).
TABLE_ROWS = 128
_TABLE_BUDGET = 32 << 20
_TABLES = [0]  # bytes of the live plans' tables


class _Gather:
    """The gather layout a :class:`Plan` builds: ``base[i]`` is, for output byte i of a row, the index of its source
    byte in (constants + record), or C_ZERO / C_FF. ``offs``: IE -> (offset, length) of the template's fields."""

    def __init__(self, offs: dict[int, tuple[int, int]]):
        self.offs = offs
        self.base = np.full(ITEMSIZE, C_ZERO, dtype=np.intp)

    def put_int(self, col: str, src_off: int, src_len: int, max_bytes: int | None = None):
        dt, coff = _COLS[col]
        size = dt.itemsize
        k = min(src_len, size if max_bytes is None else max_bytes)
        for j in range(size):
            pos = coff + j if LITTLE else coff + size - 1 - j
            self.base[pos] = CONST_LEN + src_off + src_len - 1 - j if j < k else C_ZERO

    def put_const_int(self, col: str, cpos: int):
        dt, coff = _COLS[col]
        for j in range(dt.itemsize):
            self.base[coff + j] = cpos + j

    def put_const_byte(self, col: str, cpos: int):
        dt, coff = _COLS[col]
        size = dt.itemsize
        for j in range(size):
            pos = coff + j if LITTLE else coff + size - 1 - j
            self.base[pos] = cpos if j == 0 else C_ZERO

    def fill(self, col: str, cpos: int):
        dt, coff = _COLS[col]
        self.base[coff : coff + dt.itemsize] = cpos

    def put_v4(self, col: str, src_off: int):
        _, coff = _COLS[col]
        self.base[coff : coff + 10] = C_ZERO
        self.base[coff + 10 : coff + 12] = C_FF
        self.base[coff + 12 : coff + 16] = np.arange(CONST_LEN + src_off, CONST_LEN + src_off + 4)

    def put_v6(self, col: str, src_off: int):
        _, coff = _COLS[col]
        self.base[coff : coff + 16] = np.arange(CONST_LEN + src_off, CONST_LEN + src_off + 16)

    def pick(self, *ies, max_len=8):
        for ie in ies:
            if ie in self.offs and self.offs[ie][1] <= max_len:
                return ie
        return None

    def put_ie(self, col, *ies, max_bytes=None):
        ie = self.pick(*ies)
        if ie is not None:
            self.put_int(col, self.offs[ie][0], self.offs[ie][1], max_bytes)
        return ie


class Plan:
    """Gather index + fix-up flags for one fixed-length record layout."""

    __slots__ = (
        "rec_len",
        "base",
        "_table",
        "_cols",
        "fields",
        "start_kind",
        "end_kind",
        "start_src",
        "end_src",
        "icmp_src",
        "icmp_where",
        "dual_af",
        "v6_src",
        "v6_dst",
        "has_ipver_field",
        "rate_fields",
        "has_sampler",
        "system_init_src",
        "reverse",
        "reverse_keep",
        "wide_counts",
    )

    def __init__(self, fields, protocol: str, v5: bool = False):
        self.fields = tuple(fields)
        offs: dict[int, tuple[int, int]] = {}
        off = 0
        for ie, pen, length in self.fields:
            if pen == 0 and ie not in offs and length > 0:
                offs[ie] = (off, length)
            off += length
        self.rec_len = off
        g = _Gather(offs)
        base = g.base

        # Constants.
        g.put_const_byte("export_protocol", C_PROTO)
        for i in range(16):
            base[_COLS["exporter_addr"][1] + i] = C_EXPORTER + i
        g.put_const_int("observation_domain", C_DOMAIN)
        g.put_const_int("time_received_ms", C_RECV)
        g.put_const_int("time_export_ms", C_EXPORT)
        g.put_const_int("sampling_rate", C_RATE)
        for col in ("vxlan_vni", "roce_opcode", "roce_dest_qp"):
            g.fill(col, C_FF)

        # Counters (bytes_est/packets_est start as a copy, scaled later). One read from 8 bytes
        # can be >= 2**63, negative as int64: ``wide_counts`` says saturate_counts() must run.
        self.wide_counts = False
        for col, ies in (("bytes", (IE_IN_BYTES, IE_OUT_BYTES, IE_OCTET_TOTAL)), ("packets", (IE_IN_PKTS, IE_OUT_PKTS, IE_PKT_TOTAL))):
            ie = g.put_ie(col, *ies)
            g.put_ie(col + "_est", *ies)
            self.wide_counts |= ie is not None and offs[ie][1] == 8

        # Addresses and IP version.
        v4s = IE_IPV4_SRC in offs and offs[IE_IPV4_SRC][1] == 4
        v4d = IE_IPV4_DST in offs and offs[IE_IPV4_DST][1] == 4
        v6s = IE_IPV6_SRC in offs and offs[IE_IPV6_SRC][1] == 16
        v6d = IE_IPV6_DST in offs and offs[IE_IPV6_DST][1] == 16
        has_v4, has_v6 = v4s or v4d, v6s or v6d
        self.dual_af = has_v4 and has_v6
        self.v6_src = offs[IE_IPV6_SRC][0] if v6s else None
        self.v6_dst = offs[IE_IPV6_DST][0] if v6d else None
        if has_v4:
            if v4s:
                g.put_v4("src_addr", offs[IE_IPV4_SRC][0])
            if v4d:
                g.put_v4("dst_addr", offs[IE_IPV4_DST][0])
        elif has_v6:
            if v6s:
                g.put_v6("src_addr", offs[IE_IPV6_SRC][0])
            if v6d:
                g.put_v6("dst_addr", offs[IE_IPV6_DST][0])
        self.has_ipver_field = g.put_ie("ip_version", IE_IP_VERSION) is not None
        if not self.has_ipver_field and not self.dual_af:
            if has_v4:
                g.put_const_byte("ip_version", C_V4)
            elif has_v6:
                g.put_const_byte("ip_version", C_V6)

        # Scalars.
        g.put_ie("ip_protocol", IE_PROTOCOL)
        g.put_ie("tos", IE_TOS)
        g.put_ie("tcp_flags", IE_TCP_FLAGS, max_bytes=1)
        g.put_ie("vlan", IE_SRC_VLAN, IE_DOT1Q_VLAN, max_bytes=2)
        g.put_ie("vlan_out", IE_POST_VLAN, max_bytes=2)
        g.put_ie("vlan_priority_in", IE_DOT1Q_PRIORITY, max_bytes=1)
        # next hops: IPv4 (IPv4-mapped) if the template has it, else IPv6
        for col, v4, v6 in (("next_hop", IE_NEXT_HOP_V4, IE_NEXT_HOP_V6),
                            ("bgp_next_hop", IE_BGP_NEXT_HOP_V4, IE_BGP_NEXT_HOP_V6)):
            if v4 in offs and offs[v4][1] == 4:
                g.put_v4(col, offs[v4][0])
            elif v6 in offs and offs[v6][1] == 16:
                g.put_v6(col, offs[v6][0])
        g.put_ie("in_if", IE_INPUT_SNMP)
        g.put_ie("out_if", IE_OUTPUT_SNMP)
        g.put_ie("direction", IE_DIRECTION, max_bytes=1)
        self.has_sampler = g.put_ie("sampler_id", IE_FLOW_SAMPLER_ID, IE_SELECTOR_ID) is not None

        # Ports and ICMP type/code (dst_port = type*256+code, src_port = 0).
        has_ports = g.put_ie("src_port", IE_L4_SRC_PORT) is not None
        has_ports = (g.put_ie("dst_port", IE_L4_DST_PORT) is not None) or has_ports
        icmp = g.pick(IE_ICMP_TYPE, IE_ICMP_TYPE_CODE_V6, max_len=2)
        self.icmp_src = None
        self.icmp_where = False
        if icmp is not None:
            self.icmp_src = ("tc", offs[icmp][0], offs[icmp][1])
        elif IE_ICMP_TYPE_V4 in offs or IE_ICMP_TYPE_V6 in offs:
            t = IE_ICMP_TYPE_V4 if IE_ICMP_TYPE_V4 in offs else IE_ICMP_TYPE_V6
            c = IE_ICMP_CODE_V4 if t == IE_ICMP_TYPE_V4 else IE_ICMP_CODE_V6
            if offs[t][1] == 1 and (c not in offs or offs[c][1] == 1):
                self.icmp_src = ("t_c", offs[t][0], offs[c][0] if c in offs else None)
        if self.icmp_src is not None:
            if has_ports:
                self.icmp_where = True
            else:
                _, coff = _COLS["dst_port"]
                size = _COLS["dst_port"][0].itemsize
                if self.icmp_src[0] == "tc":
                    g.put_int("dst_port", self.icmp_src[1], self.icmp_src[2])
                else:
                    order = [self.icmp_src[2], self.icmp_src[1]]  # least significant first
                    for j in range(size):
                        pos = coff + j if LITTLE else coff + size - 1 - j
                        src = order[j] if j < 2 else None
                        base[pos] = C_ZERO if src is None else CONST_LEN + src

        # Timestamps.
        self.start_kind = self.end_kind = None
        self.start_src = self.end_src = None
        for s_ie, e_ie, kind in _TIME_SOURCES:
            if self.start_kind is None and s_ie in offs and offs[s_ie][1] <= 8:
                self.start_kind, self.start_src = kind, offs[s_ie]
            if self.end_kind is None and e_ie in offs and offs[e_ie][1] <= 8:
                self.end_kind, self.end_src = kind, offs[e_ie]
        for col, kind, src in (("time_start_ms", self.start_kind, self.start_src), ("time_end_ms", self.end_kind, self.end_src)):
            if kind is None:
                g.put_const_int(col, C_EXPORT)
            elif kind in ("ms", "s", "uptime", "delta_us"):
                g.put_int(col, src[0], src[1])
            # ntp: computed in fix-up from the raw record
        self.system_init_src = offs.get(IE_SYSTEM_INIT_MS)

        # Sampling carried in the data record itself.
        self.rate_fields = {ie: offs[ie] for ie in (IE_SAMPLING_INTERVAL, IE_FLOW_SAMPLER_RANDOM_INTERVAL,
                                                      IE_SAMPLING_PACKET_INTERVAL, IE_SAMPLING_PACKET_SPACE,
                                                      IE_SAMPLING_SIZE, IE_SAMPLING_POPULATION)
                            if ie in offs and offs[ie][1] <= 8}

        self.base = base
        self._table: np.ndarray | None = None  # gather(): offsets for up to TABLE_ROWS records
        self._cols: ColumnPlan | None | bool = False  # columns(): not compiled yet
        # RFC 5103 biflow: a plan over the same record bytes for the reverse direction (see reverse_plan)
        self.reverse: Plan | None = None
        self.reverse_keep: tuple[int, int] | None = None  # (offset, length) of the count that must be > 0

    def columns(self) -> ColumnPlan | None:
        """The byte index as column operations (memoised); None on a big-endian host."""
        if self._cols is False:
            self._cols = compile_columns(self) if LITTLE else None
        return self._cols

    def gather(self, body, n: int, const: bytes) -> np.ndarray:
        """``n`` FLOW_DTYPE rows from ``n * rec_len`` record bytes.

        Up to ``TABLE_ROWS`` records: one fancy index with a gather table cached on the plan
        (``n x ITEMSIZE`` offsets; the fastest way for a few records). More records, or once all
        plans' tables reach ``_TABLE_BUDGET``: the column kernel, whose cost hardly grows with ``n``.
        """
        if n <= TABLE_ROWS:
            t = self._table
            if t is None or len(t) < n:
                t = self._grow_table(n)
            if t is not None:
                flat = np.frombuffer(const + bytes(body[: n * self.rec_len]), dtype=np.uint8)
                return flat[t[:n]].view(FLOW_DTYPE).reshape(n)
        cp = self.columns()
        if cp is not None:
            return gather_columns(self, cp, const, body, None, 1, n)
        flat = np.frombuffer(const + bytes(body[: n * self.rec_len]), dtype=np.uint8)
        return flat[self._rows(n)].view(FLOW_DTYPE).reshape(n)

    def _rows(self, n: int) -> np.ndarray:
        step = (np.arange(n, dtype=np.intp) * self.rec_len)[:, None]
        return self.base[None, :] + step * (self.base >= CONST_LEN)[None, :]

    def _grow_table(self, n: int) -> np.ndarray | None:
        """A gather table of at least ``n`` rows, or None when it would take the tables past the budget."""
        old = self._table.nbytes if self._table is not None else 0
        rows = min(TABLE_ROWS, max(n, 32))
        if _TABLES[0] - old + rows * ITEMSIZE * 8 > _TABLE_BUDGET:
            return None
        self._table = self._rows(rows)
        _TABLES[0] += self._table.nbytes - old
        return self._table

    def __del__(self, _tables=_TABLES):  # bound now: module globals may be gone when the last plan goes
        if self._table is not None:
            _tables[0] -= self._table.nbytes




class ColumnPlan:
    """A :class:`Plan`'s byte index as column operations.

    ``const_pos``/``const_idx``: output bytes taken from the constant block;
    ``casts``: ``(column, record offset, length)`` for columns that are one
    big-endian unsigned field of 1, 2, 4 or 8 bytes (a numpy cast instead of a
    byte gather); ``runs``: ``(output byte, record offset, length)`` copied
    as is (addresses). A few kB per plan, whatever the number of records:
    nothing here grows with the sets decoded.
    """

    __slots__ = ("const_pos", "const_idx", "casts", "runs")


def compile_columns(plan: Plan) -> ColumnPlan:
    K = CONST_LEN
    base = plan.base
    cp = ColumnPlan()
    cp.const_pos = np.flatnonzero(base < K)
    cp.const_idx = base[cp.const_pos]
    cp.casts, cp.runs = [], []
    for name in FLOW_DTYPE.names:
        dt, coff = FLOW_DTYPE.fields[name][:2]
        size = dt.itemsize
        idx = [int(i) for i in base[coff : coff + size]]
        rec = [i >= K for i in idx]
        if not any(rec):
            continue
        L = sum(rec)
        if dt.shape == () and L in (1, 2, 4, 8) and all(rec[:L]) and all(i == C_ZERO for i in idx[L:]):
            o = idx[L - 1] - K
            if all(idx[j] == K + o + L - 1 - j for j in range(L)):
                cp.casts.append((name, o, L))
                continue
        j = 0
        while j < size:  # runs of consecutive record bytes
            if not rec[j]:
                j += 1
                continue
            e = j + 1
            while e < size and rec[e] and idx[e] == idx[e - 1] + 1:
                e += 1
            cp.runs.append((coff + j, idx[j] - K, e - j))
            j = e
    return cp


_BE = {1: np.dtype("u1"), 2: np.dtype(">u2"), 4: np.dtype(">u4"), 8: np.dtype(">u8")}


def gather_columns(plan: Plan, cp: ColumnPlan, consts: bytes, records, cnt, k: int, n: int) -> np.ndarray:
    """``n`` FLOW_DTYPE rows of ``k`` sets: each set's constant bytes (``consts``: ``k * CONST_LEN`` bytes,
    ``cnt``: rows per set, unused when ``k == 1``), then the record fields (``records``: ``n * rec_len``
    bytes or more) per column."""
    rl = plan.rec_len
    c = np.frombuffer(consts, dtype=np.uint8, count=k * CONST_LEN).reshape(k, CONST_LEN)
    crow = np.zeros((k, ITEMSIZE), dtype=np.uint8)
    crow[:, cp.const_pos] = c[:, cp.const_idx]
    if k == 1:
        raw = np.empty((n, ITEMSIZE), dtype=np.uint8)
        raw[:] = crow[0]
    else:
        raw = np.repeat(crow, cnt, axis=0)
    out = raw.view(FLOW_DTYPE).reshape(n)
    for name, o, L in cp.casts:
        out[name] = np.ndarray((n,), dtype=_BE[L], buffer=records, offset=o, strides=(rl,))
    if cp.runs:
        rec = np.frombuffer(records, dtype=np.uint8, count=n * rl).reshape(n, rl)
        for at, o, L in cp.runs:
            raw[:, at : at + L] = rec[:, o : o + L]
    return out


I64_MAX = (1 << 63) - 1  # the largest Avro long: where counters and estimates saturate


def saturate_counts(out: np.ndarray) -> None:
    """Counters read from 64-bit fields at or above 2**63 (negative as int64) become 2**63 - 1, estimates too."""
    for col in ("bytes", "packets"):
        neg = out[col] < 0
        if neg.any():
            out[col][neg] = I64_MAX
            out[col + "_est"][neg] = I64_MAX


def scale_counts(out: np.ndarray, rate) -> None:
    """``bytes_est`` / ``packets_est`` (a copy of the sampled counts) times ``rate`` (>= 1: a scalar or one per
    row), saturating at 2**63 - 1 instead of wrapping to negative."""
    for col in ("bytes_est", "packets_est"):
        v = out[col]
        if not len(v):
            continue
        if int(v.max()) * int(np.max(rate)) <= I64_MAX:  # the common case: one check, no division
            v *= rate
        else:
            v[:] = np.where(v > I64_MAX // rate, I64_MAX, v * rate)


def uint_column(body, n: int, rec_len: int, off: int, length: int) -> np.ndarray:
    """Unsigned big-endian field at ``off`` of each of ``n`` records, as uint64."""
    if length in (1, 2, 4, 8):
        dt = np.dtype({"names": ["v"], "formats": [f">u{length}"], "offsets": [off], "itemsize": rec_len})
        return np.frombuffer(body, dtype=dt, count=n)["v"].astype(np.uint64)
    raw = np.frombuffer(body, dtype=np.uint8, count=n * rec_len).reshape(n, rec_len)[:, off : off + length]
    out = np.zeros(n, dtype=np.uint64)
    for j in range(min(length, 8)):
        out = (out << np.uint64(8)) | raw[:, length - min(length, 8) + j].astype(np.uint64)
    return out


def bytes_column(body, n: int, rec_len: int, off: int, length: int) -> np.ndarray:
    """(n, length) uint8 view of a field of each record."""
    return np.frombuffer(body, dtype=np.uint8, count=n * rec_len).reshape(n, rec_len)[:, off : off + length]


def ntp_to_unix_ms(v: np.ndarray) -> np.ndarray:
    """64-bit NTP timestamps (RFC 7011 dateTimeMicro/Nanoseconds) to unix ms."""
    v = v.astype(np.uint64)
    sec = (v >> np.uint64(32)).astype(np.int64) - NTP_UNIX_OFFSET_S
    frac = (v & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return sec * 1000 + ((frac * 1000) >> 32)


def reverse_fields(fields) -> tuple[list, tuple[int, int] | None]:
    """RFC 5103: the field list read as the reverse direction of a biflow record, and the reverse count.

    Same lengths and order as ``fields`` (so a plan built from it gathers the
    same record bytes): a reverse IE (PEN 29305) becomes its forward IE, the
    forward field it replaces is hidden, source/destination key fields swap
    (addresses, ports, interfaces; VLAN 58/59 when both are present), and
    direction-specific fields without a reverse IE (counters, TCP flags, next
    hops) are hidden. Everything else (protocol, ToS, times, sampling) is
    shared by both directions. ``(fields, None)`` when the template carries no
    reverse packet or octet count (not a biflow template).
    """
    offs, off = {}, 0
    for ie, pen, ln in fields:
        if pen == PEN_REVERSE and ie not in offs:
            offs[ie] = (off, ln)
        off += ln
    keep = next((offs[ie] for ie in _REVERSE_COUNTERS if ie in offs and 0 < offs[ie][1] <= 8), None)
    if keep is None:
        return list(fields), None
    forward = {ie for ie, pen, _ in fields if pen == 0}
    swap = dict(_REVERSE_SWAP)
    if IE_SRC_VLAN in forward and IE_POST_VLAN in forward:
        swap.update({IE_SRC_VLAN: IE_POST_VLAN, IE_POST_VLAN: IE_SRC_VLAN})
    out = []
    for ie, pen, ln in fields:
        if pen == PEN_REVERSE:
            out.append((ie, 0, ln))
        elif pen != 0:
            out.append((ie, pen, ln))
        elif ie in offs or ie in _DIRECTIONAL:
            out.append((ie, _PEN_HIDDEN, ln))
        else:
            out.append((swap.get(ie, ie), 0, ln))
    return out, keep


_PLAN_CACHE: dict = {}
_PLAN_CACHE_MAX = 4096


def plan_for(fields, protocol: str) -> Plan:
    """Shared compiled plan for a fixed-length field list (many exporters send identical templates)."""
    key = (protocol, tuple(fields))
    p = _PLAN_CACHE.get(key)
    if p is None:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.clear()
        p = _PLAN_CACHE[key] = Plan(fields, protocol)
        if protocol == "ipfix":
            rfields, keep = reverse_fields(fields)
            if keep is not None:
                p.reverse = Plan(rfields, protocol)
                p.reverse_keep = keep
    return p
