"""Columnar sFlow v5 decoding of many datagrams per numpy pass.

:func:`decode_sflow_many` returns, per datagram, exactly what :func:`ingest.decode.sflow.decode_sflow`
returns for it (or the :class:`DecodeError` it raises): same rows, values, order and problems. The
datagrams are joined into one buffer, the sample and record chains walked for all of them at once,
fixed fields gathered with numpy and the common Ethernet header shapes parsed with masks; other shapes
go to the walker of :mod:`ingest.decode.packet`. The walk runs compiled by numba when installed
(:mod:`._sflow_jit`) and with numpy otherwise (the reference; both identical,
``tests/unit/ingest/test_sflow_differential.py``). A datagram that is not plain (structural error,
unknown types, sampled IPv4/IPv6 records, non-Ethernet or clamped headers, several raw header records
in a sample, zero sampling rate, more than 64 samples or 16 records per sample) is decoded whole by
``decode_sflow``. Pure: no I/O, no clock. Why: docs/architecture.md, "Why ingest decodes in batches".
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from schemas.columns import FLOW_DTYPE, PROTO_SFLOW5, addr_str

from .errors import DecodeError
from .packet import parse_ethernet
from .result import EMPTY_COUNTERS, EMPTY_FLOWS, EMPTY_SAMPLES, SAMPLE_DTYPE, DecodeResult, ExportHeader
from .sflow import (
    _HDR,
    _II,
    _MAX_SAMPLES,
    _MIN_SAMPLE,
    _V4_PREFIX,
    _ZERO16,
    P,
    _counter_array,
    _counter_sample,
    decode_sflow,
)
from .templates import TemplateCache

try:  # the compiled walk is optional: without numba the numpy walk (the reference) is used
    from . import _sflow_jit

    JIT_AVAILABLE = _sflow_jit.layout_matches(FLOW_DTYPE)
except ImportError:  # pragma: no cover - numba is a declared dependency
    _sflow_jit = None
    JIT_AVAILABLE = False

__all__ = ["decode_sflow_many", "decode_sflow_group", "SflowGroup", "JIT_AVAILABLE"]

_MAX_J = 64  # samples per datagram on the columnar path
_MAX_REC = 16  # flow records per sample on the columnar path
_HCOLS = 80  # gather width: >= 18 + 40 + 16 (tag, IPv6, L4) and >= 44 (flow sample header)
_PADDING = bytes(256)  # after the joined datagrams, so every gather stays inside the buffer
_I64_MAX = np.uint64(0x7FFFFFFFFFFFFFFF)


def _u32(win: np.ndarray, pos: np.ndarray, words: int = 1) -> np.ndarray:
    """Big-endian uint32 words at byte offsets ``pos`` -> int64, shape (m,) or (m, words)."""
    w = win[pos, : 4 * words].view(">u4").astype(np.int64)
    return w[:, 0] if words == 1 else w


def _shapes(win: np.ndarray, pos: np.ndarray, L: np.ndarray) -> dict:
    """Parse the Ethernet frames at ``buffer[pos : pos + L]`` of the common shapes, columnar.

    ``ok`` marks the rows where the values equal ``packet.parse_ethernet``
    (UDP 4789 rows are never ok); ``vxlan`` marks UDP 4789 rows that are
    otherwise plain and long enough for the VXLAN header (``vni`` set, inner
    frame at ``l4 + 16``). Values of the other rows are meaningless.
    """
    H = win[pos, :18].astype(np.int64)
    et = (H[:, 12] << 8) | H[:, 13]
    tag = et == 0x8100
    et2 = (H[:, 16] << 8) | H[:, 17]
    ok = (L >= 42) & ~(tag & ((et2 == 0x8100) | (et2 == 0x88A8) | (et2 == 0x9100)))
    vlan = np.where(tag, ((H[:, 14] & 0x0F) << 8) | H[:, 15], 0)
    etf = np.where(tag, et2, et)
    l3 = np.where(tag, 18, 14)
    X = win[pos + l3, :56]  # from the IP header on
    X64 = X[:, :10].astype(np.int64)
    v4 = etf == 0x0800
    v6 = etf == 0x86DD
    ok4 = v4 & (X64[:, 0] == 0x45) & ((((X64[:, 6] & 0x1F) << 8) | X64[:, 7]) == 0) & (L >= l3 + 20)
    ok6 = v6 & ((X64[:, 0] >> 4) == 6) & (L >= l3 + 40)
    ok &= ok4 | ok6
    tos = np.where(v6, ((X64[:, 0] & 0x0F) << 4) | (X64[:, 1] >> 4), X64[:, 1])
    total = np.where(v6, ((X64[:, 4] << 8) | X64[:, 5]) + 40, (X64[:, 2] << 8) | X64[:, 3])
    proto = np.where(v6, X64[:, 6], X64[:, 9])
    l4 = l3 + np.where(v6, 40, 20)
    Y = win[pos + l4, :16].astype(np.int64)  # L4 header
    sp = (Y[:, 0] << 8) | Y[:, 1]
    dp = (Y[:, 2] << 8) | Y[:, 3]
    is_tcp = proto == 6
    udp = ok & (proto == 17) & (L >= l4 + 4)
    roce = udp & (dp == 4791)
    vxlan = udp & (dp == 4789) & (L >= l4 + 16)
    ok &= (is_tcp & (L >= l4 + 14)) | (udp & (dp != 4789) & (~roce | (L >= l4 + 16)))
    roce &= ok
    src = np.empty((len(pos), 16), dtype=np.uint8)
    dst = np.empty((len(pos), 16), dtype=np.uint8)
    src[:, :10] = 0
    dst[:, :10] = 0
    src[:, 10:12] = 0xFF
    dst[:, 10:12] = 0xFF
    src[:, 12:] = X[:, 12:16]
    dst[:, 12:] = X[:, 16:20]
    src[v6] = X[v6, 8:24]
    dst[v6] = X[v6, 24:40]
    return {
        "ok": ok,
        "vxlan": vxlan,
        "ipv": np.where(v6, 6, 4),
        "src": src,
        "dst": dst,
        "sp": sp,
        "dp": dp,
        "proto": proto,
        "flags": np.where(is_tcp, Y[:, 13], 0),
        "tos": tos,
        "vlan": vlan,
        "total": total,
        "l4": l4,
        "vni": np.where(vxlan, (Y[:, 12] << 16) | (Y[:, 13] << 8) | Y[:, 14], -1),
        "rop": np.where(roce, Y[:, 8], -1),
        "rqp": np.where(roce, (Y[:, 13] << 16) | (Y[:, 14] << 8) | Y[:, 15], -1),
    }


def decode_sflow_many(
    datagrams, exporters, received_at_ms, templates: TemplateCache, jit: bool | None = None
) -> list[DecodeResult | DecodeError]:
    """Decode many sFlow v5 datagrams; per datagram its result or its :class:`DecodeError`.

    ``exporters`` and ``received_at_ms`` are one value for all datagrams or a
    sequence with one value per datagram. ``jit``: walk the datagrams with the
    numba-compiled walker (default: when numba is installed) or with numpy
    (the reference); both give identical results.
    """
    g = decode_sflow_group(datagrams, exporters, received_at_ms, templates, jit)
    return [g.result(i) for i in range(len(datagrams))]


def warm_up() -> None:
    """Compile (or load from numba's cache) the compiled walk now, not on the first datagrams received."""
    if JIT_AVAILABLE:
        empty = b"\x00\x00\x00\x05\x00\x00\x00\x01" + bytes(20)  # sFlow v5, IPv4 agent, no samples
        decode_sflow_many([empty], "0.0.0.0", 0, TemplateCache(), jit=True)


class _Walk:
    """What a structural walk found: per datagram, per flow row (plain datagrams only), per counter sample."""

    __slots__ = ("heads", "agents", "bad", "starts", "dg", "source", "rate", "in_if", "out_if", "sw_vlan", "facts",
                 "sw_rest", "next_hop",
                 "has_raw", "hlen", "frame_bytes", "hs", "ok", "sh", "ctr", "jit")


def _walk_jit(datas: list[bytes]) -> _Walk:
    """The compiled walk (:mod:`ingest.decode._sflow_jit`), same result as :func:`_walk_numpy`."""
    k = len(datas)
    lens = np.fromiter(map(len, datas), dtype=np.int64, count=k)
    ends = np.cumsum(lens)
    starts = ends - lens
    datas.append(_PADDING)
    u8 = np.frombuffer(b"".join(datas), dtype=np.uint8)
    del datas[-1]
    bad, sub, dseq, upt, agent, dg, cols, src, dst, shp, ctr, nh = _sflow_jit.walk(u8, starts, ends)
    w = _Walk()
    w.heads = list(zip(sub.tolist(), dseq.tolist(), upt.tolist()))
    ab = agent.tobytes()
    w.agents = [ab[o : o + 16] for o in range(0, 16 * k, 16)]
    w.bad, w.starts, w.dg = bad, starts, dg
    w.source, w.rate, w.in_if, w.out_if, w.sw_vlan = cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], cols[:, 4]
    w.has_raw, w.hlen, w.frame_bytes, w.hs = cols[:, 5] != 0, cols[:, 6], cols[:, 7], cols[:, 8]
    w.facts = cols[:, 9:12]
    w.ok = shp[:, 0] != 0
    w.sh = {"src": src, "dst": dst, "ipv": shp[:, 2], "sp": shp[:, 3], "dp": shp[:, 4], "proto": shp[:, 5],
            "flags": shp[:, 6], "tos": shp[:, 7], "vlan": shp[:, 8], "total": shp[:, 9], "vni": shp[:, 11],
            "rop": shp[:, 12], "rqp": shp[:, 13]}
    w.ctr = (ctr[:, 0], ctr[:, 1], ctr[:, 2], ctr[:, 3])
    w.jit = (cols, src, dst, shp, agent, sub, nh)
    return w


def _walk_numpy(datas: list[bytes]) -> _Walk:
    """The reference walk: one numpy step per sample index and per record index, headers parsed by masks."""
    k = len(datas)
    # ---- datagram headers (Python, one per datagram) -------------------------
    agents = [_ZERO16] * k
    heads: list = [None] * k
    first_l = [0] * k  # absolute offset of the first sample; 0 = not a plain datagram
    nsamp_l = [0] * k
    ends_l = [0] * k
    base = 0
    for i, d in enumerate(datas):
        n = len(d)
        base += n
        ends_l[i] = base
        if n < 24:
            continue
        version, atype = _II(d, 0)
        if version != 5:
            continue
        if atype == 1:
            off = 12
            agents[i] = _V4_PREFIX + d[8:12]
        elif atype == 2:
            off = 24
            agents[i] = d[8:24]
        elif atype == 0:
            off = 8
        else:
            continue
        if n < off + 16:
            continue
        sub_agent, dseq, uptime, ns = _HDR(d, off)
        off += 16
        if ns > _MAX_SAMPLES or ns * _MIN_SAMPLE > n - off or ns > _MAX_J:
            continue
        heads[i] = (sub_agent, dseq, uptime)
        first_l[i] = base - n + off
        nsamp_l[i] = ns
    first = np.array(first_l, dtype=np.int64)
    nsamp = np.array(nsamp_l, dtype=np.int64)
    ends = np.array(ends_l, dtype=np.int64)
    starts = ends - np.fromiter(map(len, datas), dtype=np.int64, count=k)
    plain = first > 0
    datas.append(_PADDING)
    u8 = np.frombuffer(b"".join(datas), dtype=np.uint8)
    del datas[-1]
    win = sliding_window_view(u8, _HCOLS)  # win[pos] = the _HCOLS bytes at pos, gathered as rows
    bad = ~plain

    # ---- sample chain, all datagrams at once ---------------------------------
    s_dg, s_j, s_body, s_fmt, s_len = [], [], [], [], []
    a_dg = np.flatnonzero(plain & (nsamp > 0))
    a_off = first[a_dg]
    j = 0
    while a_dg.size:
        e = ends[a_dg]
        ok = a_off + 8 <= e
        hdr = _u32(win, a_off, 2)
        body = a_off + 8
        slen = hdr[:, 1]
        ok &= body + slen <= e
        bad[a_dg[~ok]] = True
        s_dg.append(a_dg[ok])
        s_j.append(np.full(int(ok.sum()), j, dtype=np.int64))
        s_body.append(body[ok])
        s_fmt.append(hdr[ok, 0])
        s_len.append(slen[ok])
        a_off = body + ((slen + 3) & ~3)
        j += 1
        keep = ok & (nsamp[a_dg] > j)
        a_dg = a_dg[keep]
        a_off = a_off[keep]
    if s_dg:
        s_dg = np.concatenate(s_dg)
        s_j = np.concatenate(s_j)
        s_body = np.concatenate(s_body)
        s_fmt = np.concatenate(s_fmt)
        s_len = np.concatenate(s_len)
    else:
        s_dg = s_j = s_body = s_fmt = s_len = np.zeros(0, dtype=np.int64)
    is_flow = (s_fmt == 1) | (s_fmt == 3)
    is_ctr = (s_fmt == 2) | (s_fmt == 4)
    bad[s_dg[~(is_flow | is_ctr)]] = True

    # ---- flow samples: fixed header fields -----------------------------------
    fl = np.flatnonzero(is_flow & ~bad[s_dg])
    f_dg, f_j, f_body, f_fmt, f_len = s_dg[fl], s_j[fl], s_body[fl], s_fmt[fl], s_len[fl]
    x3 = f_fmt == 3
    bad[f_dg[f_len < np.where(x3, 44, 32)]] = True
    W = _u32(win, f_body, 11)
    source = np.where(x3, ((W[:, 1] & 0xFF) << 24) | (W[:, 2] & 0xFFFFFF), W[:, 1])
    rate = np.where(x3, W[:, 3], W[:, 2])
    facts = np.stack([W[:, 0], np.where(x3, W[:, 4], W[:, 3]), np.where(x3, W[:, 5], W[:, 4])], axis=1)
    ifmt, ofmt = W[:, 6], W[:, 8]
    in_x = np.where(ifmt == 0, W[:, 7], ((ifmt & 3) << 30) | (W[:, 7] & 0x3FFFFFFF))
    out_x = np.where(ofmt == 0, W[:, 9], ((ofmt & 3) << 30) | (W[:, 9] & 0x3FFFFFFF))
    in_if = np.where(x3, in_x, W[:, 5])
    out_if = np.where(x3, out_x, W[:, 6])
    nrec = np.where(x3, W[:, 10], W[:, 7])
    p0 = f_body + np.where(x3, 44, 32)
    f_end = f_body + f_len
    bad[f_dg[(nrec * 8 > f_end - p0) | (rate == 0) | (nrec > _MAX_REC)]] = True

    # ---- flow record chain, all samples at once ------------------------------
    m = len(fl)
    raw_pos = np.full(m, -1, dtype=np.int64)
    raw_len = np.zeros(m, dtype=np.int64)
    sw_vlan = np.zeros(m, dtype=np.int64)
    sw_rest = np.zeros((m, 3), dtype=np.int64)  # extended switch: source priority, destination VLAN and priority
    next_hop = np.zeros((m, 16), dtype=np.uint8)  # extended router
    r_idx = np.flatnonzero((nrec > 0) & ~bad[f_dg])
    rp = p0[r_idx]
    r = 0
    while r_idx.size:
        se = f_end[r_idx]
        hdr = _u32(win, rp, 2)
        rfmt, rlen = hdr[:, 0], hdr[:, 1]
        body = rp + 8
        is_raw = rfmt == 1
        is_sw = rfmt == 1001
        ok = (rp + 8 <= se) & (body + rlen <= se) & (is_raw | is_sw | (rfmt == 1002))
        ok &= ~((is_raw | is_sw) & (rlen < 16))
        bad[f_dg[r_idx[~ok]]] = True
        sel = ok & is_raw
        # A second raw header record in a sample: only the last is checked below, but the per-datagram
        # decoder counts problems for each, so such (rare) datagrams are decoded by it.
        bad[f_dg[r_idx[sel & (raw_pos[r_idx] >= 0)]]] = True
        raw_pos[r_idx[sel]] = body[sel]
        raw_len[r_idx[sel]] = rlen[sel]
        sel = ok & is_sw
        SW = _u32(win, body[sel], 4)
        sw_vlan[r_idx[sel]] = SW[:, 0]
        sw_rest[r_idx[sel]] = SW[:, 1:] & np.array([7, 0xFFF, 7])
        sel = ok & (rfmt == 1002) & (rlen >= 8)
        if sel.any():
            at, bs, rl = _u32(win, body[sel]), body[sel], rlen[sel]
            v4 = at == 1
            rows = r_idx[sel][v4]
            next_hop[rows, :12] = np.frombuffer(_V4_PREFIX, dtype=np.uint8)
            next_hop[rows, 12:] = win[bs[v4] + 4, :4]
            v6 = (at == 2) & (rl >= 20)
            next_hop[r_idx[sel][v6]] = win[bs[v6] + 4, :16]
        rp = body + ((rlen + 3) & ~3)
        r += 1
        keep = ok & (nrec[r_idx] > r)
        r_idx = r_idx[keep]
        rp = rp[keep]

    # ---- raw packet header records --------------------------------------------
    has_raw = raw_pos >= 0
    R = _u32(win, np.where(has_raw, raw_pos, 0), 4)
    hproto, flen, stripped, hlen = R[:, 0], R[:, 1], R[:, 2], R[:, 3]
    bad[f_dg[has_raw & ((hproto != 1) | (hlen > raw_len - 16))]] = True
    frame_bytes = np.where(has_raw & (flen > stripped), flen - stripped, 0)

    # ---- keep the rows of plain datagrams, in (datagram, sample) order -------
    g = np.flatnonzero(~bad[f_dg])
    g = g[np.argsort(f_dg[g] * _MAX_J + f_j[g], kind="stable")]
    dg = f_dg[g]
    source, rate, in_if, out_if, sw_vlan = source[g], rate[g], in_if[g], out_if[g], sw_vlan[g]
    facts, sw_rest, next_hop = facts[g], sw_rest[g], next_hop[g]
    has_raw, hlen, frame_bytes = has_raw[g], hlen[g], frame_bytes[g]
    hs = raw_pos[g] + 16
    n_rows = len(g)

    # ---- sampled headers: common shapes with numpy masks ----------------------
    L = np.where(has_raw, hlen, 0)
    sh = _shapes(win, np.where(has_raw, hs, 0), L)
    ok = sh["ok"]
    vx = np.flatnonzero(sh["vxlan"])
    if vx.size:
        # VXLAN: inner Ethernet frame after the 8-byte VXLAN header; outer ToS, VLAN, length
        skip = sh["l4"][vx] + 16
        inner = _shapes(win, hs[vx] + skip, L[vx] - skip)
        iok = inner["ok"]
        rows = vx[iok]
        ok[rows] = True
        for name in ("ipv", "src", "dst", "sp", "dp", "proto", "flags", "rop", "rqp"):
            sh[name][rows] = inner[name][iok]
        sh["vni"][rows] = sh["vni"][vx][iok]

    cs = np.flatnonzero(is_ctr & ~bad[s_dg])
    cs = cs[np.argsort(s_dg[cs] * _MAX_J + s_j[cs], kind="stable")]
    w = _Walk()
    w.heads, w.agents, w.bad, w.starts, w.dg = heads, agents, bad, starts, dg
    w.source, w.rate, w.in_if, w.out_if, w.sw_vlan = source, rate, in_if, out_if, sw_vlan
    w.facts, w.sw_rest, w.next_hop = facts, sw_rest, next_hop
    w.has_raw, w.hlen, w.frame_bytes, w.hs, w.ok, w.sh = has_raw, hlen, frame_bytes, hs, ok, sh
    w.ctr = (s_dg[cs], s_body[cs], s_fmt[cs], s_len[cs])
    w.jit = None
    return w


def _rows_jit(w: _Walk, datas: list[bytes], ts: list) -> np.ndarray:
    """The flow rows written by the compiled :func:`~ingest.decode._sflow_jit.fill`, then the walker's rows."""
    cols, src, dst, shp, agent, sub, nh = w.jit
    n_rows = len(w.dg)
    raw = np.empty((n_rows, FLOW_DTYPE.itemsize), dtype=np.uint8)
    _sflow_jit.fill(raw, w.dg, cols, src, dst, shp, np.array(ts, dtype=np.int64), agent, sub, PROTO_SFLOW5, nh)
    out = raw.view(FLOW_DTYPE).reshape(n_rows)
    walk = np.flatnonzero(w.has_raw & ~w.ok)
    if walk.size:
        dg = w.dg
        whs = (w.hs[walk] - w.starts[dg[walk]]).tolist()
        parsed = [parse_ethernet(datas[i][o : o + n], 0, 0) for i, o, n in zip(dg[walk].tolist(), whs,
                                                                                   w.hlen[walk].tolist())]
        cols_w = list(zip(*parsed))
        o = out[walk]
        o["ip_version"] = cols_w[0]
        o["src_addr"] = np.frombuffer(b"".join(cols_w[1]), dtype=np.uint8).reshape(-1, 16)
        o["dst_addr"] = np.frombuffer(b"".join(cols_w[2]), dtype=np.uint8).reshape(-1, 16)
        o["src_port"] = cols_w[3]
        o["dst_port"] = cols_w[4]
        o["ip_protocol"] = cols_w[5]
        o["tcp_flags"] = cols_w[6]
        o["tos"] = cols_w[7]
        sw = w.sw_vlan[walk]
        o["vlan"] = np.where(sw != 0, sw & 0xFFF, np.array(cols_w[8], dtype=np.int64))
        wb = np.array(cols_w[9], dtype=np.int64)
        b = np.where(wb < 0, w.frame_bytes[walk], wb)
        o["bytes"] = b
        be = b.astype(np.uint64) * w.rate[walk].astype(np.uint64)
        o["bytes_est"] = np.minimum(be, _I64_MAX).astype(np.int64)
        o["vxlan_vni"] = cols_w[10]
        o["roce_opcode"] = cols_w[11]
        o["roce_dest_qp"] = cols_w[12]
        out[walk] = o
    return out


def _rows_numpy(w: _Walk, datas: list[bytes], ts: list) -> np.ndarray:
    """The flow rows from the numpy walk's columns (the reference), the walker's rows included."""
    k = len(datas)
    heads, agents, starts, dg = w.heads, w.agents, w.starts, w.dg
    source, rate, in_if, out_if, sw_vlan = w.source, w.rate, w.in_if, w.out_if, w.sw_vlan
    has_raw, hlen, frame_bytes, hs, ok, sh = w.has_raw, w.hlen, w.frame_bytes, w.hs, w.ok, w.sh
    n_rows = len(dg)
    out = np.empty(n_rows, dtype=FLOW_DTYPE)
    src = np.where(ok[:, None], sh["src"], 0).astype(np.uint8)
    dst = np.where(ok[:, None], sh["dst"], 0).astype(np.uint8)
    out["ip_version"] = np.where(ok, sh["ipv"], 0)
    out["src_port"] = np.where(ok, sh["sp"], 0)
    out["dst_port"] = np.where(ok, sh["dp"], 0)
    out["ip_protocol"] = np.where(ok, sh["proto"], 0)
    out["tcp_flags"] = np.where(ok, sh["flags"], 0)
    out["tos"] = np.where(ok, sh["tos"], 0)
    out["vxlan_vni"] = np.where(ok, sh["vni"], -1)
    out["roce_opcode"] = np.where(ok, sh["rop"], -1)
    out["roce_dest_qp"] = np.where(ok, sh["rqp"], -1)
    hv = np.where(ok, sh["vlan"], 0)
    b = np.where(ok, sh["total"], frame_bytes)

    # ---- other shapes: the per-sample walker ----------------------------------
    walk = np.flatnonzero(has_raw & ~ok)
    if walk.size:
        wdg = dg[walk].tolist()
        whs = (hs[walk] - starts[dg[walk]]).tolist()
        wl = hlen[walk].tolist()
        parsed = [parse_ethernet(datas[i][o : o + n], 0, 0) for i, o, n in zip(wdg, whs, wl)]
        cols = list(zip(*parsed))
        out["ip_version"][walk] = cols[0]
        src[walk] = np.frombuffer(b"".join(cols[1]), dtype=np.uint8).reshape(-1, 16)
        dst[walk] = np.frombuffer(b"".join(cols[2]), dtype=np.uint8).reshape(-1, 16)
        out["src_port"][walk] = cols[3]
        out["dst_port"][walk] = cols[4]
        out["ip_protocol"][walk] = cols[5]
        out["tcp_flags"][walk] = cols[6]
        out["tos"][walk] = cols[7]
        hv[walk] = cols[8]
        wb = np.array(cols[9], dtype=np.int64)
        b[walk] = np.where(wb < 0, frame_bytes[walk], wb)
        out["vxlan_vni"][walk] = cols[10]
        out["roce_opcode"][walk] = cols[11]
        out["roce_dest_qp"][walk] = cols[12]

    be = b.astype(np.uint64) * rate.astype(np.uint64)
    be = np.minimum(be, _I64_MAX).astype(np.int64)
    t = np.array(ts, dtype=np.int64)[dg]
    sub = np.array([h[0] if h is not None else 0 for h in heads], dtype=np.int64)
    agent_mat = np.frombuffer(b"".join(agents), dtype=np.uint8).reshape(k, 16)
    out["export_protocol"] = PROTO_SFLOW5
    out["exporter_addr"] = agent_mat[dg]
    out["observation_domain"] = sub[dg]
    out["sampler_id"] = source
    out["sampling_rate"] = rate
    out["bytes"] = b
    out["packets"] = 1
    out["bytes_est"] = be
    out["packets_est"] = rate
    out["src_addr"] = src
    out["dst_addr"] = dst
    out["vlan"] = np.where(sw_vlan != 0, sw_vlan & 0xFFF, hv)
    out["vlan_out"] = w.sw_rest[:, 1]
    out["vlan_priority_in"] = w.sw_rest[:, 0]
    out["vlan_priority_out"] = w.sw_rest[:, 2]
    out["next_hop"] = w.next_hop
    out["bgp_next_hop"] = 0
    out["in_if"] = in_if
    out["out_if"] = out_if
    out["direction"] = 0
    out["time_start_ms"] = t
    out["time_end_ms"] = t
    out["time_received_ms"] = t
    out["time_export_ms"] = t

    return out


class SflowGroup:
    """:func:`decode_sflow_group`'s outcome for ``k`` datagrams, without one object per plain datagram.

    ``plain[i]``: datagram ``i`` decoded here to flow rows only (no counters, no problems);
    its rows are ``flows[bounds[i] : bounds[i + 1]]`` (consecutive plain datagrams have
    consecutive rows) and its header is ``header(i)``. Every other datagram's
    :class:`DecodeResult` or :class:`DecodeError` is ``others[i]``.
    """

    __slots__ = ("flows", "samples", "bounds", "plain", "others", "heads", "agents")

    def header(self, i: int) -> ExportHeader:
        sub_agent, dseq, uptime = self.heads[i]
        return ExportHeader(P, addr_str(self.agents[i]), sub_agent, dseq, 1, None, uptime)

    def result(self, i: int) -> DecodeResult | DecodeError:
        """Datagram ``i`` as :func:`~ingest.decode.sflow.decode_sflow` returns it."""
        if not self.plain[i]:
            return self.others[i]
        lo, hi = self.bounds[i], self.bounds[i + 1]
        return DecodeResult(self.flows[lo:hi] if hi > lo else EMPTY_FLOWS, EMPTY_COUNTERS, self.header(i),
                            Counter.__new__(Counter), samples=self.samples[lo:hi])


def decode_sflow_group(
    datagrams, exporters, received_at_ms, templates: TemplateCache, jit: bool | None = None
) -> SflowGroup:
    """:func:`decode_sflow_many` as one :class:`SflowGroup` (the ingest pipeline's form)."""
    k = len(datagrams)
    ex = [exporters] * k if isinstance(exporters, str) else list(exporters)
    ts = [received_at_ms] * k if isinstance(received_at_ms, (int, np.integer)) else list(received_at_ms)
    if len(ex) != k or len(ts) != k:
        raise ValueError("exporters / received_at_ms must match the datagrams")
    datas = [d if isinstance(d, bytes) else bytes(d) for d in datagrams]
    if k == 0:
        g = SflowGroup()
        g.flows, g.bounds, g.plain, g.others, g.heads, g.agents = EMPTY_FLOWS, [0], [], {}, [], []
        g.samples = EMPTY_SAMPLES
        return g
    if jit is None:
        jit = JIT_AVAILABLE
    w = _walk_jit(datas) if jit else _walk_numpy(datas)
    return _group(w, _rows_jit(w, datas, ts) if w.jit is not None else _rows_numpy(w, datas, ts), datas, ex, ts,
                  templates)


def _group(w: _Walk, out: np.ndarray, datas: list[bytes], ex: list, ts: list, templates: TemplateCache) -> SflowGroup:
    k = len(datas)
    heads, agents, bad, starts, dg = w.heads, w.agents, w.bad, w.starts, w.dg

    # ---- counter samples (Python) and per-datagram results ---------------------
    problems: dict[int, Counter] = {}
    ctr_rows: dict[int, list] = {}
    c_dg, c_body, c_fmt, c_len = w.ctr
    if len(c_dg):
        for i, body, fmt, slen in zip(c_dg.tolist(), c_body.tolist(), c_fmt.tolist(), c_len.tolist()):
            if bad[i]:
                continue
            o = body - int(starts[i])
            pr = problems.get(i)
            if pr is None:
                pr = problems[i] = Counter()
            try:
                c = _counter_sample(datas[i], o, o + slen, fmt, slen, pr)
            except DecodeError:
                bad[i] = True
                continue
            if c is not None:
                ctr_rows.setdefault(i, []).append(c)

    samples = np.empty(len(dg), dtype=SAMPLE_DTYPE)
    if len(dg):
        samples["seq"], samples["pool"], samples["drops"] = w.facts[:, 0], w.facts[:, 1], w.facts[:, 2]
        samples["domain"] = np.array([h[0] if h is not None else 0 for h in heads], dtype=np.int64)[dg]
        samples["source"] = w.source
        samples["rate"] = w.rate
        samples["received_ms"] = np.array(ts, dtype=np.int64)[dg]
    counts = np.bincount(dg, minlength=k)
    bounds = np.concatenate(([0], np.cumsum(counts))).tolist()
    plain = (~bad).tolist()
    others: dict[int, DecodeResult | DecodeError] = {}
    for i in np.flatnonzero(bad).tolist():
        try:
            others[i] = decode_sflow(datas[i], ex[i], ts[i], templates)
        except DecodeError as err:
            # kept as a value: without its traceback, whose frame (this one) would hold the group in a cycle
            others[i] = err.with_traceback(None)
    for i in set(problems) | set(ctr_rows):
        pr = problems.get(i)
        crows = ctr_rows.get(i)
        if plain[i] and (pr or crows):
            plain[i] = False
            sub_agent, dseq, uptime = heads[i]
            a16 = agents[i]
            lo, hi = bounds[i], bounds[i + 1]
            others[i] = DecodeResult(
                out[lo:hi] if hi > lo else EMPTY_FLOWS,
                _counter_array(crows, a16, sub_agent, ts[i], uptime) if crows else EMPTY_COUNTERS,
                ExportHeader(P, addr_str(a16), sub_agent, dseq, 1, None, uptime),
                pr,
                samples=samples[lo:hi],
            )
    g = SflowGroup()
    g.flows, g.bounds, g.plain, g.others, g.heads, g.agents = out, bounds, plain, others, heads, agents
    g.samples = samples
    return g
