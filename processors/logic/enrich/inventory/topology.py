"""The fabric's shape from the inventory: switch roles, switch-to-switch links, NICs and rails.

:func:`check_topology` cross-checks the ``links:`` section, the nodes' ``nics``
and the switches' roles and rails (unknown switches, a port used twice,
inconsistent rails, a link from a switch to itself) and compiles them into a
:class:`Topology`: the read-only view the detectors, the metrics sink and the
console use (which ports of a leaf are its equal-cost uplinks, which NIC of a
node is on which rail, the speed of every link). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .models import InventorySpec
from .reader import Locator

__all__ = ["Link", "Nic", "PortUse", "Topology", "check_topology"]


@dataclass(frozen=True)
class Link:
    """A switch-to-switch link; ``a`` is the end given first in the file (a leaf, for an uplink)."""

    a_switch: str
    a_port: int
    b_switch: str
    b_port: int
    speed_bps: float

    def end_at(self, switch: str) -> tuple[int, str, int]:
        """(own port, peer switch, peer port) seen from ``switch`` (one of the two ends)."""
        if switch == self.a_switch:
            return self.a_port, self.b_switch, self.b_port
        return self.b_port, self.a_switch, self.a_port


@dataclass(frozen=True)
class Nic:
    """One NIC of a node: addresses (prefix text), switch and port (ifIndex, -1 when not given), rail (-1 when
    not given), speed in bits/s (NaN when neither the NIC nor the node gives one)."""

    node: str
    name: str
    addresses: tuple[str, ...]
    switch: str
    port: int
    rail: int
    speed_bps: float


@dataclass(frozen=True)
class PortUse:
    """What is on the far side of one switch port: a node's NIC (``kind`` ``"nic"``) or another switch
    (``"uplink"`` towards a spine, ``"downlink"`` from a spine, ``"fabric"`` between switches without roles)."""

    kind: str
    peer: str
    peer_port: int
    speed_bps: float
    nic: str = ""
    rail: int = -1


@dataclass
class Topology:
    """Switch roles and rails, links, NICs and port uses of an inventory (see docs/inventory.md).

    Public and stable (the console and detectors build on it): add, don't rename.
    """

    switch_role: dict[str, str] = field(default_factory=dict)
    switch_rail: dict[str, int] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    ports: dict[tuple[str, int], PortUse] = field(default_factory=dict)

    @property
    def leaves(self) -> list[str]:
        return [s for s, r in self.switch_role.items() if r == "leaf"]

    @property
    def spines(self) -> list[str]:
        return [s for s, r in self.switch_role.items() if r == "spine"]

    @property
    def rails(self) -> list[int]:
        """The rails NICs are on, sorted (empty when no NIC gives a rail)."""
        return sorted({n.rail for n in self.nics if n.rail >= 0})

    def uplinks(self, switch: str) -> list[tuple[int, str, int, float]]:
        """(port, spine, spine port, speed bps) of each uplink of ``switch``, by port: the links to a switch
        whose role is ``spine`` from one that is not. Empty for a spine or a switch without such links."""
        out = []
        for (sw, port), use in self.ports.items():
            if sw == switch and use.kind == "uplink":
                out.append((port, use.peer, use.peer_port, use.speed_bps))
        return sorted(out)

    def node_nics(self, node: str) -> list[Nic]:
        """The NICs of ``node`` in file order (empty for a node given with ``addresses`` only)."""
        return [n for n in self.nics if n.node == node]

    def port(self, switch: str, if_index: int) -> PortUse | None:
        """What port ``if_index`` of ``switch`` connects to (None when the inventory does not say)."""
        return self.ports.get((switch, int(if_index)))

    def to_dict(self) -> dict:
        """A JSON-ready view: switches with role and rail, links, NICs (the console's topology graph)."""
        def num(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "switches": [{"name": s, "role": r, "rail": self.switch_rail.get(s, -1)}
                         for s, r in self.switch_role.items()],
            "links": [{"a": {"switch": k.a_switch, "port": k.a_port}, "b": {"switch": k.b_switch, "port": k.b_port},
                       "speed_bps": k.speed_bps} for k in self.links],
            "nics": [{"node": n.node, "nic": n.name, "addresses": list(n.addresses), "switch": n.switch,
                      "port": n.port, "rail": n.rail, "speed_bps": num(n.speed_bps)} for n in self.nics],
        }


def _link_kind(role_a: str, role_b: str) -> tuple[str, str]:
    """(kind at a, kind at b) of a link between switches of these roles."""
    if role_b == "spine" and role_a != "spine":
        return "uplink", "downlink"
    if role_a == "spine" and role_b != "spine":
        return "downlink", "uplink"
    return "fabric", "fabric"


class _Ports:
    """Port uses being collected; a (switch, port) used twice is a problem naming both places."""

    def __init__(self, spec: InventorySpec, locate: Locator, problems: list[str]):
        self.locate = locate
        self.problems = problems
        self.uses: dict[tuple[str, int], tuple[PortUse, tuple]] = {}
        self.explicit: dict[tuple[str, int], tuple[str, tuple]] = {}
        for i, sw in enumerate(spec.switches):
            for if_index, p in sw.ports.items():
                self.explicit.setdefault((sw.name, if_index), (p.peer, ("switches", i, "ports", if_index)))

    def add(self, switch: str, port: int, use: PortUse, loc: tuple) -> None:
        key = (switch, port)
        if key in self.uses:
            self.problems.append(f"{self.locate(loc)}: port {port} of switch {switch!r} is used twice "
                                 f"(also at {self.locate(self.uses[key][1])})")
            return
        given = self.explicit.get(key)
        if given is not None and given[0] and given[0] != use.peer:
            self.problems.append(f"{self.locate(loc)}: port {port} of switch {switch!r} connects {use.peer!r} here "
                                 f"but {given[0]!r} at {self.locate(given[1])}")
            return
        self.uses[key] = (use, loc)


def _check_links(spec: InventorySpec, topo: Topology, ports: _Ports, locate: Locator, problems: list[str]) -> None:
    for i, link in enumerate(spec.links):
        bad = False
        for end in ("a", "b"):
            name = getattr(link, end).switch
            if name not in topo.switch_role:
                problems.append(f"{locate(('links', i, end, 'switch'))}: unknown switch {name!r}")
                bad = True
        if not bad and link.a.switch == link.b.switch:
            problems.append(f"{locate(('links', i, 'b', 'switch'))}: link from switch {link.a.switch!r} to itself")
            bad = True
        if bad:
            continue
        speed = float(link.speed)
        ka, kb = _link_kind(topo.switch_role[link.a.switch], topo.switch_role[link.b.switch])
        ports.add(link.a.switch, link.a.port, PortUse(ka, link.b.switch, link.b.port, speed), ("links", i, "a", "port"))
        ports.add(link.b.switch, link.b.port, PortUse(kb, link.a.switch, link.a.port, speed), ("links", i, "b", "port"))
        topo.links.append(Link(link.a.switch, link.a.port, link.b.switch, link.b.port, speed))


def _check_nics(spec: InventorySpec, topo: Topology, ports: _Ports, locate: Locator, problems: list[str]) -> None:
    for i, node in enumerate(spec.nodes):
        if not node.addresses and not node.nics:
            problems.append(f"{locate(('nodes', i))}: node {node.name!r} has no addresses and no nics")
        names: dict[str, int] = {}
        rails: dict[int, int] = {}
        with_rail = [nic.rail is not None for nic in node.nics]
        if any(with_rail) and not all(with_rail):
            j = with_rail.index(False)
            problems.append(f"{locate(('nodes', i, 'nics', j))}: inconsistent rails: NIC {node.nics[j].name!r} "
                            f"has no rail but other NICs of node {node.name!r} do")
        for j, nic in enumerate(node.nics):
            loc = ("nodes", i, "nics", j)
            if nic.name in names:
                problems.append(f"{locate(loc + ('name',))}: duplicate NIC name {nic.name!r} "
                                f"(also at {locate(('nodes', i, 'nics', names[nic.name]))})")
                continue
            names[nic.name] = j
            if nic.rail is not None:
                if nic.rail in rails:
                    problems.append(f"{locate(loc + ('rail',))}: inconsistent rails: rail {nic.rail} is also on "
                                    f"{locate(('nodes', i, 'nics', rails[nic.rail]))}")
                rails.setdefault(nic.rail, j)
            if not _check_nic_switch(topo, nic, loc, locate, problems):
                continue
            speed = float(nic.speed or node.capacity or math.nan)
            rail = -1 if nic.rail is None else nic.rail
            port = -1 if nic.port is None else nic.port
            if nic.port is not None:
                ports.add(nic.switch, nic.port, PortUse("nic", node.name, -1, speed, nic.name, rail), loc + ("port",))
            topo.nics.append(Nic(node.name, nic.name, tuple(nic.addresses), nic.switch or node.switch, port, rail,
                                 speed))


def _check_nic_switch(topo: Topology, nic, loc: tuple, locate: Locator, problems: list[str]) -> bool:
    """Whether the NIC's switch and rail agree with the switches section (problems otherwise)."""
    if nic.port is not None and not nic.switch:
        problems.append(f"{locate(loc + ('port',))}: port given without a switch")
        return False
    if nic.switch and topo.switch_role and nic.switch not in topo.switch_role:
        problems.append(f"{locate(loc + ('switch',))}: unknown switch {nic.switch!r}")
        return False
    if nic.port is not None and nic.switch not in topo.switch_role:
        problems.append(f"{locate(loc + ('switch',))}: unknown switch {nic.switch!r} (a NIC port needs the switch "
                        f"in switches:)")
        return False
    sw_rail = topo.switch_rail.get(nic.switch, -1)
    if nic.rail is not None and sw_rail >= 0 and nic.rail != sw_rail:
        problems.append(f"{locate(loc + ('rail',))}: inconsistent rails: NIC on rail {nic.rail} is cabled to "
                        f"switch {nic.switch!r}, which carries rail {sw_rail}")
        return False
    return True


def check_topology(spec: InventorySpec, locate: Locator, problems: list[str]) -> Topology:
    """The :class:`Topology` of a spec; cross-reference problems are appended to ``problems``."""
    topo = Topology()
    for sw in spec.switches:
        if sw.name in topo.switch_role:
            continue  # duplicate names are reported with the switches
        topo.switch_role[sw.name] = sw.role
        if sw.rail is not None:
            topo.switch_rail[sw.name] = sw.rail
    ports = _Ports(spec, locate, problems)
    _check_nics(spec, topo, ports, locate, problems)
    _check_links(spec, topo, ports, locate, problems)
    topo.ports = {k: v[0] for k, v in ports.uses.items()}
    for (sw, port), (peer, _loc) in ports.explicit.items():
        if (sw, port) not in topo.ports and peer in topo.switch_role:
            own, other = topo.switch_role.get(sw, ""), topo.switch_role[peer]
            speed = next((float(p.speed) for s in spec.switches if s.name == sw
                          for i, p in s.ports.items() if i == port and p.speed), math.nan)
            topo.ports[(sw, port)] = PortUse(_link_kind(own, other)[0], peer, -1, speed)
    return topo
