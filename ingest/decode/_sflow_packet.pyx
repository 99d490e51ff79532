# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The sampled packet header of an sFlow flow or discard record, compiled ahead of time (Cython -> C):
Ethernet with up to four VLAN tags, IPv4, IPv6 with its extension headers, TCP/UDP/SCTP/ICMP, RoCEv2 BTH
and one level of VXLAN, exactly as the readable reference (:mod:`ingest.decode.reference.packet`) reads
them, reading no byte past the header's length. The sFlow walk (:mod:`ingest.decode._sflow_compiled`)
calls :func:`parse_sampled` once per raw header record; :func:`parse_header` is its entry for tests.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy, memset

cdef enum:
    MAX_TAGS = 4  # VLAN tags walked
    MAX_EXT = 8  # IPv6 extension headers walked
    VXLAN_PORT = 4789
    ROCEV2_PORT = 4791


cdef void _ethernet(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int depth, Parsed* r) noexcept nogil:
    """Ethernet II frame at ``off``; the outer 802.1Q/802.1ad tag gives ``vlan`` (at most MAX_TAGS tags)."""
    cdef int64_t et, vlan = 0
    cdef int tags = 0
    if off + 14 > n:
        no_ip(r, 0)
        return
    et = u16(h, off + 12)
    off += 14
    while (et == 0x8100 or et == 0x88A8 or et == 0x9100) and tags < MAX_TAGS:
        if off + 4 > n:
            no_ip(r, vlan)
            return
        if tags == 0:
            vlan = u16(h, off) & 0x0FFF
        et = u16(h, off + 2)
        off += 4
        tags += 1
    if et == 0x0800:
        _ipv4(h, n, off, vlan, depth, r)
    elif et == 0x86DD:
        _ipv6(h, n, off, vlan, depth, r)
    else:
        no_ip(r, vlan)


cdef void _ipv4(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int64_t vlan, int depth, Parsed* r) noexcept nogil:
    """IPv4 header at ``off`` then its L4 header (not for non-first fragments)."""
    cdef int64_t vi, ihl
    if off + 20 > n:
        if n >= off + 4 and (h[off] >> 4) == 4:  # cut inside the IP header: the length field is still there
            no_ip(r, vlan)
            ip_fields(r, 4, h[off + 1], vlan, u16(h, off + 2), 0)
        else:
            no_ip(r, vlan)
        return
    vi = h[off]
    ip_fields(r, 4, h[off + 1], vlan, u16(h, off + 2), h[off + 9])
    v4_mapped(r.src, h + off + 12)
    v4_mapped(r.dst, h + off + 16)
    ihl = (vi & 0x0F) << 2
    if (vi >> 4) != 4 or ihl < 20 or (u16(h, off + 6) & 0x1FFF):
        return
    _l4(h, n, off + ihl, depth, r)


cdef void _ipv6(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, int64_t vlan, int depth, Parsed* r) noexcept nogil:
    """IPv6 header at ``off``, walking hop-by-hop, routing, fragment, destination options and AH headers."""
    cdef int64_t vtf, nh, nxt
    cdef Py_ssize_t p
    cdef int count = 0
    if off + 40 > n:
        no_ip(r, vlan)
        if n >= off + 6 and (h[off] >> 4) == 6:
            ip_fields(r, 6, (u32(h, off) >> 20) & 0xFF, vlan, u16(h, off + 4) + 40, 0)
        return
    vtf = u32(h, off)
    nh = h[off + 6]
    ip_fields(r, 6, (vtf >> 20) & 0xFF, vlan, u16(h, off + 4) + 40, nh)
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
            if u16(h, p + 2) & 0xFFF8:
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
            r.sp = u16(h, off)
            r.dp = u16(h, off + 2)
            r.flags = h[off + 13]
        elif off + 4 <= n:
            r.sp = u16(h, off)
            r.dp = u16(h, off + 2)
    elif proto == 17:
        if off + 4 > n:
            return
        r.sp = u16(h, off)
        r.dp = u16(h, off + 2)
        if r.dp == ROCEV2_PORT:
            if off + 16 <= n:
                r.rop = h[off + 8]
                r.rqp = u32(h, off + 12) & 0xFFFFFF
        elif r.dp == VXLAN_PORT and depth == 0:
            _vxlan(h, n, off + 8, r)
    elif proto == 1 or proto == 58:
        if off + 2 <= n:
            r.dp = u16(h, off)
    elif proto == 132:
        if off + 4 <= n:
            r.sp = u16(h, off)
            r.dp = u16(h, off + 2)


cdef void _vxlan(const uint8_t* h, Py_ssize_t n, Py_ssize_t off, Parsed* r) noexcept nogil:
    """VXLAN header at ``off`` (8 bytes) then the inner frame: its addresses, ports, protocol, flags and RoCE
    fields with the outer ToS, VLAN and length; the outer values but the VNI if the inner frame is cut."""
    cdef Parsed inner
    if off + 8 > n:
        return
    r.vni = u32(h, off + 4) >> 8
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


cdef void parse_sampled(const uint8_t* h, Py_ssize_t n, int64_t protocol, Parsed* r) noexcept nogil:
    """The sampled header ``h[:n]`` of header protocol ``protocol`` (1 Ethernet, 11 IPv4, 12 IPv6) into ``r``."""
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
    parse_sampled(&h[0] if h.shape[0] else NULL, length, protocol, &r)
    return (r.ipv, bytes(r.src[:16]), bytes(r.dst[:16]), r.sp, r.dp, r.proto, r.flags, r.tos, r.vlan, r.iplen,
            r.vni, r.rop, r.rqp)

