"""Scenario model: the cluster, its workloads, exporters and faults, loaded from one YAML file.

The YAML's top-level keys ``nodes``, ``switches``, ``jobs``, ``cluster_ranges`` and
``external_authorized`` are written in the inventory format the processors read, so
the same file doubles as an inventory. Everything only the simulator needs lives
under the ``simulation`` key. :meth:`Cluster.to_inventory_dict` returns the
inventory part. No I/O here beyond :func:`load_scenario` reading the file.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from .fabric import Fabric, NicPort, nic_inventory, parse_fabric, parse_nics

_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}

DEFAULT_START = "2026-12-01T14:00:00Z"
DEFAULT_UPLINK_IF = 49

FAULT_KINDS = frozenset(
    {
        "straggler",
        "link_downgrade",
        "incast",
        "lb_skew",
        "storage_slowdown",
        "segmentation_violation",
        "unregistered_host",
        "exfiltration",
        "off_hours_transfer",
        "exporter_loss",
        "clock_skew",
        "congestion",
        "syn_storm",
        "link_flap",
        "ecmp_polarised",
        "rail_degraded",
        "placement_spread",
        "collectives_invisible",
    }
)


class ScenarioError(ValueError):
    """The scenario file is inconsistent or names something that does not exist."""


def parse_speed(value: Any) -> int:
    """``"25G"`` / ``"100M"`` / ``25e9`` -> bits per second."""
    if isinstance(value, (int, float)):
        return int(value)
    s = str(value).strip().upper().removesuffix("BPS").removesuffix("B")
    unit = s[-1] if s and s[-1] in _UNITS else ""
    num = s[: len(s) - len(unit)] if unit else s
    try:
        return int(float(num) * _UNITS[unit])
    except ValueError as exc:
        raise ScenarioError(f"bad speed {value!r}") from exc


def format_speed(bps: int) -> str:
    """Bits per second -> ``"25G"`` style (the inventory's capacity notation)."""
    for unit in ("T", "G", "M", "K"):
        if bps >= _UNITS[unit] and bps % _UNITS[unit] == 0:
            return f"{bps // _UNITS[unit]}{unit}"
    return str(bps)


def parse_time_ms(value: Any) -> int:
    """ISO-8601 string (``Z`` or offset; naive means UTC) or unix seconds -> unix ms."""
    if isinstance(value, (int, float)):
        return int(value * 1000)
    if isinstance(value, datetime):
        dt = value
    else:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def ip_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def stable_hash(*parts: Any) -> int:
    """Process-independent 32-bit hash (Python's ``hash`` is salted per process)."""
    return zlib.crc32("\x1f".join(str(p) for p in parts).encode())


@dataclass(frozen=True)
class Node:
    name: str
    ips: tuple[str, ...]
    rack: str
    switch: str
    group: str
    capacity_bps: int
    if_index: int = 0  # access port on its switch
    nics: tuple[NicPort, ...] = ()  # multi-NIC (rail-optimised) nodes: one access port per NIC
    rated_write: str | None = None  # storage nodes: the inventory's per-client write rating, as written

    @property
    def ip(self) -> str:
        return self.ips[0]


@dataclass(frozen=True)
class Port:
    if_index: int
    node: str | None
    speed_bps: int
    uplink: bool = False


@dataclass
class Switch:
    name: str
    agent: str
    ports: list[Port]
    sub_agent_id: int = 0

    def port(self, if_index: int) -> Port | None:
        for p in self.ports:
            if p.if_index == if_index:
                return p
        return None

    @property
    def uplink(self) -> Port:
        for p in self.ports:
            if p.uplink:
                return p
        raise ScenarioError(f"switch {self.name} has no uplink")


@dataclass(frozen=True)
class Storage:
    """Dataset-read or checkpoint-write settings of a training workload."""

    storage: str
    protocol: str = "nfs"  # nfs (2049) | s3 (9000)
    mbps_per_node: float = 0.0  # dataset reads, megabits/s per node during compute phases
    interval_s: float = 0.0  # checkpoints: every interval_s
    mb_per_node: float = 0.0  # checkpoints: megabytes written per node
    duration_s: float = 10.0  # checkpoints: nominal write duration


@dataclass(frozen=True)
class Workload:
    job: str
    kind: str  # training | inference
    nodes: tuple[str, ...]
    collective: str = "ring"  # ring | tree
    transport: str = "tcp"  # tcp | roce | both
    period_s: float = 2.0
    compute_s: float = 1.2
    comm_s: float = 0.6
    allreduce_mb: float = 100.0  # gradient megabytes per node per iteration
    channels: int = 2  # parallel connections per peer
    start_s: float = 0.0
    dataset: Storage | None = None
    checkpoint: Storage | None = None
    # inference
    frontend: str | None = None
    request_mbps: float = 0.0  # total request megabits/s, split over replicas
    response_ratio: float = 4.0  # response bytes per request byte


@dataclass(frozen=True)
class FlowExporter:
    """A NetFlow v9 / IPFIX exporter (router or host agent) and what it observes."""

    name: str
    protocol: str  # netflow9 | ipfix
    agent: str
    source_id: int
    observe: str = "all"  # all | inter_rack | external | nodes
    nodes: tuple[str, ...] = ()
    sampling_interval: int = 1
    active_timeout_s: float = 60.0
    inactive_timeout_s: float = 15.0
    template_refresh_s: float = 60.0
    max_datagram_bytes: int = 1400


@dataclass(frozen=True)
class SflowConfig:
    sampling_rate: int = 8192
    counter_interval_s: float = 10.0
    header_bytes: int = 128
    max_datagram_bytes: int = 1400
    enabled: bool = True


@dataclass(frozen=True)
class Fault:
    kind: str
    start_ms: int  # relative to scenario start
    end_ms: int
    params: dict

    def active(self, t0: int, t1: int) -> bool:
        return self.start_ms < t1 and t0 < self.end_ms

    def overlap_ms(self, t0: int, t1: int) -> int:
        return max(0, min(t1, self.end_ms) - max(t0, self.start_ms))


@dataclass(frozen=True)
class Change:
    """A change an operator makes during the scenario: sent as a change mark line at ``at_ms`` (relative to the
    scenario start). The traffic effect is the faults' doing (e.g. a fault whose ``end_s`` is the change)."""

    at_ms: int
    text: str
    job: str = ""
    node: str = ""


@dataclass(frozen=True)
class External:
    name: str
    ip: str


@dataclass(frozen=True)
class Background:
    dns: str | None = None  # DNS server node
    dns_qps_per_node: float = 2.0
    ssh_from: str | None = None  # management node holding SSH sessions to every node
    metrics_from: str | None = None  # node scraping every node's exporter (tcp 9100)
    scrape_interval_s: float = 15.0
    egress_to: str | None = None  # external name (authorized) for package/mirror egress
    egress_mbps_per_node: float = 0.5


@dataclass
class Cluster:
    nodes: dict[str, Node]
    switches: dict[str, Switch]
    jobs: dict[str, list[str]]
    cluster_ranges: list[str]
    external_authorized: list[str]
    externals: dict[str, External] = field(default_factory=dict)
    fabric: Fabric = field(default_factory=Fabric)
    job_reads: dict[str, str] = field(default_factory=dict)  # job -> the inventory's dataset_read, as written

    def attachments(self) -> list[tuple[str, str, int]]:
        """(ip, switch, ifIndex) of every node address: a NIC's own port, else the node's."""
        return [(nic.ip, nic.switch, nic.if_index) for n in self.nodes.values() for nic in n.nics] + [
            (ip, n.switch, n.if_index) for n in self.nodes.values() if not n.nics for ip in n.ips]

    def by_ip(self) -> dict[str, Node]:
        return {ip: n for n in self.nodes.values() for ip in n.ips}

    def to_inventory_dict(self) -> dict:
        """The inventory structure the processors' loader accepts (see module docstring)."""
        fab = self.fabric
        nic_ports = {(nic.switch, nic.if_index) for n in self.nodes.values() for nic in n.nics}
        inv = {
            "nodes": [
                {"name": n.name, "rack": n.rack, "group": n.group, "capacity": format_speed(n.capacity_bps),
                 "nics": nic_inventory(n.nics, format_speed)} if n.nics else
                {
                    "name": n.name,
                    "ips": list(n.ips),
                    "rack": n.rack,
                    "switch": n.switch,
                    "group": n.group,
                    "capacity": format_speed(n.capacity_bps),
                    **({"rated_write": n.rated_write} if n.rated_write is not None else {}),
                }
                for n in self.nodes.values()
            ],
            "jobs": [{"name": j, "nodes": list(ns), **({"dataset_read": self.job_reads[j]} if j in self.job_reads else {})}
                     for j, ns in self.jobs.items()],
            "switches": [
                {
                    "name": s.name,
                    "agent": s.agent,
                    "ports": [
                        {"if_index": p.if_index, "node": p.node, "speed": format_speed(p.speed_bps)}
                        for p in s.ports
                        if not p.uplink and (s.name, p.if_index) not in nic_ports
                    ],
                    **({"role": fab.roles[s.name]} if fab.roles.get(s.name) else {}),
                    **({"rail": fab.rails[s.name]} if s.name in fab.rails else {}),
                }
                for s in self.switches.values()
            ] + [{"name": name, "role": "spine"} for name, role in fab.roles.items() if role == "spine"],
            "cluster_ranges": list(self.cluster_ranges),
            "external_authorized": list(self.external_authorized),
        }
        if fab.links:
            inv["links"] = list(fab.links)
        return inv


@dataclass
class Scenario:
    name: str
    description: str
    cluster: Cluster
    workloads: list[Workload]
    background: Background
    sflow: SflowConfig
    flow_exporters: list[FlowExporter]
    faults: list[Fault]
    duration_s: float = 300.0
    start_ms: int = parse_time_ms(DEFAULT_START)
    seed: int = 1
    window_s: float = 10.0
    mtu: int = 1500
    roce_payload: int = 1024
    changes: list[Change] = field(default_factory=list)
    step_marks: bool = True  # training jobs send step / checkpoint marks to the marks target

    def resolve_ip(self, name_or_ip: str) -> str:
        """Node name, external name or literal IPv4 address -> IPv4 address."""
        if name_or_ip in self.cluster.nodes:
            return self.cluster.nodes[name_or_ip].ip
        if name_or_ip in self.cluster.externals:
            return self.cluster.externals[name_or_ip].ip
        try:
            return str(ipaddress.IPv4Address(name_or_ip))
        except ValueError as exc:
            raise ScenarioError(f"unknown node/external/address {name_or_ip!r}") from exc


# ---------------------------------------------------------------- loading


def _req(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise ScenarioError(f"{where}: missing {key!r}")
    return d[key]


def _storage(d: dict | None) -> Storage | None:
    if not d:
        return None
    known = set(Storage.__dataclass_fields__)
    bad = set(d) - known
    if bad:
        raise ScenarioError(f"unknown storage keys {sorted(bad)}")
    return Storage(**d)


def _fault(d: dict) -> Fault:
    kind = _req(d, "kind", "fault")
    if kind not in FAULT_KINDS:
        raise ScenarioError(f"unknown fault kind {kind!r}; known: {sorted(FAULT_KINDS)}")
    start = float(_req(d, "start_s", f"fault {kind}"))
    end = float(_req(d, "end_s", f"fault {kind}"))
    if end <= start:
        raise ScenarioError(f"fault {kind}: end_s must be after start_s")
    params = {k: v for k, v in d.items() if k not in ("kind", "start_s", "end_s")}
    return Fault(kind, int(start * 1000), int(end * 1000), params)


def _change(d: dict, jobs: dict, nodes: dict) -> Change:
    bad = set(d) - {"at_s", "text", "job", "node"}
    if bad:
        raise ScenarioError(f"change: unknown keys {sorted(bad)}")
    c = Change(int(float(_req(d, "at_s", "change")) * 1000), str(_req(d, "text", "change")), str(d.get("job", "")),
               str(d.get("node", "")))
    if c.job and c.job not in jobs:
        raise ScenarioError(f"change: unknown job {c.job!r}")
    if c.node and c.node not in nodes:
        raise ScenarioError(f"change: unknown node {c.node!r}")
    return c


def scenario_from_dict(doc: dict, source: str = "<dict>") -> Scenario:
    """Build and validate a :class:`Scenario` from the parsed YAML document."""
    sim = doc.get("simulation") or {}
    nodes: dict[str, Node] = {}
    switches: dict[str, Switch] = {}
    port_of: dict[str, tuple[str, int, int]] = {}
    uplinks = sim.get("uplinks") or {}
    fabric = parse_fabric(doc, parse_speed, ScenarioError)
    nics = {n["name"]: parse_nics(n, parse_speed(n.get("capacity", "25G")), parse_speed, ScenarioError)
            for n in _req(doc, "nodes", source)}
    for i, s in enumerate(_req(doc, "switches", source)):
        if fabric.roles.get(s["name"]) == "spine":
            continue  # spines export nothing here (docs/simulator.md, "Fabric")
        ports = []
        for p in s.get("ports") or []:
            port = Port(int(p["if_index"]), p.get("node"), parse_speed(p.get("speed", "25G")))
            ports.append(port)
            if port.node:
                port_of[port.node] = (s["name"], port.if_index, port.speed_bps)
        for node, node_nics in nics.items():
            for nic in node_nics:
                if nic.switch == s["name"]:
                    ports.append(Port(nic.if_index, node, nic.speed_bps))
                    port_of.setdefault(node, (s["name"], nic.if_index, nic.speed_bps))
        up = uplinks.get(s["name"]) or {}
        if s["name"] in fabric.uplinks:
            ports.extend(Port(p, None, sp, True) for p, _, _, sp in fabric.uplinks[s["name"]])
        else:
            ports.append(Port(int(up.get("if_index", DEFAULT_UPLINK_IF)), None, parse_speed(up.get("speed", "100G")),
                              True))
        switches[s["name"]] = Switch(s["name"], str(ipaddress.IPv4Address(s["agent"])), ports, int(s.get("sub_agent_id", 0)))
    for node, node_nics in nics.items():
        for nic in node_nics:
            if nic.switch not in switches:
                raise ScenarioError(f"node {node}: nic {nic.name}: unknown leaf switch {nic.switch!r}")
        if node_nics:
            port_of[node] = (node_nics[0].switch, node_nics[0].if_index, node_nics[0].speed_bps)
    for n in _req(doc, "nodes", source):
        name = n["name"]
        sw = n.get("switch") or (nics[name][0].switch if nics[name] else None)
        if sw not in switches:
            raise ScenarioError(f"node {name}: unknown switch {sw!r}")
        if name not in port_of:
            raise ScenarioError(f"node {name}: no port on switch {sw} lists it")
        if port_of[name][0] != sw:
            raise ScenarioError(f"node {name}: port is on {port_of[name][0]}, node says {sw}")
        ips = tuple(str(ipaddress.IPv4Address(ip)) for ip in [*(n.get("ips") or []), *(c.ip for c in nics[name])])
        cap = parse_speed(n.get("capacity", format_speed(port_of[name][2])))
        nodes[name] = Node(name, ips, str(n.get("rack", "")), sw, str(n.get("group", "gpu")), cap, port_of[name][1],
                           nics[name], str(n["rated_write"]) if n.get("rated_write") is not None else None)
    jobs, job_reads = {}, {}
    for j in doc.get("jobs") or []:
        for member in j["nodes"]:
            if member not in nodes:
                raise ScenarioError(f"job {j['name']}: unknown node {member!r}")
        jobs[j["name"]] = list(j["nodes"])
        if j.get("dataset_read") is not None:
            job_reads[j["name"]] = str(j["dataset_read"])
    externals = {e["name"]: External(e["name"], str(ipaddress.IPv4Address(e["ip"]))) for e in sim.get("externals") or []}
    cluster = Cluster(
        nodes,
        switches,
        jobs,
        [str(ipaddress.ip_network(c)) for c in doc.get("cluster_ranges") or []],
        [str(ipaddress.ip_network(c)) for c in doc.get("external_authorized") or []],
        externals,
        fabric,
        job_reads,
    )

    workloads = []
    for w in sim.get("workloads") or []:
        w = dict(w)
        job = _req(w, "job", "workload")
        if job not in jobs:
            raise ScenarioError(f"workload: unknown job {job!r}")
        w["dataset"] = _storage(w.get("dataset"))
        w["checkpoint"] = _storage(w.get("checkpoint"))
        bad = set(w) - set(Workload.__dataclass_fields__)
        if bad:
            raise ScenarioError(f"workload {job}: unknown keys {sorted(bad)}")
        wl = Workload(nodes=tuple(jobs[job]), **w)
        if wl.kind not in ("training", "inference"):
            raise ScenarioError(f"workload {job}: kind must be training or inference")
        if wl.kind == "training" and wl.compute_s + wl.comm_s > wl.period_s + 1e-9:
            raise ScenarioError(f"workload {job}: compute_s + comm_s exceeds period_s")
        if wl.collective not in ("ring", "tree") or wl.transport not in ("tcp", "roce", "both"):
            raise ScenarioError(f"workload {job}: bad collective/transport")
        for st in (wl.dataset, wl.checkpoint):
            if st and st.storage not in nodes:
                raise ScenarioError(f"workload {job}: unknown storage node {st.storage!r}")
        workloads.append(wl)

    bg = Background(**(sim.get("background") or {}))
    ex = sim.get("exporters") or {}
    sflow = SflowConfig(**(ex.get("sflow") or {}))
    flow_exporters = []
    for i, f in enumerate(ex.get("flow") or []):
        f = dict(f)
        f["nodes"] = tuple(f.get("nodes") or ())
        fe = FlowExporter(**f)
        if fe.protocol not in ("netflow9", "ipfix"):
            raise ScenarioError(f"exporter {fe.name}: protocol must be netflow9 or ipfix")
        if fe.observe not in ("all", "inter_rack", "external", "nodes"):
            raise ScenarioError(f"exporter {fe.name}: bad observe {fe.observe!r}")
        flow_exporters.append(fe)
    names = [fe.name for fe in flow_exporters] + list(switches)
    if len(set(names)) != len(names):
        raise ScenarioError("exporter and switch names must be unique")
    if len({(fe.agent, fe.source_id) for fe in flow_exporters}) != len(flow_exporters):
        raise ScenarioError("flow exporters need distinct (agent, source_id)")

    faults = [_fault(f) for f in sim.get("faults") or []]
    changes = [_change(c, jobs, nodes) for c in sim.get("changes") or []]
    scen = Scenario(
        name=str(sim.get("name", Path(source).stem)),
        description=str(sim.get("description", "")),
        cluster=cluster,
        workloads=workloads,
        background=bg,
        sflow=sflow,
        flow_exporters=flow_exporters,
        faults=faults,
        duration_s=float(sim.get("duration_s", 300)),
        start_ms=parse_time_ms(sim.get("start", DEFAULT_START)),
        seed=int(sim.get("seed", 1)),
        window_s=float(sim.get("window_s", 10)),
        mtu=int(sim.get("mtu", 1500)),
        roce_payload=int(sim.get("roce_payload", 1024)),
        changes=changes,
        step_marks=bool(sim.get("step_marks", True)),
    )
    _check_faults(scen)
    return scen


def _check_faults(scen: Scenario) -> None:
    nodes = scen.cluster.nodes
    exporters = {fe.name for fe in scen.flow_exporters} | set(scen.cluster.switches)
    for f in scen.faults:
        p = f.params
        for key in ("node", "destination", "storage", "replica"):
            if key in p and p[key] not in nodes:
                raise ScenarioError(f"fault {f.kind}: unknown node {p[key]!r}")
        for key in ("sources", "targets", "nodes"):
            for name in p.get(key) or []:
                if name not in nodes:
                    raise ScenarioError(f"fault {f.kind}: unknown node {name!r} in {key}")
        if f.kind in ("congestion", "collectives_invisible") and "job" not in p:
            raise ScenarioError(f"{f.kind}: needs job")
        if f.kind == "syn_storm" and (not p.get("targets") or "node" not in p):
            raise ScenarioError("syn_storm: needs node and targets")
        if f.kind == "ecmp_polarised" and scen.cluster.fabric.uplinks.get(p.get("switch"), []) == []:
            raise ScenarioError(f"ecmp_polarised: {p.get('switch')!r} is not a leaf with uplinks")
        if f.kind == "rail_degraded" and "rail" not in p:
            raise ScenarioError("rail_degraded: needs node and rail")
        if f.kind in ("link_flap", "link_downgrade", "straggler", "rail_degraded") and "node" not in p:
            raise ScenarioError(f"{f.kind}: needs node")
        if f.kind == "link_flap" and not 0 < float(p.get("down_s", 12)) < float(p.get("period_s", 40)):
            raise ScenarioError("link_flap: needs 0 < down_s < period_s")
        if f.kind == "incast":
            if p.get("transport", "tcp") not in ("tcp", "roce") or p.get("ecn", "none") not in ("none", "ect"):
                raise ScenarioError("incast: transport is tcp or roce, ecn is none or ect")
            if not 0 <= float(p.get("ce_fraction", 0)) <= 1 or float(p.get("cnp_ratio", 0)) < 0:
                raise ScenarioError("incast: ce_fraction in [0, 1], cnp_ratio >= 0")
        if "job" in p and p["job"] not in scen.cluster.jobs:
            raise ScenarioError(f"fault {f.kind}: unknown job {p['job']!r}")
        if f.kind in ("exporter_loss", "clock_skew"):
            if p.get("exporter") not in exporters:
                raise ScenarioError(f"fault {f.kind}: unknown exporter {p.get('exporter')!r}")
            if f.kind == "clock_skew" and p["exporter"] in scen.cluster.switches:
                raise ScenarioError("clock_skew applies to NetFlow/IPFIX exporters (sFlow carries no wall clock)")
        if f.kind in ("segmentation_violation", "exfiltration", "off_hours_transfer"):
            scen.resolve_ip(_req(p, "src", f.kind))
            scen.resolve_ip(_req(p, "dst", f.kind))
        if f.kind == "unregistered_host":
            if p.get("switch") not in scen.cluster.switches:
                raise ScenarioError("unregistered_host: unknown switch")
            if p["ip"] in scen.cluster.by_ip():
                raise ScenarioError("unregistered_host: ip is registered")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file."""
    path = Path(path)
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ScenarioError(f"{path}: not a mapping")
    return scenario_from_dict(doc, str(path))


def find_scenario(name_or_path: str) -> Path:
    """A path, or the name of a shipped scenario (``healthy`` -> scenarios/healthy.yaml)."""
    p = Path(name_or_path)
    if p.exists():
        return p
    shipped = Path(__file__).resolve().parents[2] / "scenarios" / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if shipped.exists():
        return shipped
    raise ScenarioError(f"no scenario file {name_or_path!r}")
