"""Fault injection: how each labelled fault changes traffic, counters or exports.

:class:`FaultEffects` answers the generator's questions for the faults active between their
``start_s`` and ``end_s``: send and storage factors, replica weights, port speeds and CRC errors,
extra segments (incast, security faults, SYN storms, unregistered hosts), link caps, ECN/CNP
marking, export loss and clock skew; :func:`fault_labels` makes the truth labels. Each fault kind's
parameters, effect and label: docs/simulator.md, "Faults (and the truth label each produces)".
"""

from __future__ import annotations

import math

import numpy as np

from .model import Fault, Scenario, Workload, ip_int, parse_speed, stable_hash
from .traffic import ROCE_PORT, TCP, UDP, SegBuilder, eph_port


SYN, RST_ACK = 0x02, 0x14
SYN_SIZE, RST_SIZE = 60, 40  # IPv4 + TCP with the SYN options; IPv4 + bare TCP
CNP_SIZE = 20 + 8 + 12 + 16 + 4  # IPv4 + UDP + BTH + 16 reserved bytes + ICRC


class FaultEffects:
    """Answers the traffic model's questions about fault multipliers for a time range."""

    def __init__(self, scen: Scenario):
        self.scen = scen
        self.by_kind: dict[str, list[Fault]] = {}
        for f in scen.faults:
            self.by_kind.setdefault(f.kind, []).append(f)

    def _frac(self, f: Fault, a0: int, a1: int) -> float:
        return f.overlap_ms(a0, a1) / max(1, a1 - a0)

    def send_factor(self, job: str, node: str, a0: int, a1: int) -> float:
        """Multiplier for a node's collective sends (straggler)."""
        factor = 1.0
        for f in self.by_kind.get("straggler", ()):
            if f.params["node"] == node and f.params.get("job", job) == job:
                ov = self._frac(f, a0, a1)
                factor *= 1 - ov + ov * float(f.params.get("fraction", 0.3))
        return factor

    def visible_factor(self, job: str, a0: int, a1: int) -> float:
        """Share of a job's collective bytes the exporters see (collectives_invisible: its collectives run where
        no exporter samples, e.g. InfiniBand)."""
        factor = 1.0
        for f in self.by_kind.get("collectives_invisible", ()):
            if f.params["job"] == job:
                factor *= 1 - self._frac(f, a0, a1)
        return factor

    def storage_factor(self, storage: str, a0: int, a1: int) -> float:
        factor = 1.0
        for f in self.by_kind.get("storage_slowdown", ()):
            if f.params["storage"] == storage:
                ov = self._frac(f, a0, a1)
                factor *= 1 - ov + ov * float(f.params.get("factor", 0.2))
        return factor

    def replica_weights(self, w: Workload, a0: int, a1: int) -> list[float]:
        n = len(w.nodes)
        weights = np.full(n, 1.0 / n)
        for f in self.by_kind.get("lb_skew", ()):
            if f.params["job"] == w.job and f.active(a0, a1):
                ov = self._frac(f, a0, a1)
                share = float(f.params.get("share", 0.7))
                skew = np.full(n, (1 - share) / max(1, n - 1))
                skew[w.nodes.index(f.params["replica"])] = share
                weights = (1 - ov) * weights + ov * skew
        return list(weights)

    def rail_factor(self, node: str, rail: int, a0: int, a1: int) -> float:
        """Multiplier for traffic from or to a node's NIC on ``rail`` (rail_degraded)."""
        factor = 1.0
        for f in self.by_kind.get("rail_degraded", ()):
            if f.params["node"] == node and int(f.params["rail"]) == rail:
                ov = self._frac(f, a0, a1)
                factor *= 1 - ov + ov * float(f.params.get("fraction", 0.3))
        return factor

    def polarised(self, switch: str, t0: int, t1: int) -> tuple[int, float] | None:
        """(hot uplink port or -1 for the leaf's first, share of the flows hashed onto it) of an ``ecmp_polarised``
        fault on leaf ``switch`` active over most of ``[t0, t1)``; None without one."""
        for f in self.by_kind.get("ecmp_polarised", ()):
            if f.params["switch"] == switch and self._frac(f, t0, t1) >= 0.5:
                ups = self.scen.cluster.fabric.uplinks[switch]
                return int(f.params.get("uplink", ups[0][0])), float(f.params.get("share", 1.0))
        return None

    def port_speed(self, node: str, t: int, nominal: int) -> int:
        for f in self.by_kind.get("link_downgrade", ()):
            if f.params["node"] == node and f.start_ms <= t < f.end_ms:
                return parse_speed(f.params.get("speed", "1G"))
        return nominal

    def crc_errors(self, node: str, a0: int, a1: int) -> float:
        total = 0.0
        for f in self.by_kind.get("link_downgrade", ()):
            if f.params["node"] == node:
                total += float(f.params.get("crc_errors_per_s", 100)) * f.overlap_ms(a0, a1) / 1000
        return total

    # ------------------------------------------------------------ additive traffic

    def add_segments(self, t0: int, t1: int, b: SegBuilder, mtu: int) -> None:
        scen = self.scen
        for f in scen.faults:
            a0, a1 = max(t0, f.start_ms), min(t1, f.end_ms)
            if a1 <= a0:
                continue
            p = f.params
            if f.kind == "incast":
                self._incast(f, a0, a1, b, mtu)
            elif f.kind == "syn_storm":
                node = ip_int(scen.cluster.nodes[p["node"]].ip)
                targets = list(p["targets"])
                per_target = float(p.get("syn_per_s", 20_000)) / len(targets) * (a1 - a0) / 1000
                refused = float(p.get("rst_fraction", 0.9))
                dport = int(p.get("dport", 29500))
                for i, tgt in enumerate(targets):
                    d = ip_int(scen.cluster.nodes[tgt].ip)
                    sport = eph_port("syn_storm", p["node"], tgt, a0)
                    b.add(a0, a1, node, d, sport, dport, TCP, per_target * SYN_SIZE, SYN_SIZE, SYN)
                    b.add(a0, a1, d, node, dport, sport, TCP, per_target * refused * RST_SIZE, RST_SIZE, RST_ACK)
            elif f.kind in ("segmentation_violation", "exfiltration", "off_hours_transfer", "unregistered_host"):
                src = ip_int(p["ip"]) if f.kind == "unregistered_host" else ip_int(scen.resolve_ip(p["src"]))
                dst = ip_int(scen.resolve_ip(p["dst"]))
                rate = float(p.get("mbps", 50)) * 1e6 / 8
                dport = int(p.get("dport", 443))
                proto = {"tcp": TCP, "udp": UDP}[p.get("proto", "tcp")]
                sport = eph_port(f.kind, p.get("src", p.get("ip")), dport)
                nbytes = rate * (a1 - a0) / 1000
                if proto == TCP:
                    b.tcp_bulk(a0, a1, src, dst, sport, dport, nbytes, mtu)
                else:
                    b.add(a0, a1, src, dst, sport, dport, UDP, nbytes, min(mtu, 512))

    def _incast(self, f: Fault, a0: int, a1: int, b: SegBuilder, mtu: int) -> None:
        """Synchronized bursts into the destination (docs/simulator.md, ``incast``): TCP or RoCEv2, with an ECN
        codepoint or none, a part of the packets marked CE by the destination's queue and CNPs answering the
        marked RoCEv2 packets; with ``dcqcn`` the senders hold the aggregate at ``fill`` x the port's capacity."""
        scen, p = self.scen, f.params
        period, burst = int(p.get("period_ms", 1000)), int(p.get("burst_ms", 200))
        sources = list(p["sources"])
        dst = scen.cluster.nodes[p["destination"]]
        rate = float(p.get("gbps_per_source", 3.0)) * 1e9 / 8
        if p.get("dcqcn"):
            rate = min(rate, float(p.get("fill", 0.95)) * dst.capacity_bps / 8 / len(sources))
        roce = p.get("transport", "tcp") == "roce"
        ecn = 2 if p.get("ecn", "ect" if roce else "none") == "ect" else 0  # ECT(0)
        tos = (0x68 if roce else 0) | ecn  # RoCEv2 in DSCP 26, as the training workloads
        ce, cnp_ratio = float(p.get("ce_fraction", 0.0)), float(p.get("cnp_ratio", 0.0))
        dport = int(p.get("dport", 50051))
        d = ip_int(dst.ip)
        roce_size = 20 + 8 + 12 + scen.roce_payload + 4
        k0 = (a0 - f.start_ms) // period
        for k in range(k0, (a1 - f.start_ms) // period + 1):
            b0, b1 = max(a0, f.start_ms + k * period), min(a1, f.start_ms + k * period + burst)
            if b1 <= b0:
                continue
            for src in sources:
                s = ip_int(scen.cluster.nodes[src].ip)
                sport = eph_port("incast", src, k)
                nbytes = rate * (b1 - b0) / 1000
                for part, t in ((1 - ce, tos), (ce, tos | 3)):
                    if part <= 0:
                        continue
                    if roce:
                        b.add(b0, b1, s, d, sport, ROCE_PORT, UDP, nbytes * part, roce_size, 0, t,
                              stable_hash("incast-qp", src) % (1 << 24))
                    else:
                        b.tcp_bulk(b0, b1, s, d, sport, dport, nbytes * part, mtu, tos=t)
                if roce and ce > 0 and cnp_ratio > 0:  # the destination (notification point) answers the marks
                    marked = math.ceil(nbytes * ce / roce_size)
                    b.add(b0, b1, d, s, sport, ROCE_PORT, UDP, math.ceil(marked * cnp_ratio) * CNP_SIZE, CNP_SIZE,
                          0, 0xC0, stable_hash("incast-qp", src) % (1 << 24), 0x81)

    def oper_up(self, node: str, t: int) -> bool:
        """False while a ``link_flap`` fault holds the node's link down at ``t`` (ms since the start)."""
        for f in self.by_kind.get("link_flap", ()):
            if f.params["node"] == node and f.start_ms <= t < f.end_ms and self._flap_down(f, t):
                return False
        return True

    @staticmethod
    def _flap_down(f: Fault, t: int) -> bool:
        period, down = int(float(f.params.get("period_s", 40)) * 1000), int(float(f.params.get("down_s", 12)) * 1000)
        return (t - f.start_ms) % period < down

    def cap_links(self, segs: np.ndarray, t0: int, t1: int, node_ip: dict[str, int]) -> np.ndarray:
        """Scale traffic to/from nodes whose link is downgraded so it fits the lower speed."""
        for f in self.by_kind.get("link_downgrade", ()):
            if not f.active(t0, t1) or len(segs) == 0:
                continue
            node = f.params["node"]
            cap_bps = parse_speed(f.params.get("speed", "1G")) / 8
            ip = node_ip[node]
            slots = np.arange(t0, t1, 100)
            for col in ("src", "dst"):
                m = (segs[col] == ip) & (segs["t0"] < f.end_ms) & (segs["t1"] > f.start_ms)
                if not m.any():
                    continue
                s = segs[m]
                rate = s["bytes"] * 1000.0 / (s["t1"] - s["t0"])
                ov = np.clip(np.minimum(s["t1"][:, None], slots[None, :] + 100) - np.maximum(s["t0"][:, None], slots[None, :]), 0, 100)
                peak = float((rate[:, None] * (ov > 0)).sum(axis=0).max())
                if peak > cap_bps:
                    segs["bytes"][m] = np.rint(s["bytes"] * (cap_bps / peak)).astype(np.int64)
        for f in self.by_kind.get("link_flap", ()):  # no traffic to or from the node while its link is down
            if not f.active(t0, t1) or len(segs) == 0:
                continue
            ip = node_ip[f.params["node"]]
            m = np.flatnonzero((segs["src"] == ip) | (segs["dst"] == ip))
            for i in m.tolist():
                s0, s1 = int(segs["t0"][i]), int(segs["t1"][i])
                up = sum(1 for t in range(s0, s1, 10) if not (f.start_ms <= t < f.end_ms and self._flap_down(f, t)))
                n = len(range(s0, s1, 10))
                if up < n:
                    segs["bytes"][i] = int(round(segs["bytes"][i] * up / n))
        return segs

    def incast_excess_packets(self, node: str, a0: int, a1: int, segs: np.ndarray, node_ip: int, cap_bps: int, mtu: int) -> int:
        """Packets dropped at the destination's port because incast bursts exceed its capacity."""
        total = 0
        for f in self.by_kind.get("incast", ()):
            if f.params["destination"] != node or not f.active(a0, a1) or f.params.get("dcqcn"):
                continue  # with dcqcn the senders keep the queue below the drop point
            m = segs["dst"] == node_ip
            sent = int(segs["bytes"][m].sum())
            burst_ms = int(f.params.get("burst_ms", 200))
            period = int(f.params.get("period_ms", 1000))
            bursts = max(1, f.overlap_ms(a0, a1) // period)
            capacity = cap_bps / 8 * burst_ms / 1000 * bursts
            total += max(0, int((sent - capacity) / mtu))
        return total

    def mark_congestion(self, segs: np.ndarray, t0: int, t1: int, node_ip: dict[str, int]) -> np.ndarray:
        """``congestion`` faults: split off the CE-marked part of the job's traffic to the congested receivers
        and add the CNPs those receivers send back for the marked RoCEv2 packets."""
        extra = []
        for f in self.by_kind.get("congestion", ()):
            if not f.active(t0, t1) or len(segs) == 0:
                continue
            p = f.params
            job_ips = np.array([node_ip[n] for n in self.scen.cluster.jobs[p["job"]]], dtype=np.uint32)
            recv = np.array([node_ip[n] for n in p.get("nodes") or self.scen.cluster.jobs[p["job"]]], dtype=np.uint32)
            frac = float(p.get("ce_fraction", 0.1)) * self._frac(f, t0, t1)
            m = np.flatnonzero(np.isin(segs["src"], job_ips) & np.isin(segs["dst"], recv) & ((segs["tos"] & 3) != 3)
                               & (segs["bth_op"] == 0))
            if not len(m) or frac <= 0:
                continue
            marked = segs[m].copy()
            marked["bytes"] = np.rint(marked["bytes"] * frac).astype(np.int64)
            segs["bytes"][m] -= marked["bytes"]
            marked["tos"] |= 3
            extra.append(marked)
            roce = marked[(marked["dport"] == ROCE_PORT) & (marked["proto"] == UDP)]
            if len(roce):
                cnp = roce.copy()
                pkts = -(-roce["bytes"] // np.maximum(roce["pkt_size"], 1))
                cnp["src"], cnp["dst"] = roce["dst"], roce["src"]
                cnp["pkt_size"], cnp["tos"], cnp["bth_op"], cnp["tcp_flags"] = CNP_SIZE, 0xC0, 0x81, 0
                cnp["bytes"] = np.rint(pkts * float(p.get("cnp_ratio", 0.2))).astype(np.int64) * CNP_SIZE
                extra.append(cnp)
        if not extra:
            return segs
        return np.concatenate([segs, *extra])

    def loss_fraction(self, exporter: str, t: int) -> float:
        for f in self.by_kind.get("exporter_loss", ()):
            if f.params["exporter"] == exporter and f.start_ms <= t < f.end_ms:
                return float(f.params.get("fraction", 0.2))
        return 0.0

    def skew_ms(self, exporter: str, t: int) -> int:
        for f in self.by_kind.get("clock_skew", ()):
            if f.params["exporter"] == exporter and f.start_ms <= t < f.end_ms:
                return int(float(f.params.get("skew_s", 30)) * 1000)
        return 0


def fault_labels(scen: Scenario, start_ms: int, duration_ms: int) -> list[dict]:
    """Ground-truth label per fault: kind, absolute start/end ms, entities, parameters."""
    out = []
    nodes = scen.cluster.nodes
    for f in scen.faults:
        if f.start_ms >= duration_ms:
            continue
        p = dict(f.params)
        ent: dict = {}
        if f.kind == "straggler":
            ent = {"node": p["node"], "job": p.get("job")}
        elif f.kind in ("link_downgrade", "link_flap"):
            n = nodes[p["node"]]
            ent = {"node": n.name, "switch": n.switch, "if_index": n.if_index}
        elif f.kind == "incast":
            n = nodes[p["destination"]]
            ent = {"destination": n.name, "sources": list(p["sources"]), "switch": n.switch, "if_index": n.if_index}
        elif f.kind == "lb_skew":
            ent = {"job": p["job"], "node": p["replica"]}
        elif f.kind == "storage_slowdown":
            # a link fault on the storage node's own port during the slowdown: the network is (also) to blame
            net = any(g.kind == "link_downgrade" and g.params.get("node") == p["storage"]
                      and g.start_ms < f.end_ms and f.start_ms < g.end_ms for g in scen.faults)
            ent = {"node": p["storage"], "network_fault": net}
        elif f.kind in ("segmentation_violation", "exfiltration", "off_hours_transfer"):
            ent = {"src": p["src"], "dst": p["dst"], "src_ip": scen.resolve_ip(p["src"]), "dst_ip": scen.resolve_ip(p["dst"])}
        elif f.kind == "unregistered_host":
            ent = {"src": p["ip"], "dst": p["dst"], "switch": p["switch"], "if_index": int(p["if_index"])}
        elif f.kind in ("exporter_loss", "clock_skew"):
            ent = {"exporter": p["exporter"]}
        elif f.kind == "congestion":
            recv = list(p.get("nodes") or scen.cluster.jobs[p["job"]])
            ent = {"job": p["job"], "nodes": recv}
        elif f.kind == "syn_storm":
            n = nodes[p["node"]]
            ent = {"node": n.name, "targets": list(p["targets"]), "switch": n.switch, "if_index": n.if_index}
        elif f.kind == "ecmp_polarised":
            ups = scen.cluster.fabric.uplinks[p["switch"]]
            port = int(p.get("uplink", ups[0][0]))
            ent = {"switch": p["switch"], "uplink": f"if{port}", "spine": next(s for q, s, _, _ in ups if q == port)}
        elif f.kind == "rail_degraded":
            nic = next(c for c in nodes[p["node"]].nics if c.rail == int(p["rail"]))
            ent = {"node": p["node"], "nic": nic.name, "rail": nic.rail, "switch": nic.switch, "if_index": nic.if_index}
        elif f.kind in ("placement_spread", "collectives_invisible"):
            ent = {"job": p["job"], "nodes": list(scen.cluster.jobs[p["job"]])}
        out.append(
            {
                "type": "fault",
                "kind": f.kind,
                "start_ms": start_ms + f.start_ms,
                "end_ms": start_ms + min(f.end_ms, duration_ms),
                "entities": ent,
                "params": p,
                "diagnosis": expected_diagnosis(scen, f),
            }
        )
    return out


def expected_diagnosis(scen: Scenario, f: Fault) -> str | None:
    """The bottleneck class the injected fault physically is (None: no class applies, e.g. a policy fault or
    ECN marks on TCP, whose reaction no flow shows). Derived from what the simulator does, not from the
    product's rules: drops happen when the bursts exceed the port (and no DCQCN holds them back), marks
    and CNPs when the fault sets them. docs/simulator.md, "Faults"."""
    p = f.params
    if f.kind in ("link_downgrade", "link_flap"):
        return "physical_link_fault"
    if f.kind == "straggler":
        link = any(g.kind in ("link_downgrade", "link_flap") and g.params.get("node") == p["node"]
                   and g.start_ms < f.end_ms and f.start_ms < g.end_ms for g in scen.faults)
        return "physical_link_fault" if link else "host_not_network"
    if f.kind == "incast":
        dst = scen.cluster.nodes[p["destination"]]
        offered = float(p.get("gbps_per_source", 3.0)) * 1e9 * len(p["sources"])
        roce = p.get("transport", "tcp") == "roce"
        ect = p.get("ecn", "ect" if roce else "none") == "ect"
        ce, cnp = float(p.get("ce_fraction", 0.0)), float(p.get("cnp_ratio", 0.0))
        drops = offered > dst.capacity_bps and not p.get("dcqcn")
        if roce and ce > 0 and cnp == 0:
            return "congestion_control_not_reacting"  # marks, no notification back
        if drops:
            return "congestion_control_not_reacting" if ect and ce == 0 else "switch_buffer_microburst"
        return "congestion_handled_by_dcqcn" if roce and ce > 0 and cnp > 0 else None
    if f.kind == "congestion":
        transport = next((w.transport for w in scen.workloads if w.job == p["job"]), "tcp")
        if transport not in ("roce", "both"):
            return None
        return "congestion_handled_by_dcqcn" if float(p.get("cnp_ratio", 0.2)) > 0 else "congestion_control_not_reacting"
    return None
