"""The structural walk of :func:`~ingest.decode.sflow_batch.decode_sflow_many`, compiled by numba.

Same contract as the numpy walk in ``sflow_batch._walk_numpy`` (the
reference): per datagram whether it is plain, its header fields and agent
address; per flow sample of a plain datagram, in (datagram, sample) order,
the fixed fields, the raw header record and the common-shape parse of the
sampled header (including the frame inside VXLAN); per counter sample its
position. A datagram found not plain anywhere has no rows (the caller decodes
it with ``decode_sflow``). ``tests/unit/ingest/test_sflow_jit.py`` proves the
two walks give identical records on the captures and on fuzzed input.

Reads stay inside the joined buffer: every read is at most 80 bytes past a
position already checked against its datagram's end, and the caller pads the
buffer with 256 bytes. Pure: bytes in, arrays out.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MAX_J = 64  # samples per datagram on the columnar path (as sflow_batch._MAX_J)
MAX_REC = 16  # flow records per sample (as sflow_batch._MAX_REC)
MAX_SAMPLES = 4096
MIN_SAMPLE = 8

# FLOW_DTYPE (schemas.columns, from flow_record.avsc) as :func:`fill` writes it: field -> (offset, bytes).
# sflow_batch uses this module only when the dtype matches it.
FLOW_LAYOUT = {
    "export_protocol": (0, 4), "exporter_addr": (4, 16), "observation_domain": (20, 8), "sampler_id": (28, 8),
    "sampling_rate": (36, 8), "bytes": (44, 8), "packets": (52, 8), "bytes_est": (60, 8), "packets_est": (68, 8),
    "ip_version": (76, 4), "src_addr": (80, 16), "dst_addr": (96, 16), "src_port": (112, 4), "dst_port": (116, 4),
    "ip_protocol": (120, 4), "tcp_flags": (124, 4), "tos": (128, 4), "vlan": (132, 4), "in_if": (136, 8),
    "out_if": (144, 8), "direction": (152, 4), "time_start_ms": (156, 8), "time_end_ms": (164, 8),
    "time_received_ms": (172, 8), "time_export_ms": (180, 8), "vxlan_vni": (188, 8), "roce_opcode": (196, 4),
    "roce_dest_qp": (200, 8), "vlan_out": (208, 4), "vlan_priority_in": (212, 4), "vlan_priority_out": (216, 4),
    "next_hop": (220, 16), "bgp_next_hop": (236, 16),
}
FLOW_ITEMSIZE = 252


def layout_matches(dtype: np.dtype) -> bool:
    """True when ``dtype`` (FLOW_DTYPE) is the packed little-endian layout :func:`fill` writes."""
    if dtype.itemsize != FLOW_ITEMSIZE or set(dtype.names) != set(FLOW_LAYOUT):
        return False
    for name, (off, size) in FLOW_LAYOUT.items():
        dt, o = dtype.fields[name][:2]
        if o != off or dt.itemsize != size or (dt.base.kind == "i" and dt.byteorder == ">"):
            return False
    return True


@njit(cache=True, inline="always")
def _u32(b, p):
    return (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])


@njit(cache=True, inline="always")
def _u16(b, p):
    return (np.int64(b[p]) << 8) | np.int64(b[p + 1])


@njit(cache=True)
def _shape(b, pos, L, src, dst, row, ints):
    """Common-shape parse of the Ethernet frame at ``b[pos : pos + L]`` (sflow_batch._shapes, one row).

    Writes src/dst addresses into ``src[row]``/``dst[row]`` and the values into
    ``ints``: ok, vxlan, ipv, sp, dp, proto, flags, tos, vlan, total, l4, vni, rop, rqp.
    """
    et = _u16(b, pos + 12)
    tag = et == 0x8100
    et2 = _u16(b, pos + 16)
    ok = L >= 42 and not (tag and (et2 == 0x8100 or et2 == 0x88A8 or et2 == 0x9100))
    vlan = (((np.int64(b[pos + 14]) & 0x0F) << 8) | np.int64(b[pos + 15])) if tag else 0
    etf = et2 if tag else et
    l3 = 18 if tag else 14
    x = pos + l3
    v4 = etf == 0x0800
    v6 = etf == 0x86DD
    x0 = np.int64(b[x])
    ok4 = v4 and x0 == 0x45 and (((np.int64(b[x + 6]) & 0x1F) << 8) | np.int64(b[x + 7])) == 0 and L >= l3 + 20
    ok6 = v6 and (x0 >> 4) == 6 and L >= l3 + 40
    ok = ok and (ok4 or ok6)
    if v6:
        tos = ((x0 & 0x0F) << 4) | (np.int64(b[x + 1]) >> 4)
        total = _u16(b, x + 4) + 40
        proto = np.int64(b[x + 6])
        l4 = l3 + 40
        for i in range(16):
            src[row, i] = b[x + 8 + i]
            dst[row, i] = b[x + 24 + i]
    else:
        tos = np.int64(b[x + 1])
        total = _u16(b, x + 2)
        proto = np.int64(b[x + 9])
        l4 = l3 + 20
        for i in range(10):
            src[row, i] = 0
            dst[row, i] = 0
        src[row, 10] = 0xFF
        src[row, 11] = 0xFF
        dst[row, 10] = 0xFF
        dst[row, 11] = 0xFF
        for i in range(4):
            src[row, 12 + i] = b[x + 12 + i]
            dst[row, 12 + i] = b[x + 16 + i]
    y = pos + l4
    sp = _u16(b, y)
    dp = _u16(b, y + 2)
    is_tcp = proto == 6
    udp = ok and proto == 17 and L >= l4 + 4
    roce = udp and dp == 4791
    vxlan = udp and dp == 4789 and L >= l4 + 16
    ok = ok and ((is_tcp and L >= l4 + 14) or (udp and dp != 4789 and ((not roce) or L >= l4 + 16)))
    roce = roce and ok
    ints[0] = 1 if ok else 0
    ints[1] = 1 if vxlan else 0
    ints[2] = 6 if v6 else 4
    ints[3] = sp
    ints[4] = dp
    ints[5] = proto
    ints[6] = np.int64(b[y + 13]) if is_tcp else 0
    ints[7] = tos
    ints[8] = vlan
    ints[9] = total
    ints[10] = l4
    ints[11] = ((np.int64(b[y + 12]) << 16) | (np.int64(b[y + 13]) << 8) | np.int64(b[y + 14])) if vxlan else -1
    ints[12] = np.int64(b[y + 8]) if roce else -1
    ints[13] = ((np.int64(b[y + 13]) << 16) | (np.int64(b[y + 14]) << 8) | np.int64(b[y + 15])) if roce else -1


@njit(cache=True)
def walk(b, starts, ends):
    """Walk ``k`` datagrams joined in ``b`` (``starts``/``ends`` absolute offsets).

    Returns (per datagram) bad, sub_agent, sequence, uptime, agent (k x 16);
    (per flow row) dg, source, rate, in_if, out_if, sw_vlan, has_raw, hlen,
    frame_bytes, hs, src (n x 16), dst (n x 16), shape ints (n x 14, see
    :func:`_shape`, after the VXLAN merge); (per counter sample) dg, body, fmt, length; (per flow row)
    the extended router next hop (n x 16).
    """
    k = len(starts)
    bad = np.ones(k, dtype=np.bool_)
    sub = np.zeros(k, dtype=np.int64)
    dseq = np.zeros(k, dtype=np.int64)
    upt = np.zeros(k, dtype=np.int64)
    first = np.zeros(k, dtype=np.int64)
    nsamp = np.zeros(k, dtype=np.int64)
    agent = np.zeros((k, 16), dtype=np.uint8)
    cap = 0
    for i in range(k):
        s = starts[i]
        n = ends[i] - s
        if n < 24:
            continue
        if _u32(b, s) != 5:
            continue
        atype = _u32(b, s + 4)
        if atype == 1:
            off = 12
            agent[i, 10] = 0xFF
            agent[i, 11] = 0xFF
            for t in range(4):
                agent[i, 12 + t] = b[s + 8 + t]
        elif atype == 2:
            off = 24
            for t in range(16):
                agent[i, t] = b[s + 8 + t]
        elif atype == 0:
            off = 8
        else:
            continue
        if n < off + 16:
            continue
        sub[i] = _u32(b, s + off)
        dseq[i] = _u32(b, s + off + 4)
        upt[i] = _u32(b, s + off + 8)
        ns = _u32(b, s + off + 12)
        off += 16
        if ns > MAX_SAMPLES or ns * MIN_SAMPLE > n - off or ns > MAX_J:
            continue
        bad[i] = False
        first[i] = s + off
        nsamp[i] = ns
        cap += ns

    r_dg = np.empty(cap, dtype=np.int64)
    # source rate in_if out_if sw_vlan has_raw hlen frame_bytes hs, sample seq, sample_pool, drops,
    # extended switch source priority, destination VLAN, destination priority
    r_cols = np.empty((cap, 15), dtype=np.int64)
    r_nh = np.zeros((cap, 16), dtype=np.uint8)  # extended router next hop
    r_src = np.empty((cap, 16), dtype=np.uint8)
    r_dst = np.empty((cap, 16), dtype=np.uint8)
    r_sh = np.empty((cap, 14), dtype=np.int64)
    c_cols = np.empty((cap, 4), dtype=np.int64)  # dg body fmt length
    inner = np.empty(14, dtype=np.int64)
    nrow = 0
    nctr = 0
    for i in range(k):
        if bad[i]:
            continue
        e = ends[i]
        row0 = nrow
        ctr0 = nctr
        isbad = False
        a = first[i]
        for _j in range(nsamp[i]):
            if a + 8 > e:
                isbad = True
                break
            fmt = _u32(b, a)
            slen = _u32(b, a + 4)
            body = a + 8
            if body + slen > e:
                isbad = True
                break
            if fmt == 1 or fmt == 3:
                x3 = fmt == 3
                if slen < (44 if x3 else 32):
                    isbad = True
                    break
                sseq = _u32(b, body)
                if x3:
                    source = ((_u32(b, body + 4) & 0xFF) << 24) | (_u32(b, body + 8) & 0xFFFFFF)
                    rate = _u32(b, body + 12)
                    pool = _u32(b, body + 16)
                    drops = _u32(b, body + 20)
                    ifmt = _u32(b, body + 24)
                    w7 = _u32(b, body + 28)
                    ofmt = _u32(b, body + 32)
                    w9 = _u32(b, body + 36)
                    in_if = w7 if ifmt == 0 else (((ifmt & 3) << 30) | (w7 & 0x3FFFFFFF))
                    out_if = w9 if ofmt == 0 else (((ofmt & 3) << 30) | (w9 & 0x3FFFFFFF))
                    nrec = _u32(b, body + 40)
                    p0 = body + 44
                else:
                    source = _u32(b, body + 4)
                    rate = _u32(b, body + 8)
                    pool = _u32(b, body + 12)
                    drops = _u32(b, body + 16)
                    in_if = _u32(b, body + 20)
                    out_if = _u32(b, body + 24)
                    nrec = _u32(b, body + 28)
                    p0 = body + 32
                f_end = body + slen
                if nrec * 8 > f_end - p0 or rate == 0 or nrec > MAX_REC:
                    isbad = True
                    break
                raw_pos = -1
                raw_len = 0
                swv = 0
                sw1 = 0
                sw2 = 0
                sw3 = 0
                for q in range(16):
                    r_nh[nrow, q] = 0
                rp = p0
                for _r in range(nrec):
                    rfmt = _u32(b, rp)
                    rlen = _u32(b, rp + 4)
                    rb = rp + 8
                    is_raw = rfmt == 1
                    is_sw = rfmt == 1001
                    if (rp + 8 > f_end or rb + rlen > f_end or not (is_raw or is_sw or rfmt == 1002)
                            or ((is_raw or is_sw) and rlen < 16)):
                        isbad = True
                        break
                    if is_raw:
                        if raw_pos >= 0:  # a second raw header record: the per-datagram decoder's case
                            isbad = True
                            break
                        raw_pos = rb
                        raw_len = rlen
                    elif is_sw:
                        swv = _u32(b, rb)
                        sw1 = _u32(b, rb + 4) & 7
                        sw2 = _u32(b, rb + 8) & 0xFFF
                        sw3 = _u32(b, rb + 12) & 7
                    elif rlen >= 8:  # extended router: the next hop (IPv4 or, with room for it, IPv6)
                        at = _u32(b, rb)
                        if at == 1:
                            for q in range(10):
                                r_nh[nrow, q] = 0
                            r_nh[nrow, 10] = 0xFF
                            r_nh[nrow, 11] = 0xFF
                            for q in range(4):
                                r_nh[nrow, 12 + q] = b[rb + 4 + q]
                        elif at == 2 and rlen >= 20:
                            for q in range(16):
                                r_nh[nrow, q] = b[rb + 4 + q]
                    rp = rb + ((rlen + 3) & ~3)
                if isbad:
                    break
                hlen = 0
                fb = 0
                if raw_pos >= 0:
                    flen = _u32(b, raw_pos + 4)
                    stripped = _u32(b, raw_pos + 8)
                    hlen = _u32(b, raw_pos + 12)
                    if _u32(b, raw_pos) != 1 or hlen > raw_len - 16:
                        isbad = True
                        break
                    if flen > stripped:
                        fb = flen - stripped
                r_dg[nrow] = i
                c = r_cols[nrow]
                c[0] = source
                c[1] = rate
                c[2] = in_if
                c[3] = out_if
                c[4] = swv
                c[5] = 1 if raw_pos >= 0 else 0
                c[6] = hlen
                c[7] = fb
                c[8] = raw_pos + 16
                c[9] = sseq
                c[10] = pool
                c[11] = drops
                c[12] = sw1
                c[13] = sw2
                c[14] = sw3
                sh = r_sh[nrow]
                if raw_pos >= 0:
                    hs = raw_pos + 16
                    _shape(b, hs, hlen, r_src, r_dst, nrow, sh)
                    if sh[1]:  # VXLAN: the inner frame, with the outer ToS, VLAN, length and the VNI
                        skip = sh[10] + 16
                        vni = sh[11]
                        tos, vlan, total = sh[7], sh[8], sh[9]
                        _shape(b, hs + skip, hlen - skip, r_src, r_dst, nrow, inner)
                        if inner[0]:
                            sh[:] = inner
                            sh[7] = tos
                            sh[8] = vlan
                            sh[9] = total
                            sh[11] = vni
                        sh[1] = 1
                else:
                    sh[:] = 0
                nrow += 1
            elif fmt == 2 or fmt == 4:
                c = c_cols[nctr]
                c[0] = i
                c[1] = body
                c[2] = fmt
                c[3] = slen
                nctr += 1
            else:
                isbad = True
                break
            a = body + ((slen + 3) & ~3)
        if isbad:
            bad[i] = True
            nrow = row0
            nctr = ctr0
    return (bad, sub, dseq, upt, agent, r_dg[:nrow], r_cols[:nrow], r_src[:nrow], r_dst[:nrow], r_sh[:nrow],
            c_cols[:nctr], r_nh[:nrow])


@njit(cache=True, inline="always")
def _put(row, off, v, width):
    for t in range(width):
        row[off + t] = (v >> (8 * t)) & 0xFF


_I64_MAX = np.uint64(0x7FFFFFFFFFFFFFFF)


@njit(cache=True)
def fill(out, dg, cols, src, dst, shp, ts, agent, sub, proto_code, nh):
    """Write the flow rows as ``FLOW_DTYPE`` bytes (packed little-endian, ``out`` is n x 252 uint8).

    Rows whose header is not of a common shape get the values of a header with
    no IP layer; the caller overwrites them with the per-sample walker's.
    Field offsets: :data:`FLOW_LAYOUT`.
    """
    for r in range(len(dg)):
        row = out[r]
        i = dg[r]
        c = cols[r]
        sh = shp[r]
        ok = sh[0] != 0
        rate = c[1]
        nbytes = sh[9] if ok else c[7]
        est = np.uint64(nbytes) * np.uint64(rate)
        if est > _I64_MAX:
            est = _I64_MAX
        t = ts[i]
        _put(row, 0, proto_code, 4)
        for q in range(16):
            row[4 + q] = agent[i, q]
            row[80 + q] = src[r, q] if ok else 0
            row[96 + q] = dst[r, q] if ok else 0
        _put(row, 20, sub[i], 8)
        _put(row, 28, c[0], 8)
        _put(row, 36, rate, 8)
        _put(row, 44, nbytes, 8)
        _put(row, 52, 1, 8)
        _put(row, 60, np.int64(est), 8)
        _put(row, 68, rate, 8)
        _put(row, 76, sh[2] if ok else 0, 4)
        _put(row, 112, sh[3] if ok else 0, 4)
        _put(row, 116, sh[4] if ok else 0, 4)
        _put(row, 120, sh[5] if ok else 0, 4)
        _put(row, 124, sh[6] if ok else 0, 4)
        _put(row, 128, sh[7] if ok else 0, 4)
        sw = c[4]
        _put(row, 132, (sw & 0xFFF) if sw != 0 else (sh[8] if ok else 0), 4)
        _put(row, 136, c[2], 8)
        _put(row, 144, c[3], 8)
        _put(row, 152, 0, 4)
        _put(row, 156, t, 8)
        _put(row, 164, t, 8)
        _put(row, 172, t, 8)
        _put(row, 180, t, 8)
        _put(row, 188, sh[11] if ok else -1, 8)
        _put(row, 196, sh[12] if ok else -1, 4)
        _put(row, 200, sh[13] if ok else -1, 8)
        _put(row, 208, c[13], 4)
        _put(row, 212, c[12], 4)
        _put(row, 216, c[14], 4)
        for q in range(16):
            row[220 + q] = nh[r, q]
            row[236 + q] = 0
