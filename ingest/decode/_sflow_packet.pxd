# cython: language_level=3
"""Declarations of the sampled-header parser (:mod:`ingest.decode._sflow_packet`) and the big-endian readers
the sFlow walk (:mod:`ingest.decode._sflow_compiled`) shares with it."""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset


cdef struct Parsed:  # reference.packet's 13-tuple
    int64_t ipv
    uint8_t src[16]
    uint8_t dst[16]
    int64_t sp, dp, proto, flags, tos, vlan, iplen, vni, rop, rqp

cdef inline int64_t u16(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return (<int64_t>b[p] << 8) | b[p + 1]

cdef inline int64_t u32(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return (<int64_t>b[p] << 24) | (<int64_t>b[p + 1] << 16) | (<int64_t>b[p + 2] << 8) | b[p + 3]

cdef inline int64_t i64(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return <int64_t>((<uint64_t>u32(b, p) << 32) | <uint64_t>u32(b, p + 4))

cdef inline int64_t expanded_source(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    """An expanded sample's data source: type (8 bits) << 24 | index (24 bits), from two words at ``p``."""
    return ((u32(b, p) & 0xFF) << 24) | (u32(b, p + 4) & 0xFFFFFF)

cdef inline void v4_mapped(uint8_t* a, const uint8_t* b) noexcept nogil:
    """IPv4-mapped IPv6 address of the 4 bytes at ``b``."""
    memset(a, 0, 10)
    a[10] = 0xFF
    a[11] = 0xFF
    memcpy(a + 12, b, 4)

cdef inline void no_ip(Parsed* r, int64_t vlan) noexcept nogil:
    memset(r, 0, sizeof(Parsed))
    r.vlan = vlan
    r.iplen = -1
    r.vni = -1
    r.rop = -1
    r.rqp = -1

cdef inline void ip_fields(Parsed* r, int64_t ipv, int64_t tos, int64_t vlan, int64_t iplen,
                          int64_t proto) noexcept nogil:
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

cdef void parse_sampled(const uint8_t* h, Py_ssize_t n, int64_t protocol, Parsed* r) noexcept nogil
