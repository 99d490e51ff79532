"""sFlow v5 datagram decoder in plain Python: the readable reference, used by tests only.

sflow.org "sFlow Version 5". One flow row per flow sample (formats 1 and 3) and one counter row per
counter sample (formats 2 and 4) with a generic interface counters record. Flow records decoded: raw
packet header (1, parsed by :mod:`.packet`), sampled IPv4 (3) and IPv6 (4), extended switch (1001) and
extended router (1002), extended egress queue (1036); one discard row per discarded packet sample (format 5,
sflow.org "sFlow Dropped Packet Notification Structures"), its records read the same way; unknown types are skipped by their length and counted in ``problems``. Raises
:class:`DecodeError` (only) when the datagram structure is broken. The production decoder is the
compiled one (:mod:`ingest.decode.sflow`); tests prove both give identical rows, problems and errors.
Column conventions and the error cases: docs/architecture.md, "What the decoders read".
"""

from __future__ import annotations

from collections import Counter
from struct import Struct
from struct import error as _StructError

import numpy as np

from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, PROTO_SFLOW5, addr_str

from ..errors import DecodeError
from ..result import (DISCARD_DTYPE, EMPTY_COUNTERS, EMPTY_DISCARDS, EMPTY_FLOWS, EMPTY_SAMPLES, SAMPLE_DTYPE,
                      DecodeResult, ExportHeader)
from ..templates import TemplateCache
from .packet import NON_IP, V4_PREFIX, ZERO16, parse_ethernet, parse_ipv4, parse_ipv6

__all__ = ["decode_sflow", "SAMPLE_FLOW", "SAMPLE_COUNTER", "SAMPLE_FLOW_EXPANDED", "SAMPLE_COUNTER_EXPANDED"]

P = "sflow5"
SAMPLE_FLOW = 1
SAMPLE_COUNTER = 2
SAMPLE_FLOW_EXPANDED = 3
SAMPLE_COUNTER_EXPANDED = 4
SAMPLE_DISCARD = 5


_II = Struct(">II").unpack_from
_HDR = Struct(">IIII").unpack_from  # sub-agent, sequence, uptime, samples
_FS = Struct(">IIIIIIII").unpack_from  # seq, source, rate, pool, drops, in, out, records
# seq, src type, src index, rate, pool, drops, in fmt, in value, out fmt, out value, records
_FSX = Struct(">IIIIIIIIIII").unpack_from
_RAW = Struct(">IIII").unpack_from  # raw header: protocol, frame length, stripped, header length
_SW = Struct(">IIII").unpack_from  # extended switch: src VLAN, src priority, dst VLAN, dst priority
_I = Struct(">I").unpack_from
_CS = Struct(">III").unpack_from  # seq, source, records
_CSX = Struct(">IIII").unpack_from  # seq, src type, src index, records
_DS = Struct(">IIIIIIII").unpack_from  # seq, src type, src index, drops, in, out, reason, records
_SIP4 = Struct(">II4s4sIIII").unpack_from  # length, protocol, src, dst, sport, dport, flags, tos
_SIP6 = Struct(">II16s16sIIII").unpack_from  # length, protocol, src, dst, sport, dport, flags, priority
# Generic interface counters; 64-bit counters read signed (same 64 bits, fits an Avro long).
_GEN = Struct(">IIqIIqIIIIIIqIIIIII").unpack_from
_ETH = Struct(">13I").unpack_from
_GEN_LEN = 88
_ETH_LEN = 52

_MIN_SAMPLE = 8
_MAX_SAMPLES = 4096  # far above what fits in a 64 KB datagram with real samples
_I64_MAX = 0x7FFFFFFFFFFFFFFF


def _row_struct(dt: np.dtype) -> Struct:
    """Little-endian Struct with the exact byte layout of packed structured dtype ``dt``."""
    codes = {"i4": "i", "i8": "q", "b1": "?"}
    fmt = "<"
    pos = 0
    for name in dt.names:
        fdt, foff = dt.fields[name][:2]
        if foff != pos:
            raise TypeError(f"{name}: dtype is not packed")
        if fdt.shape == (16,):
            fmt += "16s"
        else:
            if fdt.byteorder == ">":
                raise TypeError(f"{name}: big-endian field")
            fmt += codes[fdt.base.str[1:]]
        pos += fdt.itemsize
    st = Struct(fmt)
    if st.size != dt.itemsize:
        raise TypeError("row struct size mismatch")
    return st


_ROW = _row_struct(FLOW_DTYPE).pack
_FACT = _row_struct(SAMPLE_DTYPE).pack
_CROW = _row_struct(COUNTER_DTYPE).pack
_DROW = _row_struct(DISCARD_DTYPE).pack
_ETH_ZERO = (0,) * 13


def decode_sflow(datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache) -> DecodeResult:
    """Decode one sFlow v5 datagram into flow and counter rows (see module docstring)."""
    data = bytes(datagram)
    n = len(data)
    agent16, off = _agent(data)
    if n < off + 16:
        raise DecodeError(P, "truncated", min(n, off), "datagram header")
    sub_agent, dseq, uptime, nsamples = _HDR(data, off)
    off += 16
    if nsamples > _MAX_SAMPLES:
        raise DecodeError(P, "too_many", off - 4, f"{nsamples} samples")
    if nsamples * _MIN_SAMPLE > n - off:
        raise DecodeError(P, "bad_count", off - 4, f"{nsamples} samples in {n - off} bytes")

    problems: Counter = Counter()
    rows, facts, counters, discards = [], [], [], []
    fallback = _Fallback(templates, exporter)
    for _ in range(nsamples):
        if off + 8 > n:
            raise DecodeError(P, "truncated", min(off, n), "sample header")  # off may be past n by padding
        sfmt, slen = _II(data, off)
        off += 8
        end = off + slen
        if end > n:
            raise DecodeError(P, "truncated", off, "sample runs past the datagram")
        if sfmt == SAMPLE_FLOW or sfmt == SAMPLE_FLOW_EXPANDED:
            fields, row = _flow_sample(data, off, end, sfmt == SAMPLE_FLOW_EXPANDED, problems, fallback)
            sseq, source, rate, pool, drops, in_if, out_if = fields
            nbytes, ipv, sa, da, sp, dp, pr, fl, tos, vlan, vni, rop, rqp, vlan_out, prio_in, prio_out, nh, _q = row
            t = received_at_ms
            rows.append(_ROW(PROTO_SFLOW5, agent16, sub_agent, source, rate, nbytes, 1,
                             min(nbytes * rate, _I64_MAX), rate, ipv, sa, da, sp, dp, pr, fl, tos, vlan, in_if,
                             out_if, 0, t, t, t, t, vni, rop, rqp, vlan_out, prio_in, prio_out, nh, ZERO16))
            facts.append(_FACT(sseq, pool, drops, sub_agent, source, rate, t))
        elif sfmt == SAMPLE_COUNTER or sfmt == SAMPLE_COUNTER_EXPANDED:
            c = _counter_sample(data, off, end, sfmt, slen, problems)
            if c is not None:
                counters.append(c)
        elif sfmt == SAMPLE_DISCARD:
            discards.append(_discard_sample(data, off, end, problems, agent16, sub_agent, received_at_ms))
        else:
            problems["unknown_sample_type"] += 1
        off += (slen + 3) & ~3

    if fallback.used:
        problems["sampling_rate_missing"] += fallback.used
    header = ExportHeader(P, addr_str(agent16), sub_agent, dseq, 1, None, uptime)
    flows = np.frombuffer(bytearray(b"".join(rows)), dtype=FLOW_DTYPE) if rows else EMPTY_FLOWS
    samples = np.frombuffer(b"".join(facts), dtype=SAMPLE_DTYPE) if rows else EMPTY_SAMPLES
    ctr = _counter_array(counters, agent16, sub_agent, received_at_ms, uptime) if counters else EMPTY_COUNTERS
    dis = np.frombuffer(bytearray(b"".join(discards)), dtype=DISCARD_DTYPE) if discards else EMPTY_DISCARDS
    return DecodeResult(flows=flows, counters=ctr, header=header, problems=problems, samples=samples, discards=dis)


def _agent(data: bytes) -> tuple[bytes, int]:
    """(agent address as 16 bytes, offset of the sub-agent id) from the datagram's first words."""
    try:
        version, atype = _II(data, 0)
    except _StructError:
        raise DecodeError(P, "truncated", 0, "datagram header") from None
    if version != 5:
        raise DecodeError(P, "bad_version", 0, f"version {version}")
    if atype == 1:
        return V4_PREFIX + data[8:12], 12
    if atype == 2:
        return data[8:24], 24
    if atype == 0:
        return ZERO16, 8
    raise DecodeError(P, "unsupported", 4, f"agent address type {atype}")


class _Fallback:
    """The rate for a flow sample with a zero rate: the exporter's configured override, else 1 (counted)."""

    def __init__(self, templates: TemplateCache | None, exporter: str):
        self.templates, self.exporter, self.used, self.rate = templates, exporter, 0, 0

    def __call__(self) -> int:
        self.used += 1
        if not self.rate:
            rate = (self.templates.sampling_override(self.exporter) if self.templates is not None else None) or 1
            self.rate = max(rate, 1)
        return self.rate


def _record_header(data: bytes, p: int, end: int, kind: str) -> tuple[int, int, int]:
    """(format, length, offset of the body) of the flow or counter record at ``p`` of a sample ending at ``end``."""
    if p + 8 > end:
        raise DecodeError(P, "bad_length", min(p, end), f"{kind} record header")  # p may be past end by padding
    rfmt, rlen = _II(data, p)
    p += 8
    if p + rlen > end:
        raise DecodeError(P, "bad_length", p, f"{kind} record runs past its sample")
    return rfmt, rlen, p


def _flow_sample(data: bytes, off: int, end: int, expanded: bool, problems: Counter, fallback: _Fallback):
    """((seq, source, rate, pool, drops, in_if, out_if), the row's values from the records) of a flow sample."""
    slen = end - off
    if not expanded:
        if slen < 32:
            raise DecodeError(P, "bad_length", off, "flow sample")
        sseq, source, rate, pool, drops, in_if, out_if, nrec = _FS(data, off)
        p = off + 32
    else:
        if slen < 44:
            raise DecodeError(P, "bad_length", off, "expanded flow sample")
        sseq, stype, sidx, rate, pool, drops, ifmt, ival, ofmt, oval, nrec = _FSX(data, off)
        source = ((stype & 0xFF) << 24) | (sidx & 0xFFFFFF)
        in_if = ival if ifmt == 0 else ((ifmt & 3) << 30) | (ival & 0x3FFFFFFF)
        out_if = oval if ofmt == 0 else ((ofmt & 3) << 30) | (oval & 0x3FFFFFFF)
        p = off + 44
    if nrec * 8 > end - p:
        raise DecodeError(P, "bad_count", p - 4, f"{nrec} flow records")
    if rate == 0:
        rate = fallback()
    return (sseq, source, rate, pool, drops, in_if, out_if), _flow_records(data, p, end, nrec, problems)


def _flow_records(data: bytes, p: int, end: int, nrec: int, problems: Counter) -> tuple:
    """The flow row's values from a flow sample's ``nrec`` records at ``p``: (bytes, the header's ip_version
    .. roce_dest_qp but the VLAN from the extended switch record if it has one, vlan_out, priority in and
    out, next hop, egress queue or -1)."""
    parsed = None  # the last raw packet header record's parse
    sampled = None  # the last sampled IPv4/IPv6 record's values
    sw_vlan, prio_in, vlan_out, prio_out = 0, 0, 0, 0
    next_hop = ZERO16
    frame_bytes = 0
    queue = -1
    for _r in range(nrec):
        rfmt, rlen, p = _record_header(data, p, end, "flow")
        if rfmt == 1:
            if rlen < 16:
                raise DecodeError(P, "bad_length", p, "raw packet header record")
            hproto, flen, stripped, hlen = _RAW(data, p)
            if hlen > rlen - 16:
                hlen = rlen - 16
                problems["header_length_clamped"] += 1
            header = data[p + 16 : p + 16 + hlen]
            if hproto == 1:
                parsed = parse_ethernet(header, 0, 0)
            elif hproto == 11:
                parsed = parse_ipv4(header, 0, 0, 0)
            elif hproto == 12:
                parsed = parse_ipv6(header, 0, 0, 0)
            else:
                parsed = NON_IP
                problems["unsupported_header_protocol"] += 1
            frame_bytes = flen - stripped if flen > stripped else 0
        elif rfmt == 1001:
            if rlen < 16:
                raise DecodeError(P, "bad_length", p, "extended switch record")
            sw_vlan, prio_in, vlan_out, prio_out = _SW(data, p)
            prio_in, vlan_out, prio_out = prio_in & 7, vlan_out & 0xFFF, prio_out & 7
        elif rfmt == 1002:
            if rlen >= 8:
                atype = _I(data, p)[0]
                if atype == 1:
                    next_hop = V4_PREFIX + data[p + 4 : p + 8]
                elif atype == 2 and rlen >= 20:
                    next_hop = data[p + 4 : p + 20]
        elif rfmt == 1036:  # extended egress queue
            if rlen >= 4:
                queue = _I(data, p)[0]
        elif rfmt == 3 or rfmt == 4:  # sampled IPv4 / IPv6: the same fields, 4- or 16-byte addresses
            ipv = 4 if rfmt == 3 else 6
            if rlen < (32 if ipv == 4 else 56):
                raise DecodeError(P, "bad_length", p, f"sampled IPv{ipv} record")
            ln, pr, src, dst, sp, dp, fl, tos = (_SIP4 if ipv == 4 else _SIP6)(data, p)
            if pr == (1 if ipv == 4 else 58):  # ICMP / ICMPv6: type and code
                sp, dp = 0, ((sp & 0xFF) << 8) | (dp & 0xFF)
            if ipv == 4:
                src, dst = V4_PREFIX + src, V4_PREFIX + dst
            sampled = (ipv, src, dst, sp & 0xFFFF, dp & 0xFFFF, pr & 0xFF, fl & 0xFF, tos & 0xFF, 0, ln, -1, -1, -1)
        else:
            problems["unknown_record_type"] += 1
        p += (rlen + 3) & ~3
    if parsed is None or (parsed[0] == 0 and sampled is not None):
        parsed = sampled if sampled is not None else NON_IP
    ipv, sa, da, sp, dp, pr, fl, tos, hvlan, nbytes, vni, rop, rqp = parsed
    if nbytes < 0:
        nbytes = frame_bytes
    vlan = sw_vlan & 0xFFF if sw_vlan else hvlan
    return nbytes, ipv, sa, da, sp, dp, pr, fl, tos, vlan, vni, rop, rqp, vlan_out, prio_in, prio_out, next_hop, queue


def _discard_sample(data: bytes, off: int, end: int, problems: Counter, agent16: bytes, sub_agent: int,
                    t: int) -> bytes:
    """A discarded packet sample's body at ``off`` as one packed DISCARD_DTYPE row."""
    if end - off < 32:
        raise DecodeError(P, "bad_length", off, "discarded packet sample")
    sseq, stype, sidx, drops, in_if, out_if, reason, nrec = _DS(data, off)
    p = off + 32
    if nrec * 8 > end - p:
        raise DecodeError(P, "bad_count", p - 4, f"{nrec} discarded packet records")
    nbytes, ipv, sa, da, sp, dp, pr, _fl, _tos, vlan, _vni, rop, _rqp, _vo, _pi, _po, _nh, queue = _flow_records(
        data, p, end, nrec, problems)
    source = ((stype & 0xFF) << 24) | (sidx & 0xFFFFFF)
    return _DROW(agent16, sub_agent, source, sseq, drops, in_if, out_if, _i32(reason), _i32(queue), t, nbytes, ipv,
                 sa, da, sp, dp, pr, vlan, rop)


def _i32(v: int) -> int:
    """``v`` (a 32-bit unsigned wire value, or -1) as the int32 the row holds."""
    return v - (1 << 32) if v >= 1 << 31 else v


def _counter_sample(data: bytes, off: int, end: int, sfmt: int, slen: int, problems: Counter):
    """Counter sample body at ``off``: (source, sequence, generic, ethernet or None) or None."""
    if sfmt == 2:
        if slen < 12:
            raise DecodeError(P, "bad_length", off, "counter sample")
        cseq, source, nrec = _CS(data, off)
        p = off + 12
    else:
        if slen < 16:
            raise DecodeError(P, "bad_length", off, "expanded counter sample")
        cseq, stype, sidx, nrec = _CSX(data, off)
        source = ((stype & 0xFF) << 24) | (sidx & 0xFFFFFF)
        p = off + 16
    if nrec * 8 > end - p:
        raise DecodeError(P, "bad_count", p - 4, f"{nrec} counter records")
    gen = None
    eth = None
    for _r in range(nrec):
        rfmt, rlen, p = _record_header(data, p, end, "counter")
        if rfmt == 1:
            if rlen < _GEN_LEN:
                raise DecodeError(P, "bad_length", p, "generic interface counters")
            gen = _GEN(data, p)
        elif rfmt == 2:
            if rlen < _ETH_LEN:
                raise DecodeError(P, "bad_length", p, "ethernet counters")
            eth = _ETH(data, p)
        else:
            problems["unknown_record_type"] += 1
        p += (rlen + 3) & ~3
    if gen is None:
        problems["counter_sample_without_generic"] += 1
        return None
    return (source, cseq, gen, eth)


def _counter_array(counters, agent16, sub_agent, received_at_ms, uptime) -> np.ndarray:
    """COUNTER_DTYPE rows from (source, sequence, generic tuple, ethernet tuple or None)."""
    pack = _CROW
    out = []
    for source, cseq, gen, eth in counters:
        status = gen[4]
        out.append(
            pack(
                agent16, sub_agent, source, cseq, received_at_ms, uptime,
                gen[0], gen[1], gen[2], gen[3] & 0x7FFFFFFF, bool(status & 1), bool(status & 2),
                *gen[5:], eth is not None, *(eth if eth is not None else _ETH_ZERO),
            )
        )
    return np.frombuffer(bytearray(b"".join(out)), dtype=COUNTER_DTYPE)

