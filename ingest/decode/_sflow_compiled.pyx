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

from ingest.decode._sflow_packet cimport (Parsed, expanded_source, i64, ip_fields, no_ip, parse_sampled, u32,
                                          v4_mapped)

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
    SAMPLE_DISCARD = 5  # sflow.org "sFlow Dropped Packet Notification Structures": discarded_packet
    REC_EGRESS_QUEUE = 1036  # the same spec: extended_egress_queue
cdef uint64_t I64_MAX = 0x7FFFFFFFFFFFFFFF


def check_layouts(flows, samples, counters, discards):
    """Raise ValueError unless the arrays' dtypes have exactly the rows' field types and offsets."""
    cdef FlowRow[::1] f = flows
    cdef SampleRow[::1] s = samples
    cdef CounterRow[::1] c = counters
    cdef DiscardRow[::1] x = discards
    return True


# ---------------------------------------------------------------- datagrams


cdef struct Out:
    FlowRow* flows
    SampleRow* samples
    CounterRow* counters
    DiscardRow* discards
    Py_ssize_t nflow, nctr, ndisc  # rows written
    Py_ssize_t cap  # rows room in flows/samples and in counters
    int64_t prob[NPROB]
    int8_t rank[NPROB]  # order of first occurrence, 0 = none
    int nrank
    int64_t err_off, err_a, err_b  # the error's offset and values
    # the datagram header
    uint8_t agent[16]
    int64_t sub, seq, uptime


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


cdef inline int64_t _agent_end(int64_t atype) noexcept nogil:
    """Where the datagram header's agent address ends: by its type (1 IPv4, 2 IPv6, 0 unknown), -1 otherwise."""
    return 12 if atype == 1 else 24 if atype == 2 else 8 if atype == 0 else -1


cdef int64_t _sample_count(const uint8_t* d, Py_ssize_t n) noexcept nogil:
    """Samples the header announces, 0 if the header is not valid (rows a datagram can give at most)."""
    cdef int64_t off, ns
    if n < 8 or u32(d, 0) != 5:
        return 0
    off = _agent_end(u32(d, 4))
    if off < 0 or n < off + 16:
        return 0
    ns = u32(d, off + 12)
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


cdef inline int64_t _record_head(const uint8_t* d, int64_t* p, int64_t end, Out* o, int e_head, int e_past,
                                 int64_t* rlen) noexcept:
    """The format of the record at ``p[0]`` of a sample ending at ``end`` (its length into ``rlen[0]``,
    ``p[0]`` onto its body), or ``-code`` for error ``e_head`` (no room for the header) or ``e_past``."""
    if p[0] + 8 > end:
        return -_fail(o, e_head, min(p[0], end), 0, 0)
    rlen[0] = u32(d, p[0] + 4)
    p[0] += 8
    if p[0] + rlen[0] > end:
        return -_fail(o, e_past, p[0], 0, 0)
    return u32(d, p[0] - 8)


cdef inline int64_t _source(const uint8_t* d, int64_t* p, bint expanded) noexcept:
    """A sample's data source at ``p[0]`` (compact: one word; expanded: type and index), ``p[0]`` past it."""
    p[0] += 8 if expanded else 4
    return expanded_source(d, p[0] - 8) if expanded else u32(d, p[0] - 4)


cdef inline int64_t _interface(const uint8_t* d, int64_t* p, bint expanded) noexcept:
    """An ifIndex at ``p[0]`` (expanded: format and value, the format in the top two bits), ``p[0]`` past it."""
    cdef int64_t fmt, value
    if not expanded:
        p[0] += 4
        return u32(d, p[0] - 4)
    fmt = u32(d, p[0])
    value = u32(d, p[0] + 4)
    p[0] += 8
    return ((fmt & 3) << 30) | (value & 0x3FFFFFFF) if fmt != 0 else value


cdef int _records(const uint8_t* d, int64_t p, int64_t end, int64_t nrec, Out* o, Recs* x) noexcept:
    """The ``nrec`` flow records at ``p`` of a flow or discarded packet sample ending at ``end`` into ``x``: the
    last raw header's parse (else the last sampled IPv4/IPv6 record's values), extended switch and router
    fields, the egress queue (-1 without record 1036); 0, or an error code."""
    cdef int64_t r, rfmt, rlen, hproto, flen, stripped, hlen, at, q, pr, sp, dp
    cdef bint have_parsed = False, have_sampled = False
    cdef Parsed sampled
    x.sw_vlan = x.sw1 = x.sw2 = x.sw3 = x.frame_bytes = 0
    memset(x.next_hop, 0, 16)
    x.queue = -1
    for r in range(nrec):
        rfmt = _record_head(d, &p, end, o, E_RECORD_HEADER, E_RECORD_PAST, &rlen)
        if rfmt < 0:
            return -rfmt
        if rfmt == 1:  # raw packet header
            if rlen < 16:
                return _fail(o, E_RAW_RECORD, p, 0, 0)
            hproto = u32(d, p)
            flen = u32(d, p + 4)
            stripped = u32(d, p + 8)
            hlen = u32(d, p + 12)
            if hlen > rlen - 16:
                hlen = rlen - 16
                _problem(o, P_CLAMPED)
            if hproto == 1 or hproto == 11 or hproto == 12:
                parse_sampled(d + p + 16, hlen, hproto, &x.parsed)
            else:
                no_ip(&x.parsed, 0)
                _problem(o, P_HEADER_PROTOCOL)
            have_parsed = True
            x.frame_bytes = flen - stripped if flen > stripped else 0
        elif rfmt == 1001:  # extended switch
            if rlen < 16:
                return _fail(o, E_SWITCH_RECORD, p, 0, 0)
            x.sw_vlan = u32(d, p)
            x.sw1 = u32(d, p + 4) & 7
            x.sw2 = u32(d, p + 8) & 0xFFF
            x.sw3 = u32(d, p + 12) & 7
        elif rfmt == 1002:  # extended router: the next hop
            if rlen >= 8:
                at = u32(d, p)
                if at == 1:
                    v4_mapped(x.next_hop, d + p + 4)
                elif at == 2 and rlen >= 20:
                    memcpy(x.next_hop, d + p + 4, 16)
        elif rfmt == REC_EGRESS_QUEUE:  # the egress queue a discarded (or sampled) packet was bound for
            if rlen >= 4:
                x.queue = u32(d, p)
        elif rfmt == 3 or rfmt == 4:  # sampled IPv4 / IPv6
            if rfmt == 3 and rlen < 32:
                return _fail(o, E_SAMPLED_V4, p, 0, 0)
            if rfmt == 4 and rlen < 56:
                return _fail(o, E_SAMPLED_V6, p, 0, 0)
            q = 8 if rfmt == 3 else 32  # length, protocol, addresses, then the ports
            pr = u32(d, p + 4)
            sp = u32(d, p + 8 + q)
            dp = u32(d, p + 12 + q)
            if pr == (1 if rfmt == 3 else 58):  # ICMP: type and code
                dp = ((sp & 0xFF) << 8) | (dp & 0xFF)
                sp = 0
            no_ip(&sampled, 0)
            ip_fields(&sampled, 4 if rfmt == 3 else 6, u32(d, p + 20 + q) & 0xFF, 0, u32(d, p), pr & 0xFF)
            if rfmt == 3:
                v4_mapped(sampled.src, d + p + 8)
                v4_mapped(sampled.dst, d + p + 12)
            else:
                memcpy(sampled.src, d + p + 8, 16)
                memcpy(sampled.dst, d + p + 24, 16)
            sampled.sp = sp & 0xFFFF
            sampled.dp = dp & 0xFFFF
            sampled.flags = u32(d, p + 16 + q) & 0xFF
            have_sampled = True
        else:
            _problem(o, P_RECORD_TYPE)
        p += (rlen + 3) & ~3
    if not have_parsed or (x.parsed.ipv == 0 and have_sampled):
        if have_sampled:
            x.parsed = sampled
        else:
            no_ip(&x.parsed, 0)
    return 0


cdef int _datagram(const uint8_t* d, Py_ssize_t n, int64_t t, int32_t proto_code, Out* o, fallback,
                   Py_ssize_t i) except -1:
    """Decode one datagram into ``o``'s rows; 0, or an error code (then the rows written are void)."""
    cdef int64_t atype, off, ns, j, sfmt, slen, end, fb = 0
    cdef int code = 0
    if n < 8:
        return _fail(o, E_HEADER, 0, 0, 0)
    if u32(d, 0) != 5:
        return _fail(o, E_VERSION, 0, u32(d, 0), 0)
    atype = u32(d, 4)
    off = _agent_end(atype)
    if off < 0:
        return _fail(o, E_AGENT_TYPE, 4, atype, 0)
    if n < off + 16:
        return _fail(o, E_HEADER, min(n, off), 0, 0)
    memset(o.agent, 0, 16)
    if atype == 1:
        v4_mapped(o.agent, d + 8)
    elif atype == 2:
        memcpy(o.agent, d + 8, 16)
    o.sub = u32(d, off)
    o.seq = u32(d, off + 4)
    o.uptime = u32(d, off + 8)
    ns = u32(d, off + 12)
    off += 16
    if ns > MAX_SAMPLES:
        return _fail(o, E_TOO_MANY, off - 4, ns, 0)
    if ns * MIN_SAMPLE > n - off:
        return _fail(o, E_SAMPLE_COUNT, off - 4, ns, n - off)
    for j in range(ns):
        if off + 8 > n:
            return _fail(o, E_SAMPLE_HEADER, min(off, n), 0, 0)  # off may be past n by padding
        sfmt = u32(d, off)
        slen = u32(d, off + 4)
        off += 8
        end = off + slen
        if end > n:
            return _fail(o, E_SAMPLE_PAST, off, 0, 0)
        if sfmt == 1 or sfmt == 3:
            code = _flow_sample(d, off, end, sfmt == 3, t, proto_code, o, fallback, i, &fb)
        elif sfmt == SAMPLE_DISCARD:
            code = _discard(d, off, end, t, o)
        elif sfmt == 2 or sfmt == 4:
            code = _counter_sample(d, off, end, sfmt == 4, t, o)
        else:
            _problem(o, P_SAMPLE_TYPE)
        if code:
            return code
        off += (slen + 3) & ~3
    return 0


cdef int _flow_sample(const uint8_t* d, int64_t off, int64_t end, bint expanded, int64_t t, int32_t proto_code,
                      Out* o, fallback, Py_ssize_t i, int64_t* fb) except -1:
    """A flow sample's body at ``off`` (compact or expanded) as a flow row and its sample fields; 0 or an
    error code. ``fb[0]``: the datagram's fallback rate once asked for (0 before)."""
    cdef int64_t p = off + 4, sseq, source, rate, pool, drops, in_if, out_if, nrec, nbytes
    cdef uint64_t est
    cdef Recs x
    cdef FlowRow* row
    cdef SampleRow* fact
    cdef int code
    if end - off < (44 if expanded else 32):
        return _fail(o, E_XFLOW_SAMPLE if expanded else E_FLOW_SAMPLE, off, 0, 0)
    sseq = u32(d, off)
    source = _source(d, &p, expanded)
    rate = u32(d, p)
    pool = u32(d, p + 4)
    drops = u32(d, p + 8)
    p += 12
    in_if = _interface(d, &p, expanded)
    out_if = _interface(d, &p, expanded)
    nrec = u32(d, p)
    p += 4
    if nrec * 8 > end - p:
        return _fail(o, E_FLOW_RECORDS, p - 4, nrec, 0)
    if rate == 0:
        o.prob[P_RATE_MISSING] += 1
        if fb[0] == 0:
            fb[0] = fallback(i)
        rate = fb[0]
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
    row.time_start_ms = row.time_end_ms = row.time_received_ms = row.time_export_ms = t
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
    return 0


cdef int _counter_sample(const uint8_t* d, int64_t off, int64_t end, bint expanded, int64_t t,
                         Out* o) except -1:
    """A counter sample's body at ``off`` (compact or expanded) as a counter row (none without a generic
    interface record: a problem); 0 or an error code."""
    cdef int64_t p = off + 4, cseq, source, nrec, r, rfmt, rlen, gen_at = -1, eth_at = -1
    if end - off < (16 if expanded else 12):
        return _fail(o, E_XCOUNTER_SAMPLE if expanded else E_COUNTER_SAMPLE, off, 0, 0)
    cseq = u32(d, off)
    source = _source(d, &p, expanded)
    nrec = u32(d, p)
    p += 4
    if nrec * 8 > end - p:
        return _fail(o, E_COUNTER_RECORDS, p - 4, nrec, 0)
    for r in range(nrec):
        rfmt = _record_head(d, &p, end, o, E_CRECORD_HEADER, E_CRECORD_PAST, &rlen)
        if rfmt < 0:
            return -rfmt
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
        return 0
    if o.nctr >= o.cap:
        raise RuntimeError("sFlow counter rows past the capacity computed for them")
    o.nctr += 1
    _counter_row(o.counters + o.nctr - 1, d, gen_at, eth_at, o, source, cseq, t)
    return 0


cdef int _discard(const uint8_t* d, int64_t off, int64_t end, int64_t t, Out* o) except -1:
    """A discarded packet sample's body at ``off`` (ending at ``end``) as a discard row; 0 or an error code."""
    cdef int64_t nrec, p
    cdef int code
    cdef Recs x
    cdef DiscardRow* row
    if end - off < 32:
        return _fail(o, E_DISCARD_SAMPLE, off, 0, 0)
    nrec = u32(d, off + 28)
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
    row.sample_sequence = u32(d, off)
    row.source_id = expanded_source(d, off + 4)
    row.drops = u32(d, off + 12)
    row.in_if = u32(d, off + 16)
    row.out_if = u32(d, off + 20)
    row.reason = <int32_t>u32(d, off + 24)
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
    cdef int64_t status = u32(d, g + 20)
    memcpy(c.exporter_addr, o.agent, 16)
    c.observation_domain = o.sub
    c.source_id = source
    c.sample_sequence = cseq
    c.time_received_ms = t
    c.agent_uptime_ms = o.uptime
    c.if_index = u32(d, g)
    c.if_type = u32(d, g + 4)
    c.if_speed = i64(d, g + 8)
    c.if_direction = <int32_t>(u32(d, g + 16) & 0x7FFFFFFF)
    c.if_admin_up = 1 if status & 1 else 0
    c.if_oper_up = 1 if status & 2 else 0
    c.in_octets = i64(d, g + 24)
    _counters32(<uint8_t*>&c.in_ucast_pkts, d, g + 32, 6)  # unicast .. unknown protocols
    c.out_octets = i64(d, g + 56)
    _counters32(<uint8_t*>&c.out_ucast_pkts, d, g + 64, 6)  # unicast .. errors, promiscuous
    c.has_ethernet = 1 if e >= 0 else 0
    if e >= 0:
        _counters32(<uint8_t*>&c.dot3_alignment_errors, d, e, 13)
    else:
        memset(<uint8_t*>&c.dot3_alignment_errors, 0, 13 * sizeof(int64_t))


cdef inline void _counters32(uint8_t* to, const uint8_t* d, int64_t at, int k) noexcept:
    """``k`` 32-bit counters at ``d + at``, in the record's order, into the ``k`` consecutive int64 fields of
    a packed row that start at ``to`` (copied: a packed field may be unaligned)."""
    cdef int64_t v
    cdef int j
    for j in range(k):
        v = u32(d, at + 4 * j)
        memcpy(to + 8 * j, &v, 8)

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
            or discards.shape[0] // sizeof(DiscardRow) < o.cap or ts.shape[0] < k or status.shape[0] < k
            or heads.shape[0] < k or agents.shape[0] < k or agents.shape[1] != 16 or heads.shape[1] != 3
            or fbounds.shape[0] <= k or cbounds.shape[0] <= k or dbounds.shape[0] <= k):
        raise ValueError("output arrays too small for the datagrams")
    o.flows = <FlowRow*>&flows[0] if flows.shape[0] else NULL
    o.samples = <SampleRow*>&samples[0] if samples.shape[0] else NULL
    o.counters = <CounterRow*>&counters[0] if counters.shape[0] else NULL
    o.discards = <DiscardRow*>&discards[0] if discards.shape[0] else NULL
    o.nflow = o.nctr = o.ndisc = 0
    fbounds[0] = cbounds[0] = dbounds[0] = 0
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
