"""sFlow v5 datagram decoder (sflow.org "sFlow Version 5" specification).

One flow row per flow sample (formats 1 and 3) and one counter row per counter sample (formats 2
and 4) with a generic interface counters record. Flow records decoded: raw packet header (1), sampled
IPv4 (3) and IPv6 (4), extended switch (1001) and extended router (1002); unknown types are skipped by
their length and counted in ``problems``. Common header shapes take a fixed-layout fast path
(:func:`_fast_eth`); everything else goes to the walker of :mod:`ingest.decode.packet`, which defines
the semantics. Raises :class:`DecodeError` (only) when the datagram structure is broken. Many
datagrams at once: :func:`ingest.decode.sflow_batch.decode_sflow_many`. Column conventions, the fast
path's shapes and the error cases: docs/architecture.md, "What the decoders read".
"""

from __future__ import annotations

from collections import Counter
from struct import Struct
from struct import error as _StructError

import numpy as np

from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, PROTO_SFLOW5, addr_str

from .errors import DecodeError
from .packet import NON_IP, parse_ethernet, parse_ipv4, parse_ipv6
from .result import EMPTY_COUNTERS, EMPTY_FLOWS, EMPTY_SAMPLES, SAMPLE_DTYPE, DecodeResult, ExportHeader
from .templates import TemplateCache

__all__ = ["decode_sflow", "SAMPLE_FLOW", "SAMPLE_COUNTER", "SAMPLE_FLOW_EXPANDED", "SAMPLE_COUNTER_EXPANDED"]

P = "sflow5"
SAMPLE_FLOW = 1
SAMPLE_COUNTER = 2
SAMPLE_FLOW_EXPANDED = 3
SAMPLE_COUNTER_EXPANDED = 4

_V4_PREFIX = b"\x00" * 10 + b"\xff\xff"
_ZERO16 = b"\x00" * 16
_SW_NONE = (0, 0, 0)

_II = Struct(">II").unpack_from
_HDR = Struct(">IIII").unpack_from  # sub-agent, sequence, uptime, samples
# sample format, length, then a flow sample's seq, source, rate, pool, drops, in, out, records
_SFS = Struct(">IIIIIIIIII").unpack_from
# seq, src type, src index, rate, pool, drops, in fmt, in value, out fmt, out value, records
_FSX = Struct(">IIIIIIIIIII").unpack_from
_CS = Struct(">III").unpack_from  # seq, source, records
_CSX = Struct(">IIII").unpack_from  # seq, src type, src index, records
# record format, length, then a raw header's protocol, frame length, stripped, header length
_REC = Struct(">IIIIII").unpack_from
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

# --- sampled header fast path (semantics: ingest.decode.packet) ---------------
_H = Struct(">H").unpack_from
_HH = Struct(">HH").unpack_from
_TCP = Struct(">HH9xB").unpack_from  # ports, flags byte at offset 13
# ver_ihl, tos, total_len, flags+frag offset, protocol, src, dst
_IP4 = Struct(">BBH2xHxB2x4s4s").unpack_from
# ver/tc/flow, payload length, next header, src, dst
_IP6 = Struct(">IHBx16s16s").unpack_from
_BTH = Struct(">8xB3xI").unpack_from  # UDP header, BTH opcode, (reserved byte + dest QP)
_I = Struct(">I").unpack_from


def _fast_eth(d: bytes, b: int, e: int, outer: bool = True) -> tuple | None:
    """Ethernet frame at ``d[b:e]`` of a common shape, or None (use the walker).

    Equal to ``packet.parse_ethernet(d[b:e])`` wherever it returns a tuple;
    with ``outer`` False, to the walker's VXLAN inner frame (no second VXLAN).
    """
    if b + 42 > e:
        return None
    et = _H(d, b + 12)[0]
    l3 = b + 14
    vlan = 0
    if et == 0x8100:
        tci, et = _HH(d, l3)
        if et == 0x8100 or et == 0x88A8 or et == 0x9100:
            return None
        vlan = tci & 0x0FFF
        l3 = b + 18
    if et == 0x0800:
        l4 = l3 + 20
        if l4 > e:
            return None
        vi, tos, total, frag, proto, src, dst = _IP4(d, l3)
        if vi != 0x45 or frag & 0x1FFF:
            return None
        ipv = 4
        src = _V4_PREFIX + src
        dst = _V4_PREFIX + dst
    elif et == 0x86DD:
        l4 = l3 + 40
        if l4 > e:
            return None
        vtf, plen, proto, src, dst = _IP6(d, l3)
        if (vtf >> 28) != 6:
            return None
        ipv = 6
        tos = (vtf >> 20) & 0xFF
        total = plen + 40
    else:
        return None
    if proto == 6:
        if l4 + 14 > e:
            return None
        sp, dp, flags = _TCP(d, l4)
        return (ipv, src, dst, sp, dp, 6, flags, tos, vlan, total, -1, -1, -1)
    if proto == 17:
        if l4 + 4 > e:
            return None
        sp, dp = _HH(d, l4)
        if dp == 4791:
            if l4 + 16 > e:
                return None
            opcode, qp = _BTH(d, l4)
            return (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, opcode, qp & 0xFFFFFF)
        if dp == 4789:
            # VXLAN: 8-byte header, then the inner frame; outer ToS, VLAN and length
            if not outer or l4 + 16 > e:
                return None
            inner = _fast_eth(d, l4 + 16, e, False)
            if inner is None:
                return None
            return inner[:7] + (tos, vlan, total, _I(d, l4 + 12)[0] >> 8, inner[11], inner[12])
        return (ipv, src, dst, sp, dp, 17, 0, tos, vlan, total, -1, -1, -1)
    return None


# --- output rows packed straight into the structured dtypes' bytes -------------
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


_ROW = _row_struct(FLOW_DTYPE)
_FACT = _row_struct(SAMPLE_DTYPE).pack
_CROW = _row_struct(COUNTER_DTYPE)
_ETH_ZERO = (0,) * 13

def _no_fast(_d: bytes, _b: int, _e: int, outer: bool = True) -> None:
    return None


def decode_sflow(datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache,
                 *, fast_headers: bool = True) -> DecodeResult:
    """Decode one sFlow v5 datagram into flow and counter rows (see module docstring).

    ``fast_headers=False`` parses every sampled header with the walker (the
    reference the fast path is tested against; slower, same output).
    """
    data = bytes(datagram) if not isinstance(datagram, bytes) else datagram
    n = len(data)
    try:
        version, atype = _II(data, 0)
    except _StructError:
        raise DecodeError(P, "truncated", 0, "datagram header") from None
    if version != 5:
        raise DecodeError(P, "bad_version", 0, f"version {version}")
    if atype == 1:
        off = 12
        agent16 = _V4_PREFIX + data[8:12]
    elif atype == 2:
        off = 24
        agent16 = data[8:24]
    elif atype == 0:
        off = 8
        agent16 = _ZERO16
    else:
        raise DecodeError(P, "unsupported", 4, f"agent address type {atype}")
    if n < off + 16:
        raise DecodeError(P, "truncated", min(n, off), "datagram header")
    sub_agent, dseq, uptime, nsamples = _HDR(data, off)
    off += 16
    if nsamples > _MAX_SAMPLES:
        raise DecodeError(P, "too_many", off - 4, f"{nsamples} samples")
    if nsamples * _MIN_SAMPLE > n - off:
        raise DecodeError(P, "bad_count", off - 4, f"{nsamples} samples in {n - off} bytes")

    problems: Counter = Counter()
    rows: list = []
    append = rows.append
    pack = _ROW.pack
    fast = _fast_eth if fast_headers else _no_fast
    II = _II
    counters: list = []
    facts: list = []  # (sample sequence, sample_pool, drops) per flow row, as SAMPLE_DTYPE bytes
    fact = _FACT
    missing_rate = 0
    fallback_rate = 0
    t = received_at_ms

    for _ in range(nsamples):
        if off + 40 <= n:
            # sample header and (if it is one) the whole flow sample header in one call
            sfmt, slen, sseq, source, rate, pool, drops, in_if, out_if, nrec = _SFS(data, off)
        else:
            if off + 8 > n:
                raise DecodeError(P, "truncated", min(off, n), "sample header")  # off may be past n by padding
            sfmt, slen = II(data, off)
        off += 8
        end = off + slen
        if end > n:
            raise DecodeError(P, "truncated", off, "sample runs past the datagram")

        if sfmt == 1 or sfmt == 3:
            if sfmt == 1:
                if slen < 32:
                    raise DecodeError(P, "bad_length", off, "flow sample")
                # read above: off + 32 <= end <= n here
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
                missing_rate += 1
                if fallback_rate == 0:
                    fallback_rate = (templates.sampling_override(exporter) if templates is not None else None) or 1
                    if fallback_rate < 1:
                        fallback_rate = 1
                rate = fallback_rate
            parsed = None
            sampled = None
            sw_vlan = 0
            sw_rest = _SW_NONE  # extended switch: source priority, destination VLAN, destination priority
            next_hop = _ZERO16
            frame_bytes = 0
            for _r in range(nrec):
                if p + 24 <= end:
                    # record header and the first 16 bytes of its body (raw header fields /
                    # extended switch VLAN) in one call; used only for records of >= 16 bytes
                    rfmt, rlen, hproto, flen, stripped, hlen = _REC(data, p)
                else:
                    if p + 8 > end:
                        raise DecodeError(P, "bad_length", min(p, end), "flow record header")
                    rfmt, rlen = II(data, p)
                p += 8
                if p + rlen > end:
                    raise DecodeError(P, "bad_length", p, "flow record runs past its sample")
                if rfmt == 1:
                    if rlen < 16:
                        raise DecodeError(P, "bad_length", p, "raw packet header record")
                    if hlen > rlen - 16:
                        hlen = rlen - 16
                        problems["header_length_clamped"] += 1
                    if hproto == 1:
                        parsed = fast(data, p + 16, p + 16 + hlen)
                        if parsed is None:
                            parsed = parse_ethernet(data[p + 16 : p + 16 + hlen], 0, 0)
                    elif hproto == 11:
                        parsed = parse_ipv4(data[p + 16 : p + 16 + hlen], 0, 0, 0)
                    elif hproto == 12:
                        parsed = parse_ipv6(data[p + 16 : p + 16 + hlen], 0, 0, 0)
                    else:
                        parsed = NON_IP
                        problems["unsupported_header_protocol"] += 1
                    frame_bytes = flen - stripped if flen > stripped else 0
                elif rfmt == 1001:
                    if rlen < 16:
                        raise DecodeError(P, "bad_length", p, "extended switch record")
                    sw_vlan = hproto  # first word of the record body: source VLAN
                    sw_rest = (flen & 7, stripped & 0xFFF, hlen & 7)
                elif rfmt == 1002:
                    if rlen >= 8:
                        atype = _I(data, p)[0]
                        if atype == 1:
                            next_hop = _V4_PREFIX + data[p + 4 : p + 8]
                        elif atype == 2 and rlen >= 20:
                            next_hop = data[p + 4 : p + 20]
                elif rfmt == 3:
                    if rlen < 32:
                        raise DecodeError(P, "bad_length", p, "sampled IPv4 record")
                    ln, pr, s4, d4, sp, dp, fl, tos = _SIP4(data, p)
                    if pr == 1:
                        sp, dp = 0, ((sp & 0xFF) << 8) | (dp & 0xFF)
                    sampled = (4, _V4_PREFIX + s4, _V4_PREFIX + d4, sp & 0xFFFF, dp & 0xFFFF, pr & 0xFF,
                               fl & 0xFF, tos & 0xFF, 0, ln, -1, -1, -1)
                elif rfmt == 4:
                    if rlen < 56:
                        raise DecodeError(P, "bad_length", p, "sampled IPv6 record")
                    ln, pr, s6, d6, sp, dp, fl, pri = _SIP6(data, p)
                    if pr == 58:
                        sp, dp = 0, ((sp & 0xFF) << 8) | (dp & 0xFF)
                    sampled = (6, s6, d6, sp & 0xFFFF, dp & 0xFFFF, pr & 0xFF, fl & 0xFF, pri & 0xFF, 0, ln,
                               -1, -1, -1)
                else:
                    problems["unknown_record_type"] += 1
                p += (rlen + 3) & ~3
            if parsed is None or (parsed[0] == 0 and sampled is not None):
                parsed = sampled if sampled is not None else NON_IP
            ipv, sa, da, sp, dp, pr, fl, tos, hvlan, b, vni, rop, rqp = parsed
            if b < 0:
                b = frame_bytes
            be = b * rate
            if be > _I64_MAX:
                be = _I64_MAX
            facts.append(fact(sseq, pool, drops, sub_agent, source, rate, t))
            append(
                pack(
                    PROTO_SFLOW5, agent16, sub_agent, source, rate, b, 1, be, rate,
                    ipv, sa, da, sp, dp, pr, fl, tos, sw_vlan & 0xFFF if sw_vlan else hvlan,
                    in_if, out_if, 0, t, t, t, t, vni, rop, rqp,
                    sw_rest[1], sw_rest[0], sw_rest[2], next_hop, _ZERO16,
                )
            )
        elif sfmt == 2 or sfmt == 4:
            c = _counter_sample(data, off, end, sfmt, slen, problems)
            if c is not None:
                counters.append(c)
        else:
            problems["unknown_sample_type"] += 1
        off += (slen + 3) & ~3

    header = ExportHeader(P, addr_str(agent16), sub_agent, dseq, 1, None, uptime)
    flows = EMPTY_FLOWS
    samples = EMPTY_SAMPLES
    if rows:
        samples = np.frombuffer(b"".join(facts), dtype=SAMPLE_DTYPE)
        if missing_rate:
            problems["sampling_rate_missing"] += missing_rate
        flows = np.frombuffer(bytearray(b"".join(rows)), dtype=FLOW_DTYPE)
    ctr = EMPTY_COUNTERS
    if counters:
        ctr = _counter_array(counters, agent16, sub_agent, received_at_ms, uptime)
    return DecodeResult(flows=flows, counters=ctr, header=header, problems=problems, samples=samples)


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
        if p + 8 > end:
            raise DecodeError(P, "bad_length", min(p, end), "counter record header")
        rfmt, rlen = _II(data, p)
        p += 8
        if p + rlen > end:
            raise DecodeError(P, "bad_length", p, "counter record runs past its sample")
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
    pack = _CROW.pack
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

