"""Minimal test-side parsers of sFlow v5 / NetFlow v9 / IPFIX written from the specs.

Deliberately separate from both the simulator's encoders and ingest.decode: only what the
tests need (headers, sample/record walks, fixed template layouts learned from the datagrams).
"""

from __future__ import annotations

import struct


def parse_sflow(d: bytes) -> dict:
    ver, atype = struct.unpack_from(">II", d, 0)
    assert ver == 5 and atype == 1
    agent = ".".join(str(b) for b in d[8:12])
    sub, seq, uptime, n = struct.unpack_from(">IIII", d, 12)
    off = 28
    flows, counters = [], []
    for _ in range(n):
        fmt, length = struct.unpack_from(">II", d, off)
        body = d[off + 8 : off + 8 + length]
        assert len(body) == length
        off += 8 + length
        if fmt == 1:
            sseq, src, rate, pool, drops, in_if, out_if, nrec = struct.unpack_from(">IIIIIIII", body, 0)
            o = 32
            rec = {"seq": sseq, "source_id": src, "rate": rate, "pool": pool, "in_if": in_if, "out_if": out_if}
            for _ in range(nrec):
                rfmt, rlen = struct.unpack_from(">II", body, o)
                rb = body[o + 8 : o + 8 + rlen]
                o += 8 + rlen
                if rfmt == 1:
                    proto, frame_len, stripped, hlen = struct.unpack_from(">IIII", rb, 0)
                    hdr = rb[16 : 16 + hlen]
                    ip = hdr[14:]
                    rec.update(frame_len=frame_len, stripped=stripped, header=hdr,
                               ip_len=struct.unpack_from(">H", ip, 2)[0], proto=ip[9],
                               src=".".join(map(str, ip[12:16])), dst=".".join(map(str, ip[16:20])),
                               sport=struct.unpack_from(">H", ip, 20)[0], dport=struct.unpack_from(">H", ip, 22)[0])  # fmt: skip
            flows.append(rec)
        elif fmt == 2:
            cseq, src, nrec = struct.unpack_from(">III", body, 0)
            o = 12
            rec = {"seq": cseq, "source_id": src}
            for _ in range(nrec):
                rfmt, rlen = struct.unpack_from(">II", body, o)
                rb = body[o + 8 : o + 8 + rlen]
                o += 8 + rlen
                if rfmt == 1:
                    v = struct.unpack(">IIQIIQIIIIIIQIIIIII", rb)
                    rec.update(if_index=v[0], if_speed=v[2], in_octets=v[5], in_ucast=v[6], in_discards=v[9],
                               in_errors=v[10], out_octets=v[12], out_ucast=v[13], out_discards=v[16], status=v[4])  # fmt: skip
                elif rfmt == 2:
                    rec["dot3"] = struct.unpack(">13I", rb)
            counters.append(rec)
    assert off == len(d), "trailing bytes"
    return {"agent": agent, "sub_agent": sub, "seq": seq, "uptime": uptime, "flows": flows, "counters": counters}


def _walk_sets(d: bytes, off: int, end: int, tpl_ids: tuple[int, int]):
    while off < end:
        sid, slen = struct.unpack_from(">HH", d, off)
        assert slen >= 4 and off + slen <= end, "bad set length"
        yield sid, d[off + 4 : off + slen]
        off += slen
    assert off == end


def parse_v9(d: bytes, templates: dict) -> dict:
    ver, count, uptime, secs, seq, source = struct.unpack_from(">HHIIII", d, 0)
    assert ver == 9
    recs, opts, n = [], [], 0
    for sid, body in _walk_sets(d, 20, len(d), (0, 1)):
        if sid == 0:
            o = 0
            while o + 4 <= len(body):
                tid, fc = struct.unpack_from(">HH", body, o)
                if tid == 0:
                    break
                templates[tid] = [struct.unpack_from(">HH", body, o + 4 + 4 * i) for i in range(fc)]
                o += 4 + 4 * fc
                n += 1
        elif sid == 1:
            tid, slen, olen = struct.unpack_from(">HHH", body, 0)
            fields = [struct.unpack_from(">HH", body, 6 + 4 * i) for i in range((slen + olen) // 4)]
            templates[tid] = [(-t, ln) for t, ln in fields[: slen // 4]] + fields[slen // 4 :]
            n += 1
        else:
            n += _data_records(body, templates[sid], recs, opts)
    return {"count": count, "uptime": uptime, "secs": secs, "seq": seq, "source": source, "records": recs,
            "options": opts, "n": n}  # fmt: skip


def _data_records(body: bytes, fields: list, recs: list, opts: list) -> int:
    """Append the records of one data set (as {IE: value}; scope IEs negative) to ``recs`` or, for an options
    template, ``opts``; return how many."""
    size = sum(ln for _, ln in fields)
    o = n = 0
    while o + size <= len(body):
        rec, p = {}, o
        for t, ln in fields:
            rec[t] = int.from_bytes(body[p : p + ln], "big")
            p += ln
        (opts if any(t < 0 for t, _ in fields) else recs).append(rec)
        o += size
        n += 1
    return n


def parse_ipfix(d: bytes, templates: dict) -> dict:
    ver, length, secs, seq, domain = struct.unpack_from(">HHIII", d, 0)
    assert ver == 10 and length == len(d)
    recs, opts = [], []
    for sid, body in _walk_sets(d, 16, len(d), (2, 3)):
        if sid in (2, 3):
            o = 0
            while o + 4 <= len(body):
                tid, fc = struct.unpack_from(">HH", body, o)
                if tid == 0:
                    break
                o += 4
                scope = 0
                if sid == 3:
                    scope = struct.unpack_from(">H", body, o)[0]
                    o += 2
                fields = [struct.unpack_from(">HH", body, o + 4 * i) for i in range(fc)]
                o += 4 * fc
                templates[tid] = [(-t, ln) if i < scope else (t, ln) for i, (t, ln) in enumerate(fields)]
                if sid == 3:
                    break  # padding follows
        else:
            _data_records(body, templates[sid], recs, opts)
    return {"secs": secs, "seq": seq, "domain": domain, "records": recs, "options": opts}
