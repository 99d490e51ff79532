"""Reference sFlow v5 decoder: the straightforward per-sample walker.

This is the decoder as it was before :mod:`ingest.decode.sflow` got its fast
path; it is kept unchanged as the specification in code that the fast decoder
is differentially tested against (and it is what the fast decoder's results
must equal, row for row). Not used on the hot path.

One flow row per flow sample (formats 1 and 3) and one counter row per counter
sample (formats 2 and 4) that carries a generic interface counters record.
Flow records decoded: raw packet header (1, via :mod:`ingest.decode.packet`),
sampled IPv4 (3), sampled IPv6 (4), extended switch (1001, the input VLAN);
extended router (1002) is skipped. Unknown sample and record types (any
non-zero enterprise included) are skipped by their length and counted in
``problems``. Per-sample work collects plain tuples; the structured arrays
are filled column-wise once per datagram.

Column conventions (see schemas/avro/flow_record.avsc):
* ``exporter_addr`` is the agent address from the datagram header,
  ``observation_domain`` the sub-agent id, ``sampler_id`` the source id
  (type<<24 | index).
* ``in_if``/``out_if``: the 30-bit ifIndex value when the interface format is
  0 (0x3FFFFFFF = internal); for formats 1 (discarded) and 2 (multiple) the
  raw 32-bit word (format<<30 | value), so they never collide with an ifIndex.
* ``bytes`` is the IP length read from the sampled header (sampled IPv4/IPv6
  records: their length field); non-IP: frame_length - stripped.
* ``packets`` = 1; estimates = sampled x rate; a zero rate is counted as
  ``sampling_rate_missing`` and replaced by the configured override or 1.
* All times are the receive time (the sFlow header has no wall clock).

Raises :class:`DecodeError` (only) when the datagram structure is broken:
header cut short, a sample running past the datagram, a record running past
its sample, or a sample count the datagram cannot hold.
"""

from __future__ import annotations

import socket
from collections import Counter
from struct import Struct
from struct import error as _StructError

import numpy as np

from schemas.columns import FLOW_DTYPE, PROTO_SFLOW5, empty_counters

from .errors import DecodeError
from .packet import NON_IP, parse_ethernet, parse_ipv4, parse_ipv6
from .result import EMPTY_COUNTERS, EMPTY_FLOWS, DecodeResult, ExportHeader
from .templates import TemplateCache

__all__ = ["decode_sflow_reference"]

P = "sflow5"
SAMPLE_FLOW = 1
SAMPLE_COUNTER = 2
SAMPLE_FLOW_EXPANDED = 3
SAMPLE_COUNTER_EXPANDED = 4

_V4_PREFIX = b"\x00" * 10 + b"\xff\xff"
_ZERO16 = b"\x00" * 16

_II = Struct(">II").unpack_from
_HDR = Struct(">IIII").unpack_from  # sub-agent, sequence, uptime, samples
_FS = Struct(">IIIIIIII").unpack_from  # seq, source, rate, pool, drops, in, out, records
# seq, src type, src index, rate, pool, drops, in fmt, in value, out fmt, out value, records
_FSX = Struct(">IIIIIIIIIII").unpack_from
_CS = Struct(">III").unpack_from  # seq, source, records
_CSX = Struct(">IIII").unpack_from  # seq, src type, src index, records
_RAW = Struct(">IIII").unpack_from  # header protocol, frame length, stripped, header length
_SIP4 = Struct(">II4s4sIIII").unpack_from  # length, protocol, src, dst, sport, dport, flags, tos
_SIP6 = Struct(">II16s16sIIII").unpack_from  # length, protocol, src, dst, sport, dport, flags, priority
_I = Struct(">I").unpack_from
# Generic interface counters; 64-bit counters read signed (same 64 bits, fits an Avro long).
_GEN = Struct(">IIqIIqIIIIIIqIIIIII").unpack_from
_ETH = Struct(">13I").unpack_from
_GEN_LEN = 88
_ETH_LEN = 52

_MIN_SAMPLE = 8
_MAX_SAMPLES = 4096  # far above what fits in a 64 KB datagram with real samples

# FLOW_DTYPE with the address fields as S16 (same bytes, same offsets): per-sample
# tuples in FLOW_DTYPE field order convert in one np.array call, then .view(FLOW_DTYPE).
def _alias_dtype(dt: np.dtype) -> np.dtype:
    names, formats, offsets = [], [], []
    for name in dt.names:
        fdt, foff = dt.fields[name][:2]
        names.append(name)
        formats.append("S16" if fdt.shape == (16,) else fdt)
        offsets.append(foff)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": dt.itemsize})


_ROW_DTYPE = _alias_dtype(FLOW_DTYPE)
_I64_MAX = 0x7FFFFFFFFFFFFFFF

_COUNTER_FIELDS = (
    "if_index", "if_type", "if_speed", "if_direction", "_status",
    "in_octets", "in_ucast_pkts", "in_mcast_pkts", "in_bcast_pkts", "in_discards", "in_errors", "in_unknown_protos",
    "out_octets", "out_ucast_pkts", "out_mcast_pkts", "out_bcast_pkts", "out_discards", "out_errors", "promiscuous",
)
_ETH_FIELDS = (
    "dot3_alignment_errors", "dot3_fcs_errors", "dot3_single_collision_frames", "dot3_multiple_collision_frames",
    "dot3_sqe_test_errors", "dot3_deferred_transmissions", "dot3_late_collisions", "dot3_excessive_collisions",
    "dot3_internal_mac_transmit_errors", "dot3_carrier_sense_errors", "dot3_frame_too_longs",
    "dot3_internal_mac_receive_errors", "dot3_symbol_errors",
)

_agent_text: dict[bytes, str] = {}


def _agent_str(a16: bytes) -> str:
    s = _agent_text.get(a16)
    if s is None:
        if a16[:12] == _V4_PREFIX:
            s = socket.inet_ntop(socket.AF_INET, a16[12:])
        else:
            s = socket.inet_ntop(socket.AF_INET6, a16)
        if len(_agent_text) < 65536:
            _agent_text[a16] = s
    return s


def decode_sflow_reference(
    datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache
) -> DecodeResult:
    """Decode one sFlow v5 datagram into flow and counter rows (see module docstring)."""
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
    counters: list = []
    missing_rate = 0
    fallback_rate = 0
    t = received_at_ms

    for _ in range(nsamples):
        if off + 8 > n:
            raise DecodeError(P, "truncated", off, "sample header")
        sfmt, slen = _II(data, off)
        off += 8
        end = off + slen
        if end > n:
            raise DecodeError(P, "truncated", off, "sample runs past the datagram")

        if sfmt == 1 or sfmt == 3:
            if sfmt == 1:
                if slen < 32:
                    raise DecodeError(P, "bad_length", off, "flow sample")
                _sseq, source, rate, _pool, _drops, in_if, out_if, nrec = _FS(data, off)
                p = off + 32
            else:
                if slen < 44:
                    raise DecodeError(P, "bad_length", off, "expanded flow sample")
                _sseq, stype, sidx, rate, _pool, _drops, ifmt, ival, ofmt, oval, nrec = _FSX(data, off)
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
            frame_bytes = 0
            for _r in range(nrec):
                if p + 8 > end:
                    raise DecodeError(P, "bad_length", p, "flow record header")
                rfmt, rlen = _II(data, p)
                p += 8
                rend = p + rlen
                if rend > end:
                    raise DecodeError(P, "bad_length", p, "flow record runs past its sample")
                if rfmt == 1:
                    if rlen < 16:
                        raise DecodeError(P, "bad_length", p, "raw packet header record")
                    hproto, flen, stripped, hlen = _RAW(data, p)
                    if hlen > rlen - 16:
                        hlen = rlen - 16
                        problems["header_length_clamped"] += 1
                    hdr = data[p + 16 : p + 16 + hlen]
                    if hproto == 1:
                        parsed = parse_ethernet(hdr, 0, 0)
                    elif hproto == 11:
                        parsed = parse_ipv4(hdr, 0, 0, 0)
                    elif hproto == 12:
                        parsed = parse_ipv6(hdr, 0, 0, 0)
                    else:
                        parsed = NON_IP
                        problems["unsupported_header_protocol"] += 1
                    frame_bytes = flen - stripped if flen > stripped else 0
                elif rfmt == 1001:
                    if rlen < 16:
                        raise DecodeError(P, "bad_length", p, "extended switch record")
                    sw_vlan = _I(data, p)[0]
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
                elif rfmt != 1002:
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
            append(
                (
                    PROTO_SFLOW5, agent16, sub_agent, source, rate, b, 1, be, rate,
                    ipv, sa, da, sp, dp, pr, fl, tos, sw_vlan & 0xFFF if sw_vlan else hvlan,
                    in_if, out_if, 0, t, t, t, t, vni, rop, rqp,
                )
            )
        elif sfmt == 2 or sfmt == 4:
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
                    raise DecodeError(P, "bad_length", p, "counter record header")
                rfmt, rlen = _II(data, p)
                p += 8
                rend = p + rlen
                if rend > end:
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
            if gen is not None:
                counters.append((source, cseq, gen, eth))
            else:
                problems["counter_sample_without_generic"] += 1
        else:
            problems["unknown_sample_type"] += 1
        off += (slen + 3) & ~3

    header = ExportHeader(P, _agent_str(agent16), sub_agent, dseq, 1, None, uptime)
    flows = EMPTY_FLOWS
    if rows:
        if missing_rate:
            problems["sampling_rate_missing"] += missing_rate
        flows = np.array(rows, dtype=_ROW_DTYPE).view(FLOW_DTYPE)
    ctr = EMPTY_COUNTERS
    if counters:
        ctr = _counter_array(counters, agent16, sub_agent, received_at_ms, uptime)
    return DecodeResult(flows=flows, counters=ctr, header=header, problems=problems)


def _counter_array(counters, agent16, sub_agent, received_at_ms, uptime) -> np.ndarray:
    out = empty_counters(len(counters))
    out["exporter_addr"] = np.frombuffer(agent16, dtype=np.uint8)
    out["observation_domain"] = sub_agent
    out["time_received_ms"] = received_at_ms
    out["agent_uptime_ms"] = uptime
    for i, (source, cseq, gen, eth) in enumerate(counters):
        row = out[i]
        row["source_id"] = source
        row["sample_sequence"] = cseq
        for name, v in zip(_COUNTER_FIELDS, gen):
            if name == "if_direction":
                row[name] = v & 0x7FFFFFFF
            elif name == "_status":
                row["if_admin_up"] = bool(v & 1)
                row["if_oper_up"] = bool(v & 2)
            else:
                row[name] = v
        if eth is not None:
            row["has_ethernet"] = True
            for name, v in zip(_ETH_FIELDS, eth):
                row[name] = v
    return out
