"""Build fabric_input.pcap (input traffic for pmacctd sfprobe) and input_truth.json.

Run with the system python3 (scapy 2.5): ``python3 make_input.py OUTDIR``. Deterministic.
Frames the shared traffic.pcap lacks: VXLAN, QinQ, IPv6 extension headers (hop-by-hop,
dest opts, routing, fragment, AH), RoCEv2 BTH, IPv4 options and fragments, ICMPv6, jumbo TCP.
truth: one entry per frame with what an sFlow collector should read from its sampled header
(inner addresses/ports for VXLAN; outer VLAN; IP length from the header fields).
"""

import json
import random
import struct
import sys

from scapy.all import IP, UDP, TCP, ICMP, Ether, Dot1Q, Dot1AD, Raw, wrpcap
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment, ICMPv6EchoRequest
from scapy.layers.vxlan import VXLAN

out = sys.argv[1]
rng = random.Random(7)
T0 = 1719835200.0
frames, truth = [], []


def add(pkt, **t):
    pkt.time = T0 + len(frames) * 0.01
    frames.append(pkt)
    base = dict(vlan=0, vni=-1, roce_opcode=-1, roce_dest_qp=-1, tcp_flags=0, tos=0)
    base.update(t)
    truth.append(base)


def bth(opcode, qp):
    return struct.pack(">BBHII", opcode, 0x40, 0xFFFF, qp, rng.randrange(1 << 24)) + b"\x00" * 16


for i in range(40):  # VXLAN: inner TCP over outer UDP 4789
    sp = 49152 + i
    inner = Ether() / IP(src="192.168.1.%d" % (1 + i % 4), dst="192.168.2.9", tos=8) / TCP(sport=40000 + i, dport=2049, flags="PA") / Raw(b"\x00" * 200)
    p = Ether() / IP(src="10.1.0.1", dst="10.1.0.2", tos=0x60) / UDP(sport=sp, dport=4789) / VXLAN(vni=5001 + i % 2) / inner
    add(p, ip_version=4, src="192.168.1.%d" % (1 + i % 4), dst="192.168.2.9", proto=6, sport=40000 + i, dport=2049,
        ip_len=len(p[IP]), vni=5001 + i % 2, tcp_flags=0x18, tos=0x60)
for i in range(40):  # QinQ 802.1ad outer 300, inner 42
    p = Ether() / Dot1AD(vlan=300) / Dot1Q(vlan=42) / IP(src="10.2.0.1", dst="10.2.0.53") / UDP(sport=30000 + i, dport=53) / Raw(b"\x01" * 30)
    add(p, ip_version=4, src="10.2.0.1", dst="10.2.0.53", proto=17, sport=30000 + i, dport=53, ip_len=len(p[IP]), vlan=300,
        tpid_88a8=True)
for i in range(20):  # double 802.1Q (0x8100 outer, 0x8100 inner)
    p = Ether() / Dot1Q(vlan=301) / Dot1Q(vlan=43) / IP(src="10.2.1.1", dst="10.2.1.53") / UDP(sport=31000 + i, dport=53) / Raw(b"\x01" * 30)
    add(p, ip_version=4, src="10.2.1.1", dst="10.2.1.53", proto=17, sport=31000 + i, dport=53, ip_len=len(p[IP]), vlan=301)
for i in range(30):  # 802.1Q jumbo TCP
    p = Ether() / Dot1Q(vlan=110) / IP(src="10.3.0.%d" % (1 + i % 8), dst="10.3.0.100", tos=0x68) / TCP(sport=50000 + i, dport=29400, flags="A") / Raw(b"\x00" * 8940)
    add(p, ip_version=4, src="10.3.0.%d" % (1 + i % 8), dst="10.3.0.100", proto=6, sport=50000 + i, dport=29400,
        ip_len=len(p[IP]), vlan=110, tcp_flags=0x10, tos=0x68)
for i in range(30):  # IPv6 hop-by-hop + dest opts + TCP
    p = Ether() / IPv6(src="fd00:99::30", dst="fd00:30::%d" % (1 + i % 8), tc=0xB8) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / TCP(sport=5000 + i, dport=9100, flags="S") / Raw(b"\x00" * 100)
    add(p, ip_version=6, src="fd00:99::30", dst="fd00:30::%d" % (1 + i % 8), proto=6, sport=5000 + i, dport=9100,
        ip_len=len(p[IPv6]), tcp_flags=0x02, tos=0xB8)
for i in range(20):  # IPv6 routing header + UDP
    p = Ether() / IPv6(src="fd00:1::1", dst="fd00:1::2") / IPv6ExtHdrRouting(addresses=["fd00:1::9"]) / UDP(sport=7000 + i, dport=7001) / Raw(b"\x00" * 64)
    add(p, ip_version=6, src="fd00:1::1", dst="fd00:1::2", proto=17, sport=7000 + i, dport=7001, ip_len=len(p[IPv6]))
for i in range(20):  # IPv6 first fragment (offset 0, M=1) + UDP
    p = Ether() / IPv6(src="fd00:2::1", dst="fd00:2::2") / IPv6ExtHdrFragment(offset=0, m=1, id=i) / UDP(sport=8000 + i, dport=8001) / Raw(b"\x00" * 500)
    add(p, ip_version=6, src="fd00:2::1", dst="fd00:2::2", proto=17, sport=8000 + i, dport=8001, ip_len=len(p[IPv6]))
for i in range(10):  # IPv6 AH (raw) + TCP
    tcp = bytes(TCP(sport=9000 + i, dport=443, flags="PA") / Raw(b"\x00" * 40))
    ah = bytes([6, 4, 0, 0]) + struct.pack(">II", 0x100, i) + b"\x00" * 12  # next=TCP, len=4 -> 24 bytes
    p = Ether() / IPv6(src="fd00:3::1", dst="fd00:3::2", nh=51) / Raw(ah + tcp)
    add(p, ip_version=6, src="fd00:3::1", dst="fd00:3::2", proto=6, sport=9000 + i, dport=443, ip_len=len(p[IPv6]),
        tcp_flags=0x18)
for i in range(30):  # RoCEv2 BTH
    op, qp = rng.choice([4, 10, 17, 129]), rng.randrange(1 << 24)
    p = Ether() / IP(src="10.30.0.%d" % (1 + i % 8), dst="10.30.0.%d" % (1 + (i + 1) % 8), tos=0x6A) / UDP(sport=49152 + i, dport=4791) / Raw(bth(op, qp) + b"\x00" * 1024)
    add(p, ip_version=4, src="10.30.0.%d" % (1 + i % 8), dst="10.30.0.%d" % (1 + (i + 1) % 8), proto=17, sport=49152 + i,
        dport=4791, ip_len=len(p[IP]), roce_opcode=op, roce_dest_qp=qp, tos=0x6A)
for i in range(10):  # IPv4 with options + ICMP echo
    p = Ether() / IP(src="10.4.0.1", dst="10.4.0.2", options=[b"\x01\x01\x01\x00"]) / ICMP(type=8, code=0) / Raw(b"\x00" * 56)
    add(p, ip_version=4, src="10.4.0.1", dst="10.4.0.2", proto=1, sport=0, dport=8 * 256, ip_len=len(p[IP]))
for i in range(10):  # IPv4 non-first fragments of UDP
    p = Ether() / IP(src="10.5.0.1", dst="10.5.0.2", proto=17, frag=185, flags=0, id=100 + i) / Raw(b"\x00" * 300)
    add(p, ip_version=4, src="10.5.0.1", dst="10.5.0.2", proto=17, sport=0, dport=0, ip_len=len(p[IP]))
for i in range(10):  # ICMPv6 echo
    p = Ether() / IPv6(src="fd00:99::30", dst="fd00:30::1") / ICMPv6EchoRequest(id=i) / Raw(b"\x00" * 32)
    add(p, ip_version=6, src="fd00:99::30", dst="fd00:30::1", proto=58, sport=0, dport=128 * 256, ip_len=len(p[IPv6]))

wrpcap(f"{out}/fabric_input.pcap", frames)
json.dump({"frames": len(frames), "truth": truth}, open(f"{out}/input_truth.json", "w"), indent=0)
print(len(frames), "frames")
