"""What the console draws things in the order of: nodes by switch/rack/job, ports, jobs, rings.

Built from a :class:`processors.logic.enrich.inventory.Inventory` (or nothing), no I/O but
:func:`load_layout` reading the inventory file (:func:`processors.config_files.read_inventory`).
Names seen in the data but missing from the inventory are appended after the
inventory's own, sorted, so a view never drops a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.columns import addr16, addr_str

UNKNOWN = "unknown"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    group: str = UNKNOWN
    rack: str = ""
    switch: str = ""
    job: str = ""  # first job listing the node ("" when none)
    capacity_bps: float | None = None


@dataclass(frozen=True)
class PortInfo:
    switch: str
    if_index: int
    node: str = ""
    speed_bps: float | None = None


@dataclass
class Layout:
    nodes: list[NodeInfo] = field(default_factory=list)
    ports: list[PortInfo] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # job -> nodes in inventory (ring) order
    agents: dict[bytes, str] = field(default_factory=dict)  # 16-byte agent address -> switch name
    switches: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_name = {n.name: n for n in self.nodes}
        self.port_of_node = {p.node: p for p in self.ports if p.node}
        self.port_by_key = {(p.switch, p.if_index): p for p in self.ports}
        self.rank = {n.name: i for i, n in enumerate(self.nodes)}

    # -- construction

    @classmethod
    def from_inventory(cls, inv) -> Layout:
        spec = inv.spec
        job_of: dict[str, str] = {}
        jobs: dict[str, list[str]] = {}
        for j in spec.jobs:
            jobs.setdefault(j.name, [])
            for n in j.nodes:
                if n not in jobs[j.name]:
                    jobs[j.name].append(n)
                job_of.setdefault(n, j.name)
        nodes = [NodeInfo(n.name, n.group, n.rack or "", n.switch or "", job_of.get(n.name, ""),
                          float(n.capacity) if n.capacity else None) for n in spec.nodes]
        sw_order = {s.name: i for i, s in enumerate(spec.switches)}
        nodes.sort(key=lambda n: (sw_order.get(n.switch, len(sw_order)), n.switch, n.rack, n.job == "", n.job, n.name))
        ports, agents = [], {}
        for s in spec.switches:
            for a in s.agents:
                agents[addr16(str(a).split("/")[0])] = s.name
            for idx in sorted(s.ports):
                p = s.ports[idx]
                ports.append(PortInfo(s.name, int(idx), p.peer or "", float(p.speed) if p.speed else None))
        return cls(nodes, ports, jobs, agents, [s.name for s in spec.switches])

    # -- lookups

    def switch_of_agent(self, agent) -> str:
        key = addr16(agent)
        return self.agents.get(key) or addr_str(key)

    def order(self, names, level: str = "node") -> list[str]:
        """``names`` in display order: inventory order first (nodes; racks/groups by first node), then the rest sorted."""
        names = set(names)
        if level == "node":
            known = [n.name for n in self.nodes if n.name in names]
        elif level == "rack":
            known = list(dict.fromkeys(n.rack or UNKNOWN for n in self.nodes if (n.rack or UNKNOWN) in names))
        else:
            known = list(dict.fromkeys(n.group for n in self.nodes if n.group in names))
        return known + sorted(names - set(known))

    def rack_of(self, node: str) -> str:
        n = self.by_name.get(node)
        return (n.rack or UNKNOWN) if n else UNKNOWN

    def blocks(self, labels: list[str], level: str) -> list[dict]:
        """Consecutive runs of ``labels`` sharing a job (node level) or a switch (rack level): the matrix's group bands."""
        def key(label: str) -> str:
            if level == "node":
                n = self.by_name.get(label)
                return (n.job or "(no job)") if n else "(not in inventory)"
            if level == "rack":
                sw = {n.switch for n in self.nodes if (n.rack or UNKNOWN) == label}
                return ",".join(sorted(sw)) or "(no switch)"
            return ""

        out: list[dict] = []
        for i, label in enumerate(labels):
            k = key(label)
            if out and out[-1]["name"] == k:
                out[-1]["end"] = i + 1
            else:
                out.append({"name": k, "start": i, "end": i + 1})
        return [b for b in out if b["name"]]

    def switch_blocks(self, labels: list[str]) -> list[dict]:
        """Consecutive runs of node ``labels`` behind the same switch (the matrix's heavier outlines)."""
        out: list[dict] = []
        for i, label in enumerate(labels):
            n = self.by_name.get(label)
            k = (n.switch or "(no switch)") if n else "(not in inventory)"
            if out and out[-1]["name"] == k:
                out[-1]["end"] = i + 1
            else:
                out.append({"name": k, "start": i, "end": i + 1})
        return out

    def ring_successor(self, node: str) -> str | None:
        """The next node of ``node``'s job in inventory (ring) order, wrapping around."""
        for members in self.jobs.values():
            if node in members and len(members) > 1:
                return members[(members.index(node) + 1) % len(members)]
        return None

    def jobs_of(self, node: str) -> list[str]:
        return [j for j, members in self.jobs.items() if node in members]


def load_layout(path: str | None) -> Layout:
    """Layout from an inventory file (raises the inventory's own error on a bad file); empty without one."""
    if not path:
        return Layout()
    from processors.config_files import read_inventory

    return Layout.from_inventory(read_inventory(path))
