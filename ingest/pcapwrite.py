"""A streaming classic-pcap writer for received datagrams (standard library only).

Each datagram becomes a raw-IP frame (link type 101: IPv4 or IPv6 header + UDP header + payload) from the
exporter's address to the listener's port, stamped with the receive time ingest used (unix ms, written as
seconds + microseconds, so :mod:`ingest.pcapread` gives the same millisecond back). ``fabricflow backfill``
reads such a file through the same decoders; ``ingest.capture_path`` writes one. Offline tooling beside the
ingest path: nothing here runs unless a capture is asked for.
"""

from __future__ import annotations

import ipaddress
import logging
import struct

__all__ = ["PcapWriter"]

log = logging.getLogger("fabricflow.ingest")

LINK_RAW = 101
_REC = struct.Struct("<IIII")
_V4 = struct.Struct(">BBHHHBBH4s4s")
_V6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")


def _checksum(hdr: bytes) -> int:
    s = sum(struct.unpack(">10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _addr(text: str) -> tuple[int, bytes]:
    ip = ipaddress.ip_address(text.split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.version, ip.packed


class PcapWriter:
    """Append datagrams to a pcap file; stops (logged once) at ``max_bytes``. Use as a context manager or call
    :meth:`close`. ``dst`` is the collector address written as each frame's destination."""

    def __init__(self, path: str, max_bytes: int = 0, dst: str = "127.0.0.1"):
        self.path = path
        self.max_bytes = int(max_bytes)
        self.fh = open(path, "wb")
        self.fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINK_RAW))
        self.size = 24
        self.written = 0
        self.full = False
        self._dst = {4: _addr("127.0.0.1")[1], 6: _addr("::1")[1]}
        v, packed = _addr(dst)
        self._dst[v] = packed
        self._src: dict[str, tuple[int, bytes]] = {}

    def write(self, received_ms: int, src: str, dst_port: int, payload: bytes, src_port: int = 0) -> bool:
        """One datagram; False once the file is full (nothing written)."""
        if self.full:
            return False
        a = self._src.get(src)
        if a is None:
            if len(self._src) > 65536:
                self._src.clear()
            a = self._src[src] = _addr(src)
        version, packed = a
        udp = _UDP.pack(src_port & 0xFFFF, dst_port & 0xFFFF, min(0xFFFF, 8 + len(payload)), 0)
        if version == 4:
            ip = _V4.pack(0x45, 0, min(0xFFFF, 28 + len(payload)), 0, 0x4000, 64, 17, 0, packed, self._dst[4])
            ip = ip[:10] + struct.pack(">H", _checksum(ip)) + ip[12:]
        else:
            ip = _V6.pack(0x60000000, min(0xFFFF, 8 + len(payload)), 17, 64, packed, self._dst[6])
        n = len(ip) + len(udp) + len(payload)
        if self.max_bytes and self.size + 16 + n > self.max_bytes:
            self.full = True
            log.warning("capture %s reached %d bytes (ingest.capture_max_bytes): no more datagrams are written",
                        self.path, self.size)
            return False
        ms = int(received_ms)
        self.fh.write(_REC.pack(ms // 1000, (ms % 1000) * 1000, n, n))
        self.fh.write(ip)
        self.fh.write(udp)
        self.fh.write(payload)
        self.size += 16 + n
        self.written += 1
        return True

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
