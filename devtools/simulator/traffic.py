"""Traffic model: workloads -> traffic segments, one time chunk at a time.

A *segment* is one 5-tuple sending ``bytes`` in ``packets`` packets of at most
``pkt_size`` IP bytes (the last packet carries the remainder) uniformly over
``[t0, t1)`` (ms relative to scenario start). Segments never cross a chunk
boundary. Fault effects are applied by :mod:`devtools.simulator.faults`.
Pure: no sockets, no clock; randomness comes from the generator passed in.
"""

from __future__ import annotations

import math

import numpy as np

from .model import Scenario, Workload, ip_int, stable_hash

TCP, UDP = 6, 17
ACK, PSH_ACK = 0x10, 0x18
ROCE_PORT, NFS_PORT, S3_PORT, DNS_PORT, SSH_PORT, METRICS_PORT, HTTPS_PORT, INFER_PORT = (
    4791, 2049, 9000, 53, 22, 9100, 443, 8000,
)
TCP_ACK_LEN = 52  # IPv4 20 + TCP 20 + timestamps option 12
ACK_RATIO = 0.25  # ACK packets per data packet (delayed / stretch ACKs)

SEG_DTYPE = np.dtype(
    [
        ("t0", "i8"),
        ("t1", "i8"),
        ("src", "u4"),
        ("dst", "u4"),
        ("sport", "u2"),
        ("dport", "u2"),
        ("proto", "u1"),
        ("tcp_flags", "u1"),
        ("tos", "u1"),
        ("pkt_size", "i4"),
        ("qp", "i4"),
        ("bytes", "i8"),
        ("packets", "i8"),
        ("bth_op", "i2"),  # RoCEv2 BTH opcode of the packets (0: RC RDMA WRITE MIDDLE, the collectives' data)
    ]
)


def finalize(segs: np.ndarray) -> np.ndarray:
    """Drop empty segments and set ``packets`` = ceil(bytes / pkt_size)."""
    segs = segs[segs["bytes"] > 0]
    segs["packets"] = -(-segs["bytes"] // segs["pkt_size"])
    return segs


class SegBuilder:
    """Collects segments for one chunk; rates are bytes per second."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def add(self, t0, t1, src, dst, sport, dport, proto, nbytes, pkt_size, flags=0, tos=0, qp=-1, op=0) -> None:
        nbytes = int(round(nbytes))
        if t1 <= t0 or nbytes < 1:
            return
        self.rows.append((t0, t1, src, dst, sport, dport, proto, flags, tos, pkt_size, qp, nbytes, 0, op))

    def rate(self, t0, t1, src, dst, sport, dport, proto, rate_bps, pkt_size, **kw) -> None:
        self.add(t0, t1, src, dst, sport, dport, proto, rate_bps * (t1 - t0) / 1000.0, pkt_size, **kw)

    def tcp_bulk(self, t0, t1, src, dst, sport, dport, nbytes, mtu, tos=0) -> None:
        """Data one way and (stretch) ACKs back."""
        self.add(t0, t1, src, dst, sport, dport, TCP, nbytes, mtu, PSH_ACK, tos)
        acks = math.ceil(nbytes / mtu * ACK_RATIO)
        self.add(t0, t1, dst, src, dport, sport, TCP, acks * TCP_ACK_LEN, TCP_ACK_LEN, ACK, tos)

    def array(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0, SEG_DTYPE)
        return finalize(np.array(self.rows, dtype=SEG_DTYPE))


def clip(a0: int, a1: int, t0: int, t1: int) -> tuple[int, int]:
    return max(a0, t0), min(a1, t1)


def eph_port(*key) -> int:
    """Stable ephemeral port in 32768..60999 for a key."""
    return 32768 + stable_hash(*key) % 28232


class TrafficModel:
    """Turns the scenario's workloads and background into segments per chunk."""

    def __init__(self, scen: Scenario, rng: np.random.Generator):
        self.scen = scen
        self.rng = rng
        self.ip = {n.name: ip_int(n.ip) for n in scen.cluster.nodes.values()}
        for e in scen.cluster.externals.values():
            self.ip.setdefault(e.name, ip_int(e.ip))
        self.mtu = scen.mtu
        self.roce_size = 20 + 8 + 12 + scen.roce_payload + 4  # IPv4 + UDP + BTH + payload + ICRC

    def segments(self, t0: int, t1: int, b: SegBuilder, mods) -> None:
        """Add the chunk's baseline traffic to ``b``; ``mods`` gives fault multipliers."""
        for w in self.scen.workloads:
            if w.kind == "training":
                self._training(w, t0, t1, b, mods)
            else:
                self._inference(w, t0, t1, b, mods)
        self._background(t0, t1, b)

    # ---------------------------------------------------------- training

    def _collective_send(self, w: Workload, a0, a1, src: str, dst: str, nbytes: float, b: SegBuilder,
                         mods=None) -> None:
        """``nbytes`` from src to dst; between rail-optimised nodes, split evenly over their common rails (rank r's
        traffic on rail r: NIC r to NIC r)."""
        if mods is not None:  # collectives_invisible: not on any sampled path (InfiniBand)
            nbytes *= mods.visible_factor(w.job, a0, a1)
        if nbytes <= 0 or a1 <= a0:
            return
        nodes = self.scen.cluster.nodes
        rails_s = {c.rail: c.ip for c in nodes[src].nics if c.rail >= 0}
        rails_d = {c.rail: c.ip for c in nodes[dst].nics if c.rail >= 0}
        common = sorted(set(rails_s) & set(rails_d))
        if common:
            for r in common:
                f = 1.0 if mods is None else mods.rail_factor(src, r, a0, a1) * mods.rail_factor(dst, r, a0, a1)
                share = nbytes * f / len(common)
                self._send(w, a0, a1, ip_int(rails_s[r]), ip_int(rails_d[r]), src, f"{dst}/{r}", share, b)
            return
        self._send(w, a0, a1, self.ip[src], self.ip[dst], src, dst, nbytes, b)

    def _send(self, w: Workload, a0, a1, s: int, d: int, src: str, dst: str, nbytes: float, b: SegBuilder) -> None:
        parts = []
        if w.transport in ("tcp", "both"):
            parts.append("tcp")
        if w.transport in ("roce", "both"):
            parts.append("roce")
        share = nbytes / len(parts) / w.channels
        for kind in parts:
            for ch in range(w.channels):
                if kind == "tcp":
                    b.tcp_bulk(a0, a1, s, d, eph_port(w.job, src, dst, ch), eph_port(w.job, "listen", dst), share, self.mtu)
                else:
                    sport = 49152 + stable_hash(w.job, src, dst, ch, "roce") % 16384
                    qp = stable_hash(w.job, dst, src, ch, "qp") % (1 << 24)
                    b.add(a0, a1, s, d, sport, ROCE_PORT, UDP, share, self.roce_size, 0, 0x68, qp)  # DSCP 26

    def _training(self, w: Workload, t0: int, t1: int, b: SegBuilder, mods) -> None:
        period = int(w.period_s * 1000)
        comp, comm = int(w.compute_s * 1000), int(w.comm_s * 1000)
        base = int(w.start_s * 1000)
        n = len(w.nodes)
        m = w.allreduce_mb * 1e6
        if t1 <= base:
            return
        k0 = max(0, (t0 - base) // period - 1)
        k1 = (t1 - base) // period + 1
        for k in range(k0, k1 + 1):
            s = base + k * period
            c0, c1 = clip(s + comp, s + comp + comm, t0, t1)
            if c1 > c0 and n > 1:
                frac = (c1 - c0) / comm
                if w.collective == "ring":
                    for i, src in enumerate(w.nodes):
                        dst = w.nodes[(i + 1) % n]
                        nb = 2 * (n - 1) / n * m * frac * mods.send_factor(w.job, src, c0, c1)
                        self._collective_send(w, c0, c1, src, dst, nb, b, mods)
                else:
                    half = s + comp + comm // 2
                    for phase, (p0, p1) in enumerate((clip(c0, c1, 0, half), clip(c0, c1, half, 1 << 62))):
                        if p1 <= p0:
                            continue
                        pf = (p1 - p0) / (comm / 2)
                        for i in range(1, n):
                            child, parent = w.nodes[i], w.nodes[(i - 1) // 2]
                            src, dst = (child, parent) if phase == 0 else (parent, child)
                            nb = m * pf * mods.send_factor(w.job, src, p0, p1)
                            self._collective_send(w, p0, p1, src, dst, nb, b, mods)
            if w.dataset and w.dataset.mbps_per_node > 0:
                d0, d1 = clip(s, s + comp, t0, t1)
                if d1 > d0:
                    st = w.dataset
                    rate = st.mbps_per_node * 1e6 / 8 * mods.storage_factor(st.storage, d0, d1)
                    port = NFS_PORT if st.protocol == "nfs" else S3_PORT
                    for node in w.nodes:
                        cport = 700 + stable_hash(node, st.storage) % 300 if port == NFS_PORT else eph_port(node, "s3")
                        # reads: storage -> node data, small requests back
                        b.tcp_bulk(d0, d1, self.ip[st.storage], self.ip[node], port, cport, rate * (d1 - d0) / 1000, self.mtu)
                        b.rate(d0, d1, self.ip[node], self.ip[st.storage], cport, port, TCP, rate * 0.004, 200, flags=PSH_ACK)
        if w.checkpoint and w.checkpoint.interval_s > 0:
            st = w.checkpoint
            iv, dur = int(st.interval_s * 1000), int(st.duration_s * 1000)
            port = NFS_PORT if st.protocol == "nfs" else S3_PORT
            j0 = max(1, (t0 - base - 4 * dur) // iv)
            for j in range(j0, (t1 - base) // iv + 1):
                c = base + j * iv
                slow = mods.storage_factor(st.storage, c, c + 1)
                real_dur = int(dur / max(slow, 1e-3))
                a0, a1 = clip(c, c + real_dur, t0, t1)
                if a1 <= a0:
                    continue
                nb_total = st.mb_per_node * 1e6
                for node in w.nodes:
                    cport = 700 + stable_hash(node, st.storage) % 300 if port == NFS_PORT else eph_port(node, "s3w", j)
                    nb = nb_total * (a1 - a0) / real_dur
                    b.tcp_bulk(a0, a1, self.ip[node], self.ip[st.storage], cport, port, nb, self.mtu)

    # ---------------------------------------------------------- inference

    def _inference(self, w: Workload, t0: int, t1: int, b: SegBuilder, mods) -> None:
        if not w.frontend or w.request_mbps <= 0 or t1 <= int(w.start_s * 1000):
            return
        fe = self.ip[w.frontend]
        weights = mods.replica_weights(w, t0, t1)
        total = w.request_mbps * 1e6 / 8
        for node, wt in zip(w.nodes, weights):
            if wt <= 0:
                continue
            for conn in range(4):
                sport = eph_port(w.job, w.frontend, node, conn)
                req = total * wt / 4 * (t1 - t0) / 1000
                b.add(t0, t1, fe, self.ip[node], sport, INFER_PORT, TCP, req, 600, PSH_ACK)
                b.add(t0, t1, self.ip[node], fe, INFER_PORT, sport, TCP, req * w.response_ratio, self.mtu, PSH_ACK)

    # ---------------------------------------------------------- background

    def _background(self, t0: int, t1: int, b: SegBuilder) -> None:
        bg = self.scen.background
        nodes = self.scen.cluster.nodes
        dur = (t1 - t0) / 1000
        for name, node in nodes.items():
            ip = self.ip[name]
            if bg.dns and name != bg.dns:
                q = int(self.rng.poisson(bg.dns_qps_per_node * dur))
                if q:
                    sport = 32768 + int(self.rng.integers(0, 28000))
                    b.add(t0, t1, ip, self.ip[bg.dns], sport, DNS_PORT, UDP, q * 72, 72)
                    b.add(t0, t1, self.ip[bg.dns], ip, DNS_PORT, sport, UDP, q * 136, 136)
            if bg.ssh_from and name != bg.ssh_from:
                sport = eph_port("ssh", name)
                b.add(t0, t1, self.ip[bg.ssh_from], ip, sport, SSH_PORT, TCP, 1200 * dur, 120, PSH_ACK, 0x10)
                b.add(t0, t1, ip, self.ip[bg.ssh_from], SSH_PORT, sport, TCP, 2400 * dur, 240, PSH_ACK, 0x10)
            if bg.metrics_from and name != bg.metrics_from:
                iv = int(bg.scrape_interval_s * 1000)
                off = stable_hash("scrape", name) % iv
                k = (t0 - off) // iv + 1
                at = off + k * iv
                if t0 <= at < t1:
                    sport = eph_port("scrape", name, k)
                    e = min(at + 50, t1)
                    b.add(at, e, self.ip[bg.metrics_from], ip, sport, METRICS_PORT, TCP, 320, 320, PSH_ACK)
                    b.add(at, e, ip, self.ip[bg.metrics_from], METRICS_PORT, sport, TCP, 48000, self.mtu, PSH_ACK)
            if bg.egress_to and node.group == "gpu" and bg.egress_mbps_per_node > 0:
                sport = eph_port("egress", name)
                b.tcp_bulk(t0, t1, ip, self.ip[bg.egress_to], sport, HTTPS_PORT, bg.egress_mbps_per_node * 1e6 / 8 * dur, self.mtu)
