"""Minimal pcap / pcapng reader yielding UDP datagrams (standard library only).

Reads classic pcap (both byte orders, microsecond and nanosecond variants)
and pcapng (SHB, IDB, EPB, SPB; other blocks skipped; per-interface link type
and ``if_tsresol``). Link types: Ethernet (with 802.1Q / 802.1ad tags), Linux
cooked v1 (SLL) and v2 (SLL2), BSD NULL / loopback, raw IP (101 and 228/229).
IPv4 and IPv6 (extension headers walked). IPv4 fragments are not reassembled:
they are skipped and counted. Everything that is not UDP is counted in
:class:`PcapStats` and skipped. Offline tooling only; never on the ingest path.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, NamedTuple

__all__ = ["UdpPacket", "PcapStats", "PcapError", "read_udp", "iter_frames"]

LINK_NULL = 0
LINK_ETHERNET = 1
LINK_RAW = 101
LINK_LOOP = 108
LINK_LINUX_SLL = 113
LINK_RAW_IPV4 = 228
LINK_RAW_IPV6 = 229
LINK_LINUX_SLL2 = 276

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
_PCAPNG_SHB = 0x0A0D0D0A
_MAX_BLOCK = 1 << 26
_V6_EXT = (0, 43, 60, 51)


class PcapError(Exception):
    """The file is not a pcap/pcapng file or is corrupt beyond skipping."""


class UdpPacket(NamedTuple):
    timestamp_s: float
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    payload: bytes


@dataclass
class PcapStats:
    frames: int = 0
    udp: int = 0
    skipped: dict = field(default_factory=dict)  # reason -> count

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    @property
    def non_udp(self) -> int:
        return sum(self.skipped.values())


def read_udp(path_or_file, stats: PcapStats | None = None) -> Iterator[UdpPacket]:
    """Yield every UDP datagram of a pcap/pcapng file in capture order.

    ``stats`` (optional) is filled as the iterator advances: frames seen, UDP
    yielded, and skipped frames by reason (``fragment``, ``not_udp``,
    ``not_ip``, ``truncated``, ``linktype``).
    """
    st = stats if stats is not None else PcapStats()
    for ts, linktype, frame in iter_frames(path_or_file):
        st.frames += 1
        pkt = _decode_frame(linktype, frame, ts, st)
        if pkt is not None:
            st.udp += 1
            yield pkt


def iter_frames(path_or_file) -> Iterator[tuple[float, int, bytes]]:
    """Yield ``(timestamp_s, linktype, frame_bytes)`` for every captured frame."""
    if isinstance(path_or_file, (str, bytes)) or hasattr(path_or_file, "__fspath__"):
        with open(path_or_file, "rb") as fh:
            yield from _iter_fh(fh)
    else:
        yield from _iter_fh(path_or_file)


def _iter_fh(fh: BinaryIO):
    head = fh.read(4)
    if len(head) < 4:
        raise PcapError("file too short")
    if head in _PCAP_MAGIC:
        yield from _iter_pcap(fh, head)
    elif struct.unpack("<I", head)[0] == _PCAPNG_SHB:
        yield from _iter_pcapng(fh, head)
    else:
        raise PcapError(f"unknown magic {head.hex()}")


def _iter_pcap(fh, magic):
    endian, unit = _PCAP_MAGIC[magic]
    rest = fh.read(20)
    if len(rest) < 20:
        raise PcapError("pcap header truncated")
    _vmaj, _vmin, _tz, _sig, _snap, linktype = struct.unpack(endian + "HHiIII", rest)
    linktype &= 0x0FFFFFFF
    rec = struct.Struct(endian + "IIII")
    while True:
        h = fh.read(16)
        if len(h) < 16:
            return
        sec, frac, caplen, _orig = rec.unpack(h)
        if caplen > _MAX_BLOCK:
            raise PcapError(f"record length {caplen}")
        data = fh.read(caplen)
        if len(data) < caplen:
            return
        yield sec + frac * unit, linktype, data


def _iter_pcapng(fh, first4):
    endian = "<"
    interfaces: list[tuple[int, float]] = []
    pending = first4
    while True:
        h = pending + fh.read(8 - len(pending))
        pending = b""
        if len(h) < 8:
            return
        btype = struct.unpack(endian + "I", h[:4])[0]
        if btype == _PCAPNG_SHB:
            bom = fh.read(4)
            if len(bom) < 4:
                return
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                raise PcapError("bad pcapng byte-order magic")
            blen = struct.unpack(endian + "I", h[4:8])[0]
            if blen < 28 or blen > _MAX_BLOCK:
                raise PcapError(f"bad SHB length {blen}")
            body = fh.read(blen - 12)
            if len(body) < blen - 12:
                return
            interfaces = []
            continue
        blen = struct.unpack(endian + "I", h[4:8])[0]
        if blen < 12 or blen > _MAX_BLOCK or blen % 4:
            raise PcapError(f"bad block length {blen}")
        body = fh.read(blen - 8)
        if len(body) < blen - 8:
            return
        body = body[:-4]  # trailing block total length
        if btype == 1:  # IDB
            linktype = struct.unpack_from(endian + "H", body, 0)[0]
            interfaces.append((linktype, _tsresol(body[8:], endian)))
        elif btype == 6:  # EPB
            if len(body) < 20:
                continue
            ifid, tsh, tsl, caplen, _orig = struct.unpack_from(endian + "IIIII", body, 0)
            if ifid >= len(interfaces):
                continue
            linktype, unit = interfaces[ifid]
            yield ((tsh << 32) | tsl) * unit, linktype, body[20 : 20 + caplen]
        elif btype == 3:  # SPB: no timestamp, captured length = min(orig, snap)
            if not interfaces or len(body) < 4:
                continue
            orig = struct.unpack_from(endian + "I", body, 0)[0]
            linktype, _unit = interfaces[0]
            yield 0.0, linktype, body[4 : 4 + orig]
        # other blocks (NRB, ISB, custom, ...) are skipped


def _tsresol(opts: bytes, endian: str) -> float:
    p = 0
    while p + 4 <= len(opts):
        code, olen = struct.unpack_from(endian + "HH", opts, p)
        p += 4
        if code == 0:
            break
        if code == 9 and olen >= 1:
            v = opts[p]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        p += (olen + 3) & ~3
    return 1e-6


def _decode_frame(linktype: int, f: bytes, ts: float, st: PcapStats) -> UdpPacket | None:
    try:
        if linktype == LINK_ETHERNET:
            et = struct.unpack_from(">H", f, 12)[0]
            off = 14
            tags = 0
            while et in (0x8100, 0x88A8, 0x9100) and tags < 4:
                et = struct.unpack_from(">H", f, off + 2)[0]
                off += 4
                tags += 1
        elif linktype == LINK_LINUX_SLL:
            et = struct.unpack_from(">H", f, 14)[0]
            off = 16
        elif linktype == LINK_LINUX_SLL2:
            et = struct.unpack_from(">H", f, 0)[0]
            off = 20
        elif linktype in (LINK_NULL, LINK_LOOP):
            fam_le = struct.unpack_from("<I", f, 0)[0]
            fam_be = struct.unpack_from(">I", f, 0)[0]
            fam = fam_le if fam_le < 256 else fam_be
            et = 0x0800 if fam == 2 else (0x86DD if fam in (10, 24, 28, 30) else 0)
            off = 4
        elif linktype in (LINK_RAW, LINK_RAW_IPV4, LINK_RAW_IPV6, 12, 14):
            v = f[0] >> 4
            et = 0x0800 if v == 4 else (0x86DD if v == 6 else 0)
            off = 0
        else:
            st.skip("linktype")
            return None
        if et == 0x0800:
            vi = f[off]
            ihl = (vi & 0x0F) * 4
            if vi >> 4 != 4 or ihl < 20:
                st.skip("not_ip")
                return None
            total, frag = struct.unpack_from(">H2xH", f, off + 2)
            if frag & 0x3FFF:  # MF set or offset > 0
                st.skip("fragment")
                return None
            proto = f[off + 9]
            src = socket.inet_ntop(socket.AF_INET, f[off + 12 : off + 16])
            dst = socket.inet_ntop(socket.AF_INET, f[off + 16 : off + 20])
            end = min(len(f), off + total) if total >= ihl else len(f)
            l4 = off + ihl
        elif et == 0x86DD:
            plen = struct.unpack_from(">H", f, off + 4)[0]
            proto = f[off + 6]
            src = socket.inet_ntop(socket.AF_INET6, f[off + 8 : off + 24])
            dst = socket.inet_ntop(socket.AF_INET6, f[off + 24 : off + 40])
            if len(f) < off + 40:
                raise IndexError
            end = min(len(f), off + 40 + plen) if plen else len(f)
            l4 = off + 40
            n = 0
            while proto in _V6_EXT or proto == 44:
                if n >= 8:
                    break
                nxt = f[l4]
                if proto == 44:
                    if struct.unpack_from(">H", f, l4 + 2)[0] & 0xFFF9:  # offset or M flag
                        st.skip("fragment")
                        return None
                    l4 += 8
                elif proto == 51:
                    l4 += (f[l4 + 1] + 2) * 4
                else:
                    l4 += (f[l4 + 1] + 1) * 8
                proto = nxt
                n += 1
        else:
            st.skip("not_ip")
            return None
        if proto != 17:
            st.skip("not_udp")
            return None
        sport, dport, ulen = struct.unpack_from(">HHH", f, l4)
        if l4 + 8 > end:
            raise IndexError
        stop = min(end, l4 + ulen) if ulen >= 8 else end
        return UdpPacket(ts, src, sport, dst, dport, bytes(f[l4 + 8 : stop]))
    except (IndexError, struct.error, ValueError):
        st.skip("truncated")
        return None
