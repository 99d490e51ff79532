# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The sFlow v5 decoder, compiled ahead of time (Cython -> C) when the wheel or image is built.

The one production path for sFlow (:mod:`ingest.decode.sflow` wraps it): many datagrams per call, each
walked in full -- samples, records, counters and every sampled header shape of the readable reference
(:mod:`ingest.decode.reference`) -- straight into packed rows of FLOW_DTYPE, SAMPLE_DTYPE and
COUNTER_DTYPE. Every read of a datagram is checked against that datagram's length first, exactly where
the reference's struct reads would fail; ``boundscheck`` is off only for the output arrays, whose sizes
the walk computes. Errors, problems and the fallback sampling rate follow the reference, reported as
codes (:data:`ERRORS`, :data:`PROBLEMS`) that the wrapper turns into ``DecodeError`` and counters.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

# (reason, detail) of each error code; the detail is formatted with a= and b=.
ERRORS = (
    None,
    ("truncated", "datagram header"),
    ("bad_version", "version {a}"),
    ("unsupported", "agent address type {a}"),
    ("too_many", "{a} samples"),
    ("bad_count", "{a} samples in {b} bytes"),
    ("truncated", "sample header"),
    ("truncated", "sample runs past the datagram"),
    ("bad_length", "flow sample"),
    ("bad_length", "expanded flow sample"),
    ("bad_count", "{a} flow records"),
    ("bad_length", "flow record header"),
    ("bad_length", "flow record runs past its sample"),
    ("bad_length", "raw packet header record"),
    ("bad_length", "extended switch record"),
    ("bad_length", "sampled IPv4 record"),
    ("bad_length", "sampled IPv6 record"),
    ("bad_length", "counter sample"),
    ("bad_length", "expanded counter sample"),
    ("bad_count", "{a} counter records"),
    ("bad_length", "counter record header"),
    ("bad_length", "counter record runs past its sample"),
    ("bad_length", "generic interface counters"),
    ("bad_length", "ethernet counters"),
    ("bad_length", "discarded packet sample"),
    ("bad_count", "{a} discarded packet records"),
)
cdef enum:
    E_HEADER = 1
    E_VERSION
    E_AGENT_TYPE
    E_TOO_MANY
    E_SAMPLE_COUNT
    E_SAMPLE_HEADER
    E_SAMPLE_PAST
    E_FLOW_SAMPLE
    E_XFLOW_SAMPLE
    E_FLOW_RECORDS
    E_RECORD_HEADER
    E_RECORD_PAST
    E_RAW_RECORD
    E_SWITCH_RECORD
    E_SAMPLED_V4
    E_SAMPLED_V6
    E_COUNTER_SAMPLE
    E_XCOUNTER_SAMPLE
    E_COUNTER_RECORDS
    E_CRECORD_HEADER
    E_CRECORD_PAST
    E_GENERIC
    E_ETHERNET
    E_DISCARD_SAMPLE
    E_DISCARD_RECORDS

# Non-fatal problems, counted per datagram (``sampling_rate_missing`` is reported last, as the reference does).
PROBLEMS = ("header_length_clamped", "unsupported_header_protocol", "unknown_record_type", "unknown_sample_type",
            "counter_sample_without_generic", "sampling_rate_missing")
cdef enum:
    P_CLAMPED = 0
    P_HEADER_PROTOCOL
    P_RECORD_TYPE
    P_SAMPLE_TYPE
    P_NO_GENERIC
    P_RATE_MISSING
    NPROB

cdef enum:
    MAX_SAMPLES = 4096  # far above what fits in a 64 KB datagram with real samples
    MIN_SAMPLE = 8
    MAX_TAGS = 4  # VLAN tags walked
    MAX_EXT = 8  # IPv6 extension headers walked
    VXLAN_PORT = 4789
    SAMPLE_DISCARD = 5  # sflow.org "sFlow Dropped Packet Notification Structures": discarded_packet
    REC_EGRESS_QUEUE = 1036  # the same spec: extended_egress_queue
    ROCEV2_PORT = 4791
cdef uint64_t I64_MAX = 0x7FFFFFFFFFFFFFFF
cdef uint8_t ZERO52[52]  # the Ethernet counters of a sample without them
memset(ZERO52, 0, 52)

# ---------------------------------------------------------------- rows, as numpy lays out the dtypes


cdef packed struct FlowRow:  # schemas.columns.FLOW_DTYPE
    int32_t export_protocol
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t sampler_id
    int64_t sampling_rate
    int64_t bytes
    int64_t packets
    int64_t bytes_est
    int64_t packets_est
    int32_t ip_version
    uint8_t src_addr[16]
    uint8_t dst_addr[16]
    int32_t src_port
    int32_t dst_port
    int32_t ip_protocol
    int32_t tcp_flags
    int32_t tos
    int32_t vlan
    int64_t in_if
    int64_t out_if
    int32_t direction
    int64_t time_start_ms
    int64_t time_end_ms
    int64_t time_received_ms
    int64_t time_export_ms
    int64_t vxlan_vni
    int32_t roce_opcode
    int64_t roce_dest_qp
    int32_t vlan_out
    int32_t vlan_priority_in
    int32_t vlan_priority_out
    uint8_t next_hop[16]
    uint8_t bgp_next_hop[16]


cdef packed struct SampleRow:  # ingest.decode.result.SAMPLE_DTYPE
    int64_t seq
    int64_t pool
    int64_t drops
    int64_t domain
    int64_t source
    int64_t rate
    int64_t received_ms


cdef packed struct CounterRow:  # schemas.columns.COUNTER_DTYPE
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t source_id
    int64_t sample_sequence
    int64_t time_received_ms
    int64_t agent_uptime_ms
    int64_t if_index
    int64_t if_type
    int64_t if_speed
    int32_t if_direction
    char if_admin_up
    char if_oper_up
    int64_t in_octets
    int64_t in_ucast_pkts
    int64_t in_mcast_pkts
    int64_t in_bcast_pkts
    int64_t in_discards
    int64_t in_errors
    int64_t in_unknown_protos
    int64_t out_octets
    int64_t out_ucast_pkts
    int64_t out_mcast_pkts
    int64_t out_bcast_pkts
    int64_t out_discards
    int64_t out_errors
    int64_t promiscuous
    char has_ethernet
    int64_t dot3_alignment_errors
    int64_t dot3_fcs_errors
    int64_t dot3_single_collision_frames
    int64_t dot3_multiple_collision_frames
    int64_t dot3_sqe_test_errors
    int64_t dot3_deferred_transmissions
    int64_t dot3_late_collisions
    int64_t dot3_excessive_collisions
    int64_t dot3_internal_mac_transmit_errors
    int64_t dot3_carrier_sense_errors
    int64_t dot3_frame_too_longs
    int64_t dot3_internal_mac_receive_errors
    int64_t dot3_symbol_errors


cdef packed struct DiscardRow:  # ingest.decode.result.DISCARD_DTYPE
    uint8_t exporter_addr[16]
    int64_t observation_domain
    int64_t source_id
    int64_t sample_sequence
    int64_t drops
    int64_t in_if
    int64_t out_if
    int32_t reason
    int32_t egress_queue
    int64_t time_received_ms
    int64_t bytes
    int32_t ip_version
    uint8_t src_addr[16]
    uint8_t dst_addr[16]
    int32_t src_port
    int32_t dst_port
    int32_t ip_protocol
    int32_t vlan
    int32_t roce_opcode


def check_layouts(flows, samples, counters, discards):
    """Raise ValueError unless the arrays' dtypes have exactly the rows' field types and offsets."""
    cdef FlowRow[::1] f = flows
    cdef SampleRow[::1] s = samples
    cdef CounterRow[::1] c = counters
    cdef DiscardRow[::1] x = discards
    return True


# ---------------------------------------------------------------- the sampled header (reference: packet.py)


cdef struct Parsed:  # reference.packet's 13-tuple
    int64_t ipv
    uint8_t src[16]
    uint8_t dst[16]
    int64_t sp, dp, proto, flags, tos, vlan, iplen, vni, rop, rqp


cdef inline int64_t _u16(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return (<int64_t>b[p] << 8) | b[p + 1]


cdef inline int64_t _u32(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return (<int64_t>b[p] << 24) | (<int64_t>b[p + 1] << 16) | (<int64_t>b[p + 2] << 8) | b[p + 3]


cdef inline int64_t _i64(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(b, p) << 32) | <uint64_t>_u32(b, p + 4))


cdef inline int64_t _expanded_source(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    """An expanded sample's data source: type (8 bits) << 24 | index (24 bits), from two words at ``p``."""
    return ((_u32(b, p) & 0xFF) << 24) | (_u32(b, p + 4) & 0xFFFFFF)


cdef inline void _v4(uint8_t* a, const uint8_t* b) noexcept nogil:
    """IPv4-mapped IPv6 address of the 4 bytes at ``b``."""
    memset(a, 0, 10)
    a[10] = 0xFF
    a[11] = 0xFF
    memcpy(a + 12, b, 4)


cdef inline void _no_ip(Parsed* r, int64_t vlan) noexcept nogil:
    memset(r, 0, sizeof(Parsed))
    r.vlan = vlan
    r.iplen = -1
    r.vni = -1
    r.rop = -1
    r.rqp = -1


cdef inline void _ip(Parsed* r, int64_t ipv, int64_t tos, int64_t vlan, int64_t iplen, int64_t proto) noexcept nogil:
    """An IP header's values, no L4 values yet (addresses are the caller's)."""
    r.ipv = ipv
    r.sp = 0
    r.dp = 0
    r.proto = proto
    r.flags = 0
    r.tos = tos
    r.vlan = vlan
    r.iplen = iplen
    r.vni = -1
    r.rop = -1
    r.rqp = -1


cdef void _ethernet(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int depth, Parsed* r) noexcept nogil:
    """Ethernet II frame at ``off``; the outer 802.1Q/802.1ad tag gives ``vlan`` (at most MAX_TAGS tags)."""
    cdef int64_t et, vlan = 0
    cdef int tags = 0
    if off + 14 > n:
        _no_ip(r, 0)
        return
    et = _u16(h, off + 12)
    off += 14
    while (et == 0x8100 or et == 0x88A8 or et == 0x9100) and tags < MAX_TAGS:
        if off + 4 > n:
            _no_ip(r, vlan)
            return
        if tags == 0:
            vlan = _u16(h, off) & 0x0FFF
        et = _u16(h, off + 2)
        off += 4
        tags += 1
    if et == 0x0800:
        _ipv4(h, n, off, vlan, depth, r)
    elif et == 0x86DD:
        _ipv6(h, n, off, vlan, depth, r)
    else:
        _no_ip(r, vlan)


cdef void _ipv4(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int64_t vlan, int depth, Parsed* r) noexcept nogil:
    """IPv4 header at ``off`` then its L4 header (not for non-first fragments)."""
    cdef int64_t vi, ihl
    if off + 20 > n:
        if n >= off + 4 and (h[off] >> 4) == 4:  # cut inside the IP header: the length field is still there
            _no_ip(r, vlan)
            _ip(r, 4, h[off + 1], vlan, _u16(h, off + 2), 0)
        else:
            _no_ip(r, vlan)
        return
    vi = h[off]
    _ip(r, 4, h[off + 1], vlan, _u16(h, off + 2), h[off + 9])
    _v4(r.src, h + off + 12)
    _v4(r.dst, h + off + 16)
    ihl = (vi & 0x0F) << 2
    if (vi >> 4) != 4 or ihl < 20 or (_u16(h, off + 6) & 0x1FFF):
        return
    _l4(h, n, off + ihl, depth, r)


cdef void _ipv6(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int64_t vlan, int depth, Parsed* r) noexcept nogil:
    """IPv6 header at ``off``, walking hop-by-hop, routing, fragment, destination options and AH headers."""
    cdef int64_t vtf, nh, nxt
    cdef Py_ssize_t p
    cdef int count = 0
    if off + 40 > n:
        _no_ip(r, vlan)
        if n >= off + 6 and (h[off] >> 4) == 6:
            _ip(r, 6, (_u32(h, off) >> 20) & 0xFF, vlan, _u16(h, off + 4) + 40, 0)
        return
    vtf = _u32(h, off)
    nh = h[off + 6]
    _ip(r, 6, (vtf >> 20) & 0xFF, vlan, _u16(h, off + 4) + 40, nh)
    memcpy(r.src, h + off + 8, 16)
    memcpy(r.dst, h + off + 24, 16)
    if (vtf >> 28) != 6:
        return
    p = off + 40
    while (nh == 0 or nh == 43 or nh == 44 or nh == 60 or nh == 51) and count < MAX_EXT:
        if p >= n:
            r.proto = nh
            return
        nxt = h[p]
        if nh == 44:  # fragment header: fixed 8 bytes
            if p + 4 > n:
                r.proto = nh
                return
            if _u16(h, p + 2) & 0xFFF8:
                r.proto = nxt
                return
            p += 8
        else:
            if p + 1 >= n:
                r.proto = nh
                return
            if nh == 51:  # AH: length in 4-octet units minus 2
                p += (<Py_ssize_t>h[p + 1] + 2) << 2
            else:
                p += (<Py_ssize_t>h[p + 1] + 1) << 3
        nh = nxt
        count += 1
    r.proto = nh
    _l4(h, n, p, depth, r)


cdef void _l4(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int depth, Parsed* r) noexcept nogil:
    """TCP/UDP/SCTP ports, ICMP type and code, RoCEv2 BTH and VXLAN at ``off`` (protocol in ``r.proto``)."""
    cdef int64_t proto = r.proto
    if proto == 6:
        if off + 14 <= n:
            r.sp = _u16(h, off)
            r.dp = _u16(h, off + 2)
            r.flags = h[off + 13]
        elif off + 4 <= n:
            r.sp = _u16(h, off)
            r.dp = _u16(h, off + 2)
    elif proto == 17:
        if off + 4 > n:
            return
        r.sp = _u16(h, off)
        r.dp = _u16(h, off + 2)
        if r.dp == ROCEV2_PORT:
            if off + 16 <= n:
                r.rop = h[off + 8]
                r.rqp = _u32(h, off + 12) & 0xFFFFFF
        elif r.dp == VXLAN_PORT and depth == 0:
            _vxlan(h, n, off + 8, r)
    elif proto == 1 or proto == 58:
        if off + 2 <= n:
            r.dp = _u16(h, off)
    elif proto == 132:
        if off + 4 <= n:
            r.sp = _u16(h, off)
            r.dp = _u16(h, off + 2)


cdef void _vxlan(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, Parsed* r) noexcept nogil:
    """VXLAN header at ``off`` (8 bytes) then the inner frame: its addresses, ports, protocol, flags and RoCE
    fields with the outer ToS, VLAN and length; the outer values but the VNI if the inner frame is cut."""
    cdef Parsed inner
    if off + 8 > n:
        return
    r.vni = _u32(h, off + 4) >> 8
    _ethernet(h, n, off + 8, 1, &inner)
    if inner.ipv == 0:
        return
    r.ipv = inner.ipv
    memcpy(r.src, inner.src, 16)
    memcpy(r.dst, inner.dst, 16)
    r.sp = inner.sp
    r.dp = inner.dp
    r.proto = inner.proto
    r.flags = inner.flags
    r.rop = inner.rop
    r.rqp = inner.rqp


cdef void _header(const uint8_t* h, Py_ssize_t n, int64_t protocol, Parsed* r) noexcept nogil:
    if protocol == 1:
        _ethernet(h, n, 0, 0, r)
    elif protocol == 11:
        _ipv4(h, n, 0, 0, 0, r)
    else:
        _ipv6(h, n, 0, 0, 0, r)


def parse_header(const uint8_t[::1] h, Py_ssize_t length, int64_t protocol):
    """The 13-tuple of ``reference.packet.parse_header(h[:length], protocol)`` (1, 11 or 12), reading no byte
    of ``h`` past ``length``; for tests."""
    cdef Parsed r
    if length > h.shape[0] or length < 0 or protocol not in (1, 11, 12):
        raise ValueError("length past the buffer, or a header protocol other than 1, 11, 12")
    _header(&h[0] if h.shape[0] else NULL, length, protocol, &r)
    return (r.ipv, bytes(r.src[:16]), bytes(r.dst[:16]), r.sp, r.dp, r.proto, r.flags, r.tos, r.vlan, r.iplen,
            r.vni, r.rop, r.rqp)


# ---------------------------------------------------------------- datagrams


cdef struct Out:
    FlowRow* flows
    SampleRow* samples
    CounterRow* counters
    DiscardRow* discards
    Py_ssize_t nflow
    Py_ssize_t nctr
    Py_ssize_t ndisc
    Py_ssize_t cap  # rows room in flows/samples and in counters
    int64_t prob[NPROB]
    int8_t rank[NPROB]  # order of first occurrence, 0 = none
    int nrank
    int64_t err_off
    int64_t err_a
    int64_t err_b
    # the datagram header
    uint8_t agent[16]
    int64_t sub
    int64_t seq
    int64_t uptime


cdef inline int _fail(Out* o, int code, int64_t off, int64_t a, int64_t b) noexcept:
    o.err_off = off
    o.err_a = a
    o.err_b = b
    return code


cdef inline void _problem(Out* o, int which) noexcept:
    if o.prob[which] == 0:
        o.nrank += 1
        o.rank[which] = o.nrank
    o.prob[which] += 1


cdef int64_t _sample_count(const uint8_t* d, Py_ssize_t n) noexcept nogil:
    """Samples the header announces, 0 if the header is not valid (rows a datagram can give at most)."""
    cdef int64_t atype, off, ns
    if n < 8 or _u32(d, 0) != 5:
        return 0
    atype = _u32(d, 4)
    off = 12 if atype == 1 else 24 if atype == 2 else 8 if atype == 0 else -1
    if off < 0 or n < off + 16:
        return 0
    ns = _u32(d, off + 12)
    if ns > MAX_SAMPLES or ns * MIN_SAMPLE > n - off - 16:
        return 0
    return ns


def capacity(list datas):
    """Rows (flow, counter or discard) the datagrams can give at most: the sum of their valid sample counts."""
    cdef int64_t cap = 0
    cdef bytes d
    for d in datas:
        if d is None:
            raise TypeError("datagrams must be bytes")
        cap += _sample_count(<const uint8_t*>PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d))
    return cap


cdef struct Recs:  # a flow or discard sample's records
    Parsed parsed
    int64_t sw_vlan, sw1, sw2, sw3, frame_bytes, queue
    uint8_t next_hop[16]


cdef int _records(const uint8_t* d, int64_t p, int64_t end, int64_t nrec, Out* o, Recs* x) noexcept:
    """The ``nrec`` flow records at ``p`` of a flow or discarded packet sample ending at ``end`` into ``x``: the
    last raw header's parse (else the last sampled IPv4/IPv6 record's values), extended switch and router
    fields, the egress queue (-1 without record 1036); 0, or an error code."""
    cdef int64_t r, rfmt, rlen, hproto, flen, stripped, hlen, at, q, pr, sp, dp
    cdef bint have_parsed = False, have_sampled = False
    cdef Parsed sampled
    x.sw_vlan = x.sw1 = x.sw2 = x.sw3 = 0
    memset(x.next_hop, 0, 16)
    x.frame_bytes = 0
    x.queue = -1
    for r in range(nrec):
        if p + 8 > end:
            return _fail(o, E_RECORD_HEADER, p, 0, 0)
        rfmt = _u32(d, p)
        rlen = _u32(d, p + 4)
        p += 8
        if p + rlen > end:
            return _fail(o, E_RECORD_PAST, p, 0, 0)
        if rfmt == 1:  # raw packet header
            if rlen < 16:
                return _fail(o, E_RAW_RECORD, p, 0, 0)
            hproto = _u32(d, p)
            flen = _u32(d, p + 4)
            stripped = _u32(d, p + 8)
            hlen = _u32(d, p + 12)
            if hlen > rlen - 16:
                hlen = rlen - 16
                _problem(o, P_CLAMPED)
            if hproto == 1 or hproto == 11 or hproto == 12:
                _header(d + p + 16, hlen, hproto, &x.parsed)
            else:
                _no_ip(&x.parsed, 0)
                _problem(o, P_HEADER_PROTOCOL)
            have_parsed = True
            x.frame_bytes = flen - stripped if flen > stripped else 0
        elif rfmt == 1001:  # extended switch
            if rlen < 16:
                return _fail(o, E_SWITCH_RECORD, p, 0, 0)
            x.sw_vlan = _u32(d, p)
            x.sw1 = _u32(d, p + 4) & 7
            x.sw2 = _u32(d, p + 8) & 0xFFF
            x.sw3 = _u32(d, p + 12) & 7
        elif rfmt == 1002:  # extended router: the next hop
            if rlen >= 8:
                at = _u32(d, p)
                if at == 1:
                    _v4(x.next_hop, d + p + 4)
                elif at == 2 and rlen >= 20:
                    memcpy(x.next_hop, d + p + 4, 16)
        elif rfmt == REC_EGRESS_QUEUE:  # the egress queue a discarded (or sampled) packet was bound for
            if rlen >= 4:
                x.queue = _u32(d, p)
        elif rfmt == 3 or rfmt == 4:  # sampled IPv4 / IPv6
            if rfmt == 3 and rlen < 32:
                return _fail(o, E_SAMPLED_V4, p, 0, 0)
            if rfmt == 4 and rlen < 56:
                return _fail(o, E_SAMPLED_V6, p, 0, 0)
            q = 8 if rfmt == 3 else 32  # length, protocol, addresses, then the ports
            pr = _u32(d, p + 4)
            sp = _u32(d, p + 8 + q)
            dp = _u32(d, p + 12 + q)
            if pr == (1 if rfmt == 3 else 58):  # ICMP: type and code
                dp = ((sp & 0xFF) << 8) | (dp & 0xFF)
                sp = 0
            _no_ip(&sampled, 0)
            _ip(&sampled, 4 if rfmt == 3 else 6, _u32(d, p + 20 + q) & 0xFF, 0, _u32(d, p), pr & 0xFF)
            if rfmt == 3:
                _v4(sampled.src, d + p + 8)
                _v4(sampled.dst, d + p + 12)
            else:
                memcpy(sampled.src, d + p + 8, 16)
                memcpy(sampled.dst, d + p + 24, 16)
            sampled.sp = sp & 0xFFFF
            sampled.dp = dp & 0xFFFF
            sampled.flags = _u32(d, p + 16 + q) & 0xFF
            have_sampled = True
        else:
            _problem(o, P_RECORD_TYPE)
        p += (rlen + 3) & ~3
    if not have_parsed or (x.parsed.ipv == 0 and have_sampled):
        if have_sampled:
            x.parsed = sampled
        else:
            _no_ip(&x.parsed, 0)
    return 0


cdef int _datagram(const uint8_t* d, Py_ssize_t n, int64_t t, int32_t proto_code, Out* o, fallback,
                   Py_ssize_t i) except -1:
    """Decode one datagram into ``o``'s rows; 0, or an error code (then the rows written are void)."""
    cdef int64_t atype, off, ns, j, sfmt, slen, end, p, nrec, r, rfmt, rlen
    cdef int64_t sseq, source, rate, pool, drops, in_if, out_if, fb = 0
    cdef int64_t nbytes, gen_at, eth_at, cseq, ifmt, ofmt
    cdef uint64_t est
    cdef Recs x
    cdef FlowRow* row
    cdef SampleRow* fact
    cdef CounterRow* c
    cdef int code

    if n < 8:
        return _fail(o, E_HEADER, 0, 0, 0)
    if _u32(d, 0) != 5:
        return _fail(o, E_VERSION, 0, _u32(d, 0), 0)
    atype = _u32(d, 4)
    if atype == 1:
        off = 12
    elif atype == 2:
        off = 24
    elif atype == 0:
        off = 8
    else:
        return _fail(o, E_AGENT_TYPE, 4, atype, 0)
    if n < off + 16:
        return _fail(o, E_HEADER, min(n, off), 0, 0)
    memset(o.agent, 0, 16)
    if atype == 1:
        _v4(o.agent, d + 8)
    elif atype == 2:
        memcpy(o.agent, d + 8, 16)
    o.sub = _u32(d, off)
    o.seq = _u32(d, off + 4)
    o.uptime = _u32(d, off + 8)
    ns = _u32(d, off + 12)
    off += 16
    if ns > MAX_SAMPLES:
        return _fail(o, E_TOO_MANY, off - 4, ns, 0)
    if ns * MIN_SAMPLE > n - off:
        return _fail(o, E_SAMPLE_COUNT, off - 4, ns, n - off)

    for j in range(ns):
        if off + 8 > n:
            return _fail(o, E_SAMPLE_HEADER, off, 0, 0)
        sfmt = _u32(d, off)
        slen = _u32(d, off + 4)
        off += 8
        end = off + slen
        if end > n:
            return _fail(o, E_SAMPLE_PAST, off, 0, 0)
        if sfmt == 1 or sfmt == 3:
            if sfmt == 1:
                if slen < 32:
                    return _fail(o, E_FLOW_SAMPLE, off, 0, 0)
                sseq = _u32(d, off)
                source = _u32(d, off + 4)
                rate = _u32(d, off + 8)
                pool = _u32(d, off + 12)
                drops = _u32(d, off + 16)
                in_if = _u32(d, off + 20)
                out_if = _u32(d, off + 24)
                nrec = _u32(d, off + 28)
                p = off + 32
            else:
                if slen < 44:
                    return _fail(o, E_XFLOW_SAMPLE, off, 0, 0)
                sseq = _u32(d, off)
                source = _expanded_source(d, off + 4)
                rate = _u32(d, off + 12)
                pool = _u32(d, off + 16)
                drops = _u32(d, off + 20)
                ifmt = _u32(d, off + 24)
                in_if = _u32(d, off + 28)
                if ifmt != 0:
                    in_if = ((ifmt & 3) << 30) | (in_if & 0x3FFFFFFF)
                ofmt = _u32(d, off + 32)
                out_if = _u32(d, off + 36)
                if ofmt != 0:
                    out_if = ((ofmt & 3) << 30) | (out_if & 0x3FFFFFFF)
                nrec = _u32(d, off + 40)
                p = off + 44
            if nrec * 8 > end - p:
                return _fail(o, E_FLOW_RECORDS, p - 4, nrec, 0)
            if rate == 0:
                o.prob[P_RATE_MISSING] += 1
                if fb == 0:
                    fb = fallback(i)
                rate = fb
            code = _records(d, p, end, nrec, o, &x)
            if code:
                return code
            nbytes = x.parsed.iplen if x.parsed.iplen >= 0 else x.frame_bytes
            est = <uint64_t>nbytes * <uint64_t>rate
            if est > I64_MAX:
                est = I64_MAX
            if o.nflow >= o.cap:
                raise RuntimeError("sFlow rows past the capacity computed for them")
            row = o.flows + o.nflow
            fact = o.samples + o.nflow
            o.nflow += 1
            row.export_protocol = proto_code
            memcpy(row.exporter_addr, o.agent, 16)
            row.observation_domain = o.sub
            row.sampler_id = source
            row.sampling_rate = rate
            row.bytes = nbytes
            row.packets = 1
            row.bytes_est = <int64_t>est
            row.packets_est = rate
            row.ip_version = <int32_t>x.parsed.ipv
            memcpy(row.src_addr, x.parsed.src, 16)
            memcpy(row.dst_addr, x.parsed.dst, 16)
            row.src_port = <int32_t>x.parsed.sp
            row.dst_port = <int32_t>x.parsed.dp
            row.ip_protocol = <int32_t>x.parsed.proto
            row.tcp_flags = <int32_t>x.parsed.flags
            row.tos = <int32_t>x.parsed.tos
            row.vlan = <int32_t>((x.sw_vlan & 0xFFF) if x.sw_vlan != 0 else x.parsed.vlan)
            row.in_if = in_if
            row.out_if = out_if
            row.direction = 0
            row.time_start_ms = t
            row.time_end_ms = t
            row.time_received_ms = t
            row.time_export_ms = t
            row.vxlan_vni = x.parsed.vni
            row.roce_opcode = <int32_t>x.parsed.rop
            row.roce_dest_qp = x.parsed.rqp
            row.vlan_out = <int32_t>x.sw2
            row.vlan_priority_in = <int32_t>x.sw1
            row.vlan_priority_out = <int32_t>x.sw3
            memcpy(row.next_hop, x.next_hop, 16)
            memset(row.bgp_next_hop, 0, 16)
            fact.seq = sseq
            fact.pool = pool
            fact.drops = drops
            fact.domain = o.sub
            fact.source = source
            fact.rate = rate
            fact.received_ms = t
        elif sfmt == SAMPLE_DISCARD:
            code = _discard(d, off, end, t, o)
            if code:
                return code
        elif sfmt == 2 or sfmt == 4:
            if sfmt == 2:
                if slen < 12:
                    return _fail(o, E_COUNTER_SAMPLE, off, 0, 0)
                cseq = _u32(d, off)
                source = _u32(d, off + 4)
                nrec = _u32(d, off + 8)
                p = off + 12
            else:
                if slen < 16:
                    return _fail(o, E_XCOUNTER_SAMPLE, off, 0, 0)
                cseq = _u32(d, off)
                source = _expanded_source(d, off + 4)
                nrec = _u32(d, off + 12)
                p = off + 16
            if nrec * 8 > end - p:
                return _fail(o, E_COUNTER_RECORDS, p - 4, nrec, 0)
            gen_at = -1
            eth_at = -1
            for r in range(nrec):
                if p + 8 > end:
                    return _fail(o, E_CRECORD_HEADER, p, 0, 0)
                rfmt = _u32(d, p)
                rlen = _u32(d, p + 4)
                p += 8
                if p + rlen > end:
                    return _fail(o, E_CRECORD_PAST, p, 0, 0)
                if rfmt == 1:
                    if rlen < 88:
                        return _fail(o, E_GENERIC, p, 0, 0)
                    gen_at = p
                elif rfmt == 2:
                    if rlen < 52:
                        return _fail(o, E_ETHERNET, p, 0, 0)
                    eth_at = p
                else:
                    _problem(o, P_RECORD_TYPE)
                p += (rlen + 3) & ~3
            if gen_at < 0:
                _problem(o, P_NO_GENERIC)
            else:
                if o.nctr >= o.cap:
                    raise RuntimeError("sFlow counter rows past the capacity computed for them")
                c = o.counters + o.nctr
                o.nctr += 1
                _counter_row(c, d, gen_at, eth_at, o, source, cseq, t)
        else:
            _problem(o, P_SAMPLE_TYPE)
        off += (slen + 3) & ~3
    return 0


cdef int _discard(const uint8_t* d, int64_t off, int64_t end, int64_t t, Out* o) except -1:
    """A discarded packet sample's body at ``off`` (ending at ``end``) as a discard row; 0 or an error code."""
    cdef int64_t nrec, p
    cdef int code
    cdef Recs x
    cdef DiscardRow* row
    if end - off < 32:
        return _fail(o, E_DISCARD_SAMPLE, off, 0, 0)
    nrec = _u32(d, off + 28)
    p = off + 32
    if nrec * 8 > end - p:
        return _fail(o, E_DISCARD_RECORDS, p - 4, nrec, 0)
    code = _records(d, p, end, nrec, o, &x)
    if code:
        return code
    if o.ndisc >= o.cap:
        raise RuntimeError("sFlow discard rows past the capacity computed for them")
    row = o.discards + o.ndisc
    o.ndisc += 1
    memcpy(row.exporter_addr, o.agent, 16)
    row.observation_domain = o.sub
    row.sample_sequence = _u32(d, off)
    row.source_id = _expanded_source(d, off + 4)
    row.drops = _u32(d, off + 12)
    row.in_if = _u32(d, off + 16)
    row.out_if = _u32(d, off + 20)
    row.reason = <int32_t>_u32(d, off + 24)
    row.egress_queue = <int32_t>x.queue
    row.time_received_ms = t
    row.bytes = x.parsed.iplen if x.parsed.iplen >= 0 else x.frame_bytes
    row.ip_version = <int32_t>x.parsed.ipv
    memcpy(row.src_addr, x.parsed.src, 16)
    memcpy(row.dst_addr, x.parsed.dst, 16)
    row.src_port = <int32_t>x.parsed.sp
    row.dst_port = <int32_t>x.parsed.dp
    row.ip_protocol = <int32_t>x.parsed.proto
    row.vlan = <int32_t>((x.sw_vlan & 0xFFF) if x.sw_vlan != 0 else x.parsed.vlan)
    row.roce_opcode = <int32_t>x.parsed.rop
    return 0


cdef void _counter_row(CounterRow* c, const uint8_t* d, int64_t g, int64_t e, Out* o, int64_t source,
                       int64_t cseq, int64_t t) noexcept:
    """A generic interface counters record at ``g`` (and an Ethernet one at ``e``, or -1) as a counter row;
    64-bit counters are read signed (the same 64 bits, as an Avro long holds them)."""
    cdef int64_t status = _u32(d, g + 20)
    memcpy(c.exporter_addr, o.agent, 16)
    c.observation_domain = o.sub
    c.source_id = source
    c.sample_sequence = cseq
    c.time_received_ms = t
    c.agent_uptime_ms = o.uptime
    c.if_index = _u32(d, g)
    c.if_type = _u32(d, g + 4)
    c.if_speed = _i64(d, g + 8)
    c.if_direction = <int32_t>(_u32(d, g + 16) & 0x7FFFFFFF)
    c.if_admin_up = 1 if status & 1 else 0
    c.if_oper_up = 1 if status & 2 else 0
    c.in_octets = _i64(d, g + 24)
    c.in_ucast_pkts = _u32(d, g + 32)
    c.in_mcast_pkts = _u32(d, g + 36)
    c.in_bcast_pkts = _u32(d, g + 40)
    c.in_discards = _u32(d, g + 44)
    c.in_errors = _u32(d, g + 48)
    c.in_unknown_protos = _u32(d, g + 52)
    c.out_octets = _i64(d, g + 56)
    c.out_ucast_pkts = _u32(d, g + 64)
    c.out_mcast_pkts = _u32(d, g + 68)
    c.out_bcast_pkts = _u32(d, g + 72)
    c.out_discards = _u32(d, g + 76)
    c.out_errors = _u32(d, g + 80)
    c.promiscuous = _u32(d, g + 84)
    c.has_ethernet = 1 if e >= 0 else 0
    if e < 0:
        e = 0
        d = ZERO52
    c.dot3_alignment_errors = _u32(d, e)
    c.dot3_fcs_errors = _u32(d, e + 4)
    c.dot3_single_collision_frames = _u32(d, e + 8)
    c.dot3_multiple_collision_frames = _u32(d, e + 12)
    c.dot3_sqe_test_errors = _u32(d, e + 16)
    c.dot3_deferred_transmissions = _u32(d, e + 20)
    c.dot3_late_collisions = _u32(d, e + 24)
    c.dot3_excessive_collisions = _u32(d, e + 28)
    c.dot3_internal_mac_transmit_errors = _u32(d, e + 32)
    c.dot3_carrier_sense_errors = _u32(d, e + 36)
    c.dot3_frame_too_longs = _u32(d, e + 40)
    c.dot3_internal_mac_receive_errors = _u32(d, e + 44)
    c.dot3_symbol_errors = _u32(d, e + 48)


def walk(list datas, const int64_t[::1] ts, int32_t proto_code, fallback, uint8_t[::1] flows,
         uint8_t[::1] samples, uint8_t[::1] counters, uint8_t[::1] discards, int8_t[::1] status,
         int64_t[:, ::1] heads, uint8_t[:, ::1] agents, int64_t[::1] fbounds, int64_t[::1] cbounds,
         int64_t[::1] dbounds):
    """Decode the datagrams (``bytes``) into the rows of ``flows``/``samples``/``counters`` (room for
    :func:`capacity` rows each; ``discards`` likewise) and per datagram ``i`` into ``status[i]`` (0: flow
    rows only, 1: counters, discards or problems too, 2: error), ``heads[i]`` (sub-agent, sequence, uptime),
    ``agents[i]`` and the row bounds (``fbounds[i]:fbounds[i + 1]``, the same for counters and discards).
    ``fallback(i)``: the sampling rate for a zero rate of datagram ``i``. Returns (flow rows, counter rows,
    discard rows, {i: [(problem, count)] in order of first occurrence}, {i: (error code, offset, a, b)})."""
    cdef Py_ssize_t k = len(datas), i, q
    cdef Out o
    cdef int code
    cdef bytes d
    problems = {}
    errors = {}
    o.cap = flows.shape[0] // sizeof(FlowRow)
    if (samples.shape[0] // sizeof(SampleRow) < o.cap or counters.shape[0] // sizeof(CounterRow) < o.cap
            or discards.shape[0] // sizeof(DiscardRow) < o.cap or dbounds.shape[0] <= k or ts.shape[0] < k or status.shape[0] < k or heads.shape[0] < k or agents.shape[0] < k
            or agents.shape[1] != 16 or heads.shape[1] != 3 or fbounds.shape[0] <= k or cbounds.shape[0] <= k):
        raise ValueError("output arrays too small for the datagrams")
    o.flows = <FlowRow*>&flows[0] if flows.shape[0] else NULL
    o.samples = <SampleRow*>&samples[0] if samples.shape[0] else NULL
    o.counters = <CounterRow*>&counters[0] if counters.shape[0] else NULL
    o.discards = <DiscardRow*>&discards[0] if discards.shape[0] else NULL
    o.nflow = 0
    o.nctr = 0
    o.ndisc = 0
    fbounds[0] = 0
    cbounds[0] = 0
    dbounds[0] = 0
    for i in range(k):
        d = datas[i]
        if d is None:
            raise TypeError("datagrams must be bytes")
        memset(o.prob, 0, sizeof(o.prob))
        memset(o.rank, 0, sizeof(o.rank))
        o.nrank = 0
        fbounds[i + 1] = o.nflow
        cbounds[i + 1] = o.nctr
        dbounds[i + 1] = o.ndisc
        code = _datagram(<const uint8_t*>PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d), ts[i], proto_code, &o,
                         fallback, i)
        if code:
            o.nflow = fbounds[i + 1]  # the datagram's rows are void
            o.nctr = cbounds[i + 1]
            o.ndisc = dbounds[i + 1]
            status[i] = 2
            errors[i] = (code, o.err_off, o.err_a, o.err_b)
            continue
        fbounds[i + 1] = o.nflow
        cbounds[i + 1] = o.nctr
        dbounds[i + 1] = o.ndisc
        heads[i, 0] = o.sub
        heads[i, 1] = o.seq
        heads[i, 2] = o.uptime
        memcpy(&agents[i, 0], o.agent, 16)
        if o.prob[P_RATE_MISSING]:
            o.nrank += 1
            o.rank[P_RATE_MISSING] = o.nrank
        if o.nrank:
            found = [(o.rank[q], PROBLEMS[q], o.prob[q]) for q in range(NPROB) if o.prob[q]]
            found.sort()
            problems[i] = [(name, count) for _, name, count in found]
        status[i] = 1 if o.nrank or cbounds[i + 1] > cbounds[i] or dbounds[i + 1] > dbounds[i] else 0
    return o.nflow, o.nctr, o.ndisc, problems, errors
