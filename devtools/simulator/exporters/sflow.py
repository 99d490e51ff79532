"""sFlow v5 encoder (our own, struct-based) and a ToR switch agent that samples segments.

Wire format follows the sFlow v5 specification (XDR, big-endian): datagram header with
an IPv4 agent address, flow samples (enterprise 0, format 1) carrying a raw packet
header record (format 1) and an extended switch record (format 1001), and counter
samples (format 2) carrying generic interface (format 1) and ethernet (format 2)
counter records. The agent samples ingress packets on access ports (and on the uplink
for traffic from outside the cluster), so every packet is eligible once.
Independent of ``ingest.decode`` on purpose: the two cross-check each other.
"""

from __future__ import annotations

import socket
import struct

import numpy as np

from ..model import SflowConfig, Switch
from ..traffic import DNS_PORT, ROCE_PORT, TCP, UDP

HEADER_PROTO_ETHERNET = 1
FLOW_SAMPLE, COUNTER_SAMPLE = 1, 2
REC_RAW_HEADER, REC_EXT_SWITCH = 1, 1001
REC_GENERIC_IF, REC_ETHERNET = 1, 2
DATAGRAM_HEADER_LEN = 28
ETH_OVERHEAD = 18  # MAC header 14 + FCS 4 (L2 octets in interface counters)
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def encode_datagram(agent: str, sub_agent_id: int, sequence: int, uptime_ms: int, samples: list[bytes]) -> bytes:
    """sFlow v5 datagram with an IPv4 agent address; ``samples`` are already-encoded sample blocks."""
    head = struct.pack(
        ">II4sIIII", 5, 1, socket.inet_aton(agent), sub_agent_id, sequence & MASK32, uptime_ms & MASK32, len(samples)
    )
    return head + b"".join(samples)


def _block(fmt: int, body: bytes) -> bytes:
    return struct.pack(">II", fmt, len(body)) + body


def flow_sample(seq, source_id, rate, pool, drops, in_if, out_if, records: list[bytes]) -> bytes:
    body = struct.pack(
        ">IIIIIIII", seq & MASK32, source_id, rate, pool & MASK32, drops & MASK32, in_if, out_if, len(records)
    ) + b"".join(records)
    return _block(FLOW_SAMPLE, body)


def raw_header_record(frame_length: int, stripped: int, header: bytes) -> bytes:
    pad = (-len(header)) % 4
    body = struct.pack(">IIII", HEADER_PROTO_ETHERNET, frame_length, stripped, len(header)) + header + b"\0" * pad
    return _block(REC_RAW_HEADER, body)


def ext_switch_record(src_vlan: int, src_pri: int, dst_vlan: int, dst_pri: int) -> bytes:
    return _block(REC_EXT_SWITCH, struct.pack(">IIII", src_vlan, src_pri, dst_vlan, dst_pri))


def counter_sample(seq: int, source_id: int, records: list[bytes]) -> bytes:
    return _block(COUNTER_SAMPLE, struct.pack(">III", seq & MASK32, source_id, len(records)) + b"".join(records))


def generic_if_record(
    if_index, if_speed, in_octets, in_ucast, in_discards, in_errors, out_octets, out_ucast, out_discards, out_errors,
    if_type=6, direction=1, status=3, in_mcast=0, in_bcast=0, in_unknown=0, out_mcast=0, out_bcast=0, promisc=0,
) -> bytes:
    m = MASK32
    body = struct.pack(
        ">IIQIIQIIIIIIQIIIIII",
        if_index, if_type, if_speed & MASK64, direction, status, in_octets & MASK64,
        in_ucast & m, in_mcast & m, in_bcast & m, in_discards & m, in_errors & m, in_unknown & m,
        out_octets & MASK64, out_ucast & m, out_mcast & m, out_bcast & m, out_discards & m, out_errors & m, promisc,
    )  # fmt: skip
    return _block(REC_GENERIC_IF, body)


def ethernet_record(alignment=0, fcs=0, single_coll=0, multi_coll=0, sqe=0, deferred=0, late=0, excessive=0,
                    mac_tx=0, carrier=0, too_long=0, mac_rx=0, symbol=0) -> bytes:  # fmt: skip
    vals = (alignment, fcs, single_coll, multi_coll, sqe, deferred, late, excessive, mac_tx, carrier, too_long, mac_rx, symbol)
    return _block(REC_ETHERNET, struct.pack(">13I", *(v & MASK32 for v in vals)))


def mac_for(ip: int) -> bytes:
    return b"\x02\x00" + ip.to_bytes(4, "big")


def _csum(data: bytes) -> int:
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


_QNAME = b"\x0cgpu-metadata\x07cluster\x05local\x00"  # 28 bytes


def dns_payload(size: int, is_response: bool, txid: int) -> bytes:
    """A DNS A query (or a response with as many A answers as fit) of about ``size`` bytes."""
    question = _QNAME + struct.pack(">HH", 1, 1)
    answers = max(0, (size - 12 - len(question)) // 16) if is_response else 0
    flags = 0x8180 if is_response else 0x0100
    msg = struct.pack(">HHHHHH", txid, flags, 1, answers, 0, 0) + question
    for i in range(answers):
        msg += struct.pack(">HHHIH4s", 0xC00C, 1, 1, 300, 4, bytes((10, 0, 99, i + 1)))
    return msg


def packet_header(
    src: int, dst: int, sport: int, dport: int, proto: int, ip_len: int, tcp_flags: int, tos: int, qp: int,
    dst_mac: bytes, tcp_seq: int, psn: int, ip_id: int, snap: int, bth_op: int = 0x07,
) -> bytes:
    """Ethernet + IPv4 + TCP/UDP (+ RoCEv2 BTH) header bytes of a packet of ``ip_len`` IP bytes, cut at ``snap``.

    ``bth_op``: the BTH opcode (0x07 RC RDMA WRITE MIDDLE, the collectives' data; 0x81 a CNP)."""
    eth = dst_mac + mac_for(src) + b"\x08\x00"
    ip = bytearray(struct.pack(">BBHHHBBHII", 0x45, tos, ip_len, ip_id, 0x4000, 64, proto, 0, src, dst))
    struct.pack_into(">H", ip, 10, _csum(bytes(ip)))
    if proto == TCP:
        # data offset 8 (32-byte header with NOP NOP timestamps option)
        l4 = struct.pack(">HHIIBBHHH", sport, dport, tcp_seq & MASK32, (tcp_seq * 7) & MASK32, 0x80, tcp_flags, 0xFFFF, 0, 0)
        l4 += b"\x01\x01\x08\x0a" + struct.pack(">II", tcp_seq >> 3 & MASK32, tcp_seq >> 5 & MASK32)
    elif proto == UDP:
        l4 = struct.pack(">HHHH", sport, dport, max(8, ip_len - 20), 0)
        if DNS_PORT in (sport, dport):
            l4 += dns_payload(ip_len - 28, is_response=sport == DNS_PORT, txid=psn & 0xFFFF)
        elif dport == ROCE_PORT:
            # BTH: opcode (default RC RDMA WRITE MIDDLE 0x07), MigReq, default P_Key, dest QP, PSN
            l4 += struct.pack(">BBHI", bth_op & 0xFF, 0x40, 0xFFFF, qp & 0xFFFFFF) + struct.pack(">I", psn & 0xFFFFFF)
    else:
        l4 = b""
    hdr = eth + bytes(ip) + l4
    frame = 14 + ip_len
    want = min(frame, snap)
    if len(hdr) < want:
        hdr += b"\0" * (want - len(hdr))
    return hdr[:want]


class SflowAgent:
    """One ToR switch's sFlow agent: samples, counters, sequence numbers, datagram packing."""

    def __init__(self, switch: Switch, cfg: SflowConfig, boot_ms: int, rng: np.random.Generator, node_of_port: dict):
        self.sw = switch
        self.cfg = cfg
        self.boot_ms = boot_ms
        self.rng = rng
        self.node_of_port = node_of_port  # if_index -> node name (access ports)
        self.seq = 0
        self.sample_seq: dict[int, int] = {}
        self.counter_seq: dict[int, int] = {}
        self.pool: dict[int, int] = {}
        self.ports = [p.if_index for p in switch.ports]
        self.nominal = {p.if_index: p.speed_bps for p in switch.ports}
        # counters: [in_octets, in_pkts, in_disc, in_err, out_octets, out_pkts, out_disc, out_err, fcs, align]
        self.ctr = {p: np.array([int(rng.integers(0, 1 << 40)), int(rng.integers(0, 1 << 31)), 0, 0,
                                 int(rng.integers(0, 1 << 40)), int(rng.integers(0, 1 << 31)), 0, 0, 0, 0], dtype=object)
                    for p in self.ports}  # fmt: skip
        n = max(1, len(self.ports))
        iv = int(cfg.counter_interval_s * 1000)
        self.poll_offset = {p: (i * iv) // n for i, p in enumerate(self.ports)}
        self.interval_ms = iv

    def chunk(self, t0, t1, start_ms, ingress, egress, extra, faults, local_macs: dict[int, bytes],
              transit=None) -> list[tuple[int, bytes]]:
        """Encode the chunk ``[t0, t1)`` (relative ms). Returns ``[(abs send ms, datagram)]``.

        ``ingress``/``egress``: ``(segs, if_index array)`` of segments entering/leaving this switch;
        the ingress ones are the sampled population. ``transit``: ``(segs, if_index array)`` entering on an
        uplink from another leaf (sampled there already): counted in the uplinks' in-counters only. ``extra``: per port dict of fault counter deltas
        (``in_err``, ``fcs``, ``out_disc``).
        """
        cfg = self.cfg
        events: list[tuple[int, int, int, object]] = []  # (t_rel, order, kind, payload)
        segs, in_if, out_if = ingress
        # ---- flow samples
        if len(segs):
            pk = segs["packets"]
            k = self.rng.binomial(pk, 1.0 / cfg.sampling_rate) if cfg.sampling_rate > 1 else pk.copy()
            idx = np.repeat(np.arange(len(segs)), k)
            if len(idx):
                ts = segs["t0"][idx] + (self.rng.random(len(idx)) * (segs["t1"][idx] - segs["t0"][idx])).astype(np.int64)
                which = (self.rng.random(len(idx)) * pk[idx]).astype(np.int64)
                last = segs["bytes"][idx] - (pk[idx] - 1) * segs["pkt_size"][idx]
                ip_len = np.where(which == pk[idx] - 1, last, segs["pkt_size"][idx])
                rnd = self.rng.integers(0, 1 << 32, size=len(idx), dtype=np.uint64)
                for j in range(len(idx)):
                    events.append((int(ts[j]), j, 0, (int(idx[j]), int(ip_len[j]), int(rnd[j]))))
            # sample pools advance by everything seen on the source in this chunk
            pool_add = {}
            for p in np.unique(in_if):
                pool_add[int(p)] = int(pk[in_if == p].sum())
        else:
            pool_add = {}
        # ---- counter deltas of this chunk
        delta = {p: [0] * 10 for p in self.ports}
        counted = [(segs, in_if, 0), (egress[0], egress[1], 4)] + ([(transit[0], transit[1], 0)] if transit else [])
        for (s, ifs, base) in counted:
            if len(s) == 0:
                continue
            octets = s["bytes"] + ETH_OVERHEAD * s["packets"]
            for p in np.unique(ifs):
                m = ifs == p
                d = delta.setdefault(int(p), [0] * 10)
                d[base] += int(octets[m].sum())
                d[base + 1] += int(s["packets"][m].sum())
        for p, ex in extra.items():
            d = delta.setdefault(p, [0] * 10)
            d[3] += ex.get("in_err", 0)
            d[8] += ex.get("fcs", 0)
            d[9] += ex.get("align", 0)
            d[6] += ex.get("out_disc", 0)
        # ---- counter polls
        for p in self.ports:
            off = self.poll_offset[p]
            k0 = -(-(t0 - off) // self.interval_ms)
            t = off + k0 * self.interval_ms
            while t < t1:
                events.append((t, -1, 1, p))
                t += self.interval_ms
        events.sort(key=lambda e: (e[0], e[2], e[1]))
        samples: list[tuple[int, bytes]] = []
        pool_seen = dict(self.pool)
        for t, _, kind, payload in events:
            if kind == 0:
                i, ip_len, rnd = payload
                s = segs[i]
                port = int(in_if[i])
                self.sample_seq[port] = self.sample_seq.get(port, 0) + 1
                frac = (t - t0) / max(1, t1 - t0)
                pool_seen[port] = self.pool.get(port, 0) + int(pool_add.get(port, 0) * frac)
                dst = int(s["dst"])
                hdr = packet_header(
                    int(s["src"]), dst, int(s["sport"]), int(s["dport"]), int(s["proto"]), ip_len,
                    int(s["tcp_flags"]), int(s["tos"]), int(s["qp"]), local_macs.get(dst, b"\x02\xfe\x00\x00\x00\x01"),
                    rnd, rnd >> 8, rnd & 0xFFFF, cfg.header_bytes, int(s["bth_op"]) or 0x07,
                )  # fmt: skip
                recs = [raw_header_record(ip_len + 18, 4, hdr), ext_switch_record(10, 0, 10, 0)]
                blob = flow_sample(self.sample_seq[port], port, cfg.sampling_rate, pool_seen[port], 0, port, int(out_if[i]), recs)
            else:
                port = payload
                frac = (t - t0) / max(1, t1 - t0)
                c = self.ctr[port]
                d = delta.get(port, [0] * 10)
                v = [int(c[x]) + int(d[x] * frac) for x in range(10)]
                self.counter_seq[port] = self.counter_seq.get(port, 0) + 1
                node = self.node_of_port.get(port)
                speed = faults.port_speed(node, t, self.nominal[port]) if node else self.nominal[port]
                status = 3 if not node or faults.oper_up(node, t) else 1  # admin up; oper up or down (link_flap)
                recs = [
                    generic_if_record(port, speed, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], status=status),
                    ethernet_record(alignment=v[9], fcs=v[8]),
                ]
                blob = counter_sample(self.counter_seq[port], port, recs)
            samples.append((t, blob))
        for p, d in delta.items():
            c = self.ctr.setdefault(p, np.zeros(10, dtype=object))
            for x in range(10):
                c[x] = int(c[x]) + d[x]
        for p, n in pool_add.items():
            self.pool[p] = self.pool.get(p, 0) + n
        return self._pack(samples, start_ms)

    def _pack(self, samples: list[tuple[int, bytes]], start_ms: int) -> list[tuple[int, bytes]]:
        out = []
        cur: list[bytes] = []
        size = DATAGRAM_HEADER_LEN
        last_t = 0
        for t, blob in samples:
            if cur and size + len(blob) > self.cfg.max_datagram_bytes:
                out.append(self._emit(cur, last_t, start_ms))
                cur, size = [], DATAGRAM_HEADER_LEN
            cur.append(blob)
            size += len(blob)
            last_t = t
        if cur:
            out.append(self._emit(cur, last_t, start_ms))
        return out

    def _emit(self, blobs: list[bytes], t_rel: int, start_ms: int) -> tuple[int, bytes]:
        self.seq += 1
        t_abs = start_ms + t_rel
        return t_abs, encode_datagram(self.sw.agent, self.sw.sub_agent_id, self.seq, t_abs - self.boot_ms, blobs)
