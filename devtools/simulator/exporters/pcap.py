"""Tiny classic-pcap writer: wraps export datagrams in Ethernet/IPv4/UDP for tshark and tcpreplay."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Iterable

DEFAULT_PORTS = {"sflow": 6343, "netflow9": 2055, "ipfix": 4739, "marks": 6344}


class DistinctSources(dict):
    """Exporter name -> its own 127.0.0.x source address, assigned in order of first use (as
    :class:`~devtools.simulator.sender.UdpSender` binds them), for a capture written without sending."""

    def __missing__(self, exporter: str) -> str:
        addr = self[exporter] = f"127.0.0.{10 + len(self) % 240}"
        return addr


def _ip_checksum(hdr: bytes) -> int:
    s = sum(struct.unpack(">10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def udp_frame(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                               socket.inet_aton(src), socket.inet_aton(dst)))  # fmt: skip
    struct.pack_into(">H", ip, 10, _ip_checksum(bytes(ip)))
    return b"\0" * 12 + b"\x08\x00" + bytes(ip) + udp


def write_pcap(
    path: str | Path,
    datagrams: Iterable[tuple],
    ports: dict[str, int] | None = None,
    dst: str = "127.0.0.1",
    sources: dict[str, str] | None = None,
) -> int:
    """Write ``(send_time_ms, kind, data)`` tuples as UDP packets; returns the packet count.

    ``sources`` maps an exporter name (``.exporter`` of a SimDatagram) to a source address.
    """
    ports = {**DEFAULT_PORTS, **(ports or {})}
    sources = {} if sources is None else sources
    n = 0
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for dg in datagrams:
            t_ms, kind, data = dg[0], dg[1], dg[2]
            name = getattr(dg, "exporter", "")
            src = sources[name] if isinstance(sources, DistinctSources) else sources.get(name, "127.0.0.2")
            frame = udp_frame(src, dst, 50000, ports[kind], data)
            fh.write(struct.pack("<IIII", t_ms // 1000, (t_ms % 1000) * 1000, len(frame), len(frame)) + frame)
            n += 1
    return n
