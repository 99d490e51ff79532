"""Simulation engine: scenario -> time-ordered export datagrams, plus ground truth. No sockets.

Time advances in 1 s chunks. Per chunk: workload traffic and fault traffic become
segments, link caps apply, truth counts them, every ToR's sFlow agent samples and
polls counters, and every NetFlow v9 / IPFIX exporter updates its flow cache and
exports what its timeouts make due (at the end of the chunk). Datagrams come out
sorted by event time; exporter loss drops some after their sequence numbers were
taken. Same scenario + seed + start -> byte-identical datagrams and truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from .exporters.base import TemplateExporter
from .exporters.ipfix import IpfixExporter
from .exporters.netflow9 import Netflow9Exporter
from .exporters.sflow import SflowAgent, mac_for
from .fabric import Ecmp
from .faults import FaultEffects
from .marks import chunk_marks
from .model import Scenario, find_scenario, ip_int, load_scenario, stable_hash
from .traffic import SegBuilder, TrafficModel, finalize
from .truth import TruthRecorder

CHUNK_MS = 1000
KIND_ORDER = {"sflow": 0, "netflow9": 1, "ipfix": 2, "marks": 3}


class SimDatagram(tuple):
    """``(send_time_ms, target_kind, datagram)``; ``.exporter`` names the switch or flow exporter."""

    def __new__(cls, send_time_ms: int, target_kind: str, data: bytes, exporter: str = ""):
        self = super().__new__(cls, (send_time_ms, target_kind, data))
        self.exporter = exporter
        return self

    @property
    def send_time_ms(self) -> int:
        return self[0]

    @property
    def target_kind(self) -> str:
        return self[1]

    @property
    def data(self) -> bytes:
        return self[2]


def _rng(seed: int, *name) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, stable_hash(*name)])


class Simulation:
    """One run of a scenario. Iterate :meth:`run`; read :attr:`truth` afterwards."""

    def __init__(
        self,
        scenario: Scenario | str | Path,
        seed: int | None = None,
        start_ms: int | None = None,
        duration_s: float | None = None,
        kinds: set[str] | None = None,
    ):
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(find_scenario(str(scenario)))
        self.scen = scen = scenario
        self.seed = scen.seed if seed is None else int(seed)
        self.start_ms = (scen.start_ms if start_ms is None else int(start_ms)) // 1000 * 1000
        self.duration_ms = int((scen.duration_s if duration_s is None else duration_s) * 1000)
        # "marks" (the training jobs' step marks and the scenario's changes) only when asked for: the export kinds
        # are what the decoders take
        self.kinds = {"sflow", "netflow9", "ipfix"} if kinds is None else set(kinds)
        window_ms = int(scen.window_s * 1000)
        if window_ms <= 0 or window_ms % CHUNK_MS:
            raise ValueError("window_s must be a positive whole number of seconds")
        self.truth = TruthRecorder(scen, self.seed, self.start_ms, self.duration_ms, window_ms)
        self.effects = FaultEffects(scen)
        self.model = TrafficModel(scen, _rng(self.seed, "traffic"))
        cl = scen.cluster
        self.node_ip = {n.name: ip_int(n.ip) for n in cl.nodes.values()}
        self.sw_names = list(cl.switches)
        # ip -> (switch index, if_index)
        self.attach: dict[int, tuple[int, int]] = {}
        for ip, sw, if_index in cl.attachments():
            self.attach[ip_int(ip)] = (self.sw_names.index(sw), if_index)
        for f in scen.faults:
            if f.kind == "unregistered_host":
                self.attach[ip_int(f.params["ip"])] = (self.sw_names.index(f.params["switch"]), int(f.params["if_index"]))
        self.uplink_if = [cl.switches[s].uplink.if_index for s in self.sw_names]
        self.agents: list[SflowAgent] = []
        if scen.sflow.enabled and "sflow" in self.kinds:
            for s in self.sw_names:
                sw = cl.switches[s]
                boot = self.start_ms - int(_rng(self.seed, "boot", s).integers(3_600_000, 864_000_000))
                node_of_port = {p.if_index: p.node for p in sw.ports if p.node}
                self.agents.append(SflowAgent(sw, scen.sflow, boot, _rng(self.seed, "sflow", s), node_of_port))
        self.local_macs = [
            {ip_int(ip): mac_for(ip_int(ip)) for ip, sw, _ in cl.attachments() if sw == s} for s in self.sw_names
        ]
        self.ecmp = Ecmp(cl.fabric, self.sw_names, self.effects) if cl.fabric.uplinks else None
        self.flow_exporters: list[TemplateExporter] = []
        for fe in scen.flow_exporters:
            if fe.protocol not in self.kinds:
                continue
            boot = self.start_ms - int(_rng(self.seed, "boot", fe.name).integers(3_600_000, 864_000_000))
            cls = Netflow9Exporter if fe.protocol == "netflow9" else IpfixExporter
            self.flow_exporters.append(cls(fe, boot, _rng(self.seed, "flow", fe.name)))
        self.loss_rng = {name: _rng(self.seed, "loss", name) for name in self.sw_names + [fe.name for fe in scen.flow_exporters]}
        self.rack_of = {ip_int(ip): n.rack for n in cl.nodes.values() for ip in n.ips}
        self.in_cluster = self._cluster_matcher()

    def _cluster_matcher(self):
        import ipaddress

        nets = [ipaddress.ip_network(c) for c in self.scen.cluster.cluster_ranges]

        def inside(ips: np.ndarray) -> np.ndarray:
            out = np.zeros(len(ips), bool)
            for n in nets:
                if n.version == 4:
                    out |= (ips & np.uint32(int(n.netmask))) == np.uint32(int(n.network_address))
            return out

        return inside

    # ------------------------------------------------------------------ chunk

    def _segments(self, t0: int, t1: int) -> np.ndarray:
        b = SegBuilder()
        self.model.segments(t0, t1, b, self.effects)
        self.effects.add_segments(t0, t1, b, self.scen.mtu)
        segs = b.array()
        segs = self.effects.cap_links(segs, t0, t1, self.node_ip)
        segs = self.effects.mark_congestion(segs, t0, t1, self.node_ip)
        return finalize(segs)

    def _where(self, ips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sw = np.full(len(ips), -1, np.int64)
        port = np.zeros(len(ips), np.int64)
        for i, ip in enumerate(ips.tolist()):
            a = self.attach.get(ip)
            if a:
                sw[i], port[i] = a
        return sw, port

    def _chunk(self, t0: int, t1: int, last: bool) -> list[tuple]:
        segs = self._segments(t0, t1)
        self.truth.add(segs)
        ssw, sif = self._where(segs["src"])
        dsw, dif = self._where(segs["dst"])
        # fabric: the uplink each leaf-to-leaf segment leaves its leaf on and enters the other on (ECMP)
        up_src, up_dst = self.ecmp.route(segs, ssw, dsw, t0, t1) if self.ecmp else (None, None)
        out: list[tuple] = []
        for ai, agent in enumerate(self.agents):
            x = self.sw_names.index(agent.sw.name)
            up = self.uplink_if[x]
            up_out = up if up_src is None else np.where(up_src >= 0, up_src, up)
            ing = (ssw == x) | ((dsw == x) & (ssw < 0))
            in_if = np.where(ssw == x, sif, up)[ing]
            out_if = np.where(dsw == x, dif, up_out)[ing]
            eg = (dsw == x) | ((ssw == x) & (dsw != x))
            eg_if = np.where(dsw == x, dif, up_out)[eg]
            transit = None
            if up_dst is not None:  # arriving from another leaf: counted on the uplink it came in on (not sampled)
                tr = (dsw == x) & (up_dst >= 0)
                transit = (segs[tr], up_dst[tr])
            extra = self._counter_faults(agent, t0, t1, segs)
            for t, data in agent.chunk(t0, t1, self.start_ms, (segs[ing], in_if, out_if), (segs[eg], eg_if), extra, self.effects,
                                       self.local_macs[x], transit):  # fmt: skip
                out.append((t, 0, ai, "sflow", data, agent.sw.name))
        for ei, exp in enumerate(self.flow_exporters):
            fe = exp.cfg
            m = self._observes(fe, segs, ssw, dsw)
            in_if = np.where(ssw >= 0, sif, np.where(dsw >= 0, np.take(self.uplink_if + [0], dsw), 0))
            out_if = np.where(dsw >= 0, dif, np.where(ssw >= 0, np.take(self.uplink_if + [0], ssw), 0))
            exp.cache.add(segs[m], in_if[m], out_if[m])
            skew = self.effects.skew_ms(fe.name, t1 - 1)
            for t, data in exp.export(t1, self.start_ms, skew, flush=last):
                out.append((t, 1 + ei, 0, fe.protocol, data, fe.name))
        if "marks" in self.kinds:
            for t, data, node in chunk_marks(self.scen, self.start_ms, t0, t1, self.effects):
                out.append((t, 1 + len(self.flow_exporters), 0, "marks", data, node))
        out.sort(key=lambda r: (r[0], r[1], r[2]))
        return out

    def _observes(self, fe, segs, ssw, dsw) -> np.ndarray:
        if fe.observe == "all":
            return np.ones(len(segs), bool)
        if fe.observe == "external":
            return ~(self.in_cluster(segs["src"]) & self.in_cluster(segs["dst"]))
        if fe.observe == "nodes":
            ips = np.array([self.node_ip[n] for n in fe.nodes], np.uint32)
            return np.isin(segs["src"], ips) | np.isin(segs["dst"], ips)
        # inter_rack: endpoints in different racks, or one end outside the inventory
        sr = np.array([self.rack_of.get(ip, "") for ip in segs["src"].tolist()], object)
        dr = np.array([self.rack_of.get(ip, "") for ip in segs["dst"].tolist()], object)
        return (sr != dr) | (sr == "")

    def _counter_faults(self, agent: SflowAgent, t0: int, t1: int, segs: np.ndarray) -> dict:
        extra: dict[int, dict] = {}
        for port, node in agent.node_of_port.items():
            crc = self.effects.crc_errors(node, t0, t1)
            if crc:
                n = int(crc)
                extra[port] = {"in_err": n, "fcs": n, "align": n // 10}
            n = self.scen.cluster.nodes[node]
            drops = self.effects.incast_excess_packets(node, t0, t1, segs, self.node_ip[node], n.capacity_bps, self.scen.mtu)
            if drops:
                extra.setdefault(port, {})["out_disc"] = drops
        return extra

    # ------------------------------------------------------------------ run

    def run(self, max_datagrams: int | None = None) -> Iterator[SimDatagram]:
        """Datagrams in event-time order; dropped ones (exporter_loss) never appear."""
        emitted = 0
        for t0 in range(0, self.duration_ms, CHUNK_MS):
            t1 = min(t0 + CHUNK_MS, self.duration_ms)
            for t_abs, _, _, kind, data, name in self._chunk(t0, t1, t1 >= self.duration_ms):
                if kind == "marks":  # not exported telemetry: no loss, not in the truth's datagram counts
                    yield SimDatagram(t_abs, kind, data, name)
                    emitted += 1
                    if max_datagrams is not None and emitted >= max_datagrams:
                        return
                    continue
                frac = self.effects.loss_fraction(name, t_abs - self.start_ms)
                dropped = bool(frac) and self.loss_rng[name].random() < frac
                self.truth.count_datagram(name, kind, dropped)
                if dropped:
                    continue
                yield SimDatagram(t_abs, kind, data, name)
                emitted += 1
                if max_datagrams is not None and emitted >= max_datagrams:
                    return


def generate(
    scenario: Scenario | str | Path,
    seed: int | None = None,
    *,
    start_ms: int | None = None,
    duration_s: float | None = None,
    max_datagrams: int | None = None,
    kinds: set[str] | None = None,
    truth: list | None = None,
) -> Iterator[SimDatagram]:
    """Pure generator of ``(send_time_ms, target_kind, datagram_bytes)`` for a scenario.

    ``send_time_ms`` is the event time in unix ms (scenario start + offset).
    ``target_kind`` is ``sflow``, ``netflow9`` or ``ipfix`` (and ``marks`` when ``kinds`` names it: JSON mark
    lines, devtools/simulator/marks.py). Pass a list as ``truth``
    to receive the run's :class:`TruthRecorder` (appended before the first datagram).
    """
    sim = Simulation(scenario, seed=seed, start_ms=start_ms, duration_s=duration_s, kinds=kinds)
    if truth is not None:
        truth.append(sim.truth)
    return sim.run(max_datagrams)
