"""Build sFlow v5 datagrams and sampled packets with struct, for tests and the benchmark."""

from __future__ import annotations

import ipaddress
import random
import struct


def _pad(b: bytes) -> bytes:
    return b + b"\x00" * (-len(b) % 4)


def _ip(a: str) -> bytes:
    return ipaddress.ip_address(a).packed


# ---------------------------------------------------------------- packets


def eth(payload: bytes, ethertype: int = 0x0800, tags: list[tuple[int, int]] = ()) -> bytes:
    """Ethernet II with optional tags [(tpid, vlan_id), ...] outermost first."""
    out = b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02"
    for tpid, vid in tags:
        out += struct.pack(">HH", tpid, vid & 0xFFF)
    return out + struct.pack(">H", ethertype) + payload


def ipv4(payload: bytes, proto: int, src="10.0.0.1", dst="10.0.0.2", tos=0, total_len=None, frag=0,
         options: bytes = b"") -> bytes:
    ihl = 5 + len(options) // 4
    tl = total_len if total_len is not None else ihl * 4 + len(payload)
    hdr = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, tos, tl, 1, frag, 64, proto, 0, _ip(src), _ip(dst))
    return hdr + options + payload


def ipv6(payload: bytes, nh: int, src="fd00::1", dst="fd00::2", tc=0, payload_len=None,
         ext: list[tuple[int, bytes]] = ()) -> bytes:
    """IPv6 with extension headers ``ext`` = [(type, raw_header_bytes_without_next_header_field)]."""
    chain = b""
    types = [t for t, _ in ext] + [nh]
    for i, (t, body) in enumerate(ext):
        chain += bytes([types[i + 1]]) + body
    first = types[0]
    pl = payload_len if payload_len is not None else len(chain) + len(payload)
    hdr = struct.pack(">IHBB16s16s", (6 << 28) | (tc << 20), pl, first, 64, _ip(src), _ip(dst))
    return hdr + chain + payload


def ext_hbh(n8: int = 0) -> bytes:
    """Hop-by-hop / routing / dest-opts body (after the next-header byte): (n8+1)*8 bytes total."""
    return bytes([n8]) + b"\x01" * ((n8 + 1) * 8 - 2)


def ext_frag(offset: int = 0, more: bool = False) -> bytes:
    return b"\x00" + struct.pack(">HI", (offset << 3) | int(more), 0x1234)


def ext_ah(n4: int = 4) -> bytes:
    """AH body: total length (n4+2)*4 bytes."""
    return bytes([n4]) + b"\x00" * ((n4 + 2) * 4 - 2)


def tcp(sport: int, dport: int, flags: int = 0x18, payload: bytes = b"") -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, 1, 2, 5 << 4, flags, 65535, 0, 0) + payload


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def icmp(icmp_type: int, code: int) -> bytes:
    return struct.pack(">BBHI", icmp_type, code, 0, 0)


def vxlan(vni: int, inner: bytes) -> bytes:
    return struct.pack(">II", 0x08000000, vni << 8) + inner


def bth(opcode: int, dest_qp: int, psn: int = 7) -> bytes:
    return struct.pack(">BBHII", opcode, 0x40, 0xFFFF, dest_qp & 0xFFFFFF, psn) + b"\x00" * 16


# ---------------------------------------------------------------- sFlow records


def record(fmt: int, body: bytes, enterprise: int = 0) -> bytes:
    body = _pad(body)
    return struct.pack(">II", (enterprise << 12) | fmt, len(body)) + body


def raw_header(frame: bytes, proto: int = 1, frame_length: int | None = None, stripped: int = 4,
               header_len: int | None = None, snap: int = 128) -> bytes:
    hdr = frame[:snap]
    fl = frame_length if frame_length is not None else len(frame) + stripped
    hl = header_len if header_len is not None else len(hdr)
    return record(1, struct.pack(">IIII", proto, fl, stripped, hl) + _pad(hdr))


def ext_switch(src_vlan: int, src_pri: int = 0, dst_vlan: int = 0, dst_pri: int = 0) -> bytes:
    return record(1001, struct.pack(">IIII", src_vlan, src_pri, dst_vlan, dst_pri))


def ext_router(nexthop: str = "10.0.0.254", src_mask: int = 24, dst_mask: int = 24) -> bytes:
    return record(1002, struct.pack(">I4sII", 1, _ip(nexthop), src_mask, dst_mask))


def sampled_ipv4(length, proto, src, dst, sport, dport, flags=0, tos=0) -> bytes:
    return record(3, struct.pack(">II4s4sIIII", length, proto, _ip(src), _ip(dst), sport, dport, flags, tos))


def sampled_ipv6(length, proto, src, dst, sport, dport, flags=0, priority=0) -> bytes:
    return record(4, struct.pack(">II16s16sIIII", length, proto, _ip(src), _ip(dst), sport, dport, flags, priority))


GENERIC_FIELDS = (
    "if_index", "if_type", "if_speed", "if_direction", "if_status",
    "in_octets", "in_ucast_pkts", "in_mcast_pkts", "in_bcast_pkts", "in_discards", "in_errors", "in_unknown_protos",
    "out_octets", "out_ucast_pkts", "out_mcast_pkts", "out_bcast_pkts", "out_discards", "out_errors", "promiscuous",
)


def generic_counters(**kw) -> bytes:
    vals = [kw.get(f, 0) for f in GENERIC_FIELDS]
    return record(1, struct.pack(">IIQIIQIIIIIIQIIIIII", *vals))


def ethernet_counters(*vals: int) -> bytes:
    v = list(vals) + [0] * (13 - len(vals))
    return record(2, struct.pack(">13I", *v))


# ---------------------------------------------------------------- samples / datagram


def _sample(fmt: int, body: bytes) -> bytes:
    body = _pad(body)
    return struct.pack(">II", fmt, len(body)) + body


def flow_sample(records: list[bytes], seq=1, source_type=0, source_index=1, rate=1, pool=1, drops=0,
                in_if=1, out_if=2) -> bytes:
    source = (source_type << 24) | source_index
    body = struct.pack(">IIIIIIII", seq, source, rate, pool, drops, in_if, out_if, len(records))
    return _sample(1, body + b"".join(records))


def flow_sample_expanded(records: list[bytes], seq=1, source_type=0, source_index=1, rate=1, pool=1, drops=0,
                         in_fmt=0, in_val=1, out_fmt=0, out_val=2) -> bytes:
    body = struct.pack(">IIIIIIIIIII", seq, source_type, source_index, rate, pool, drops,
                       in_fmt, in_val, out_fmt, out_val, len(records))
    return _sample(3, body + b"".join(records))


def counter_sample(records: list[bytes], seq=1, source_type=0, source_index=1) -> bytes:
    return _sample(2, struct.pack(">III", seq, (source_type << 24) | source_index, len(records)) + b"".join(records))


def counter_sample_expanded(records: list[bytes], seq=1, source_type=0, source_index=1) -> bytes:
    body = struct.pack(">IIII", seq, source_type, source_index, len(records))
    return _sample(4, body + b"".join(records))


def raw_sample(fmt: int, body: bytes) -> bytes:
    return _sample(fmt, body)


def datagram(samples: list[bytes], agent: str = "10.254.0.1", sub_agent: int = 0, seq: int = 1,
             uptime: int = 1000) -> bytes:
    ip = ipaddress.ip_address(agent)
    head = struct.pack(">II", 5, 1 if ip.version == 4 else 2) + ip.packed
    return head + struct.pack(">IIII", sub_agent, seq, uptime, len(samples)) + b"".join(samples)


def tcp_frame(src="10.0.0.1", dst="10.0.0.2", sport=40000, dport=443, flags=0x18, size=1500, vlan=None,
              tos=0) -> bytes:
    """An Ethernet/IPv4/TCP frame whose IPv4 total length is ``size`` (payload only partly present)."""
    seg = tcp(sport, dport, flags, b"\x00" * 32)
    pkt = ipv4(seg, 6, src, dst, tos=tos, total_len=size)
    return eth(pkt, 0x0800, [(0x8100, vlan)] if vlan else [])


def egress_queue(queue: int) -> bytes:
    """extended_egress_queue (sflow.org drop notification structures, flow record 1036)."""
    return record(1036, struct.pack(">I", queue))


def discard_sample(records: list[bytes], seq=1, source_type=0, source_index=1, drops=0, in_if=1, out_if=0,
                   reason=259) -> bytes:
    """discarded_packet (sflow.org "sFlow Dropped Packet Notification Structures", sample format 5): sequence,
    expanded data source (type, index), drops, input and output ifIndex, drop reason, flow records."""
    body = struct.pack(">IIIIIIII", seq, source_type, source_index, drops, in_if, out_if, reason, len(records))
    return _sample(5, body + b"".join(records))


def _frame(rng: random.Random) -> bytes:
    kind = rng.random()
    a = f"10.30.{rng.randrange(0, 4)}.{rng.randrange(1, 250)}"
    z = f"10.30.{rng.randrange(0, 4)}.{rng.randrange(1, 250)}"
    if kind < 0.45:
        seg = tcp(rng.randrange(1024, 65535), 29400, 0x10, b"\x00" * 80)
        tags = [(0x8100, 210)] if rng.random() < 0.3 else []
        return eth(ipv4(seg, 6, a, z, tos=0x68, total_len=9000), 0x0800, tags)
    if kind < 0.75:
        return eth(ipv4(udp(rng.randrange(49152, 65535), 4791, bth(10, rng.randrange(1 << 24)) +
                                  b"\x00" * 40), 17, a, z, tos=0x6A, total_len=4158))
    if kind < 0.85:
        inner = eth(ipv4(tcp(40000, 2049, 0x18, b"\x00" * 20), 6, "192.168.0.1", "192.168.0.2"))
        return eth(ipv4(udp(50000, 4789, vxlan(5001, inner)), 17, a, z, total_len=1550))
    if kind < 0.95:
        return eth(ipv6(tcp(5555, 9100, 0x18, b"\x00" * 40), 6, "fd00:99::30", "fd00:30::1", payload_len=1400),
                     0x86DD)
    return eth(ipv4(udp(33333, 53, b"\x00" * 40), 17, a, "10.40.0.53"))


def synthetic(k: int, per: int, seed: int = 1) -> list[bytes]:
    """``k`` datagrams of ``per`` flow samples of a mixed AI-cluster packet mix (TCP, RoCEv2, VXLAN, IPv6, DNS), a
    counter sample every 20 datagrams; seeded."""
    rng = random.Random(seed)
    out = []
    pool = 0
    for i in range(k):
        samples = []
        for j in range(per):
            fr = _frame(rng)
            pool += 4096
            samples.append(flow_sample([ext_switch(rng.choice((0, 0, 110, 210))), raw_header(fr)],
                                         seq=i * per + j, rate=4096, pool=pool, in_if=rng.randrange(1, 65),
                                         out_if=rng.randrange(1, 65)))
        if i % 20 == 0:
            samples.append(counter_sample([generic_counters(if_index=1, if_speed=400_000_000_000,
                                                                in_octets=1 << 40), ethernet_counters()]))
        out.append(datagram(samples, agent="10.254.1.1", seq=i + 1, uptime=i * 10))
    return out


def vxlan_roce_frame() -> bytes:
    """A frame that walks every header path: QinQ (802.1ad + 802.1Q) IPv4/UDP VXLAN (VNI 9) around an IPv6
    frame with hop-by-hop and fragment headers, then UDP 4791 with a RoCEv2 BTH (opcode 1, QP 5)."""
    inner = eth(ipv6(udp(1, 4791, bth(1, 5)), 17, ext=[(0, ext_hbh(0)), (44, ext_frag(0))]), 0x86DD)
    return eth(ipv4(udp(2, 4789, vxlan(9, inner)), 17), 0x0800, [(0x88A8, 1), (0x8100, 2)])


def every_sample_kind() -> bytes:
    """One datagram from an IPv6 agent with each sample kind: an expanded flow sample (switch, raw header of
    :func:`vxlan_roce_frame`, router; rate 0), a flow sample with a sampled IPv4 and an unknown record, an
    expanded counter sample (generic with a 64-bit octet count at 2^63, Ethernet) and an unknown sample type."""
    return datagram([
        flow_sample_expanded([ext_switch(5), raw_header(vxlan_roce_frame()), ext_router()], rate=0),
        flow_sample([sampled_ipv4(100, 6, "1.1.1.1", "2.2.2.2", 1, 2), record(99, b"abc")]),
        counter_sample_expanded([generic_counters(in_octets=1 << 63), ethernet_counters(1, 2)]),
        raw_sample(77, b"\x00" * 8),
    ], agent="2001:db8::5")
