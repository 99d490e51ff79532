"""Two-tier fabric in the simulator: spines, leaf uplinks balanced by ECMP, multi-NIC rail-optimised nodes.

A scenario describes the fabric in the inventory format (docs/inventory.md, "Fabric topology"): switches
with ``role: leaf|spine`` (and ``rail``), ``links:`` between leaf and spine ports, nodes with ``nics``.
Spines export nothing here (their ports mirror the leaves' uplinks). :class:`Ecmp` routes every segment
that leaves its leaf for another leaf: the source leaf hashes the 5-tuple onto its equal-cost uplinks (the
chosen uplink's spine is the path), the destination leaf receives it on its own link from that spine
(hashed again when there are several). An ``ecmp_polarised`` fault makes a leaf's hash put ``share`` of its
flows on one uplink. Pure: no sockets, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Ecmp", "Fabric", "NicPort", "ecmp_hash", "parse_fabric"]


@dataclass(frozen=True)
class NicPort:
    """One NIC of a node: its address, the leaf port it is cabled to, its rail (-1: none) and speed."""

    name: str
    ip: str
    switch: str
    if_index: int
    rail: int
    speed_bps: int


@dataclass
class Fabric:
    """Switch roles and rails, and every leaf's uplinks ``(port, spine, spine port, speed bps)`` by port."""

    roles: dict[str, str] = field(default_factory=dict)
    rails: dict[str, int] = field(default_factory=dict)
    uplinks: dict[str, list[tuple[int, str, int, int]]] = field(default_factory=dict)
    links: list[dict] = field(default_factory=list)  # the scenario's links, in the inventory's form

    def towards(self, leaf: str, spine: str) -> list[int]:
        """Ports of ``leaf`` linked to ``spine``."""
        return [p for p, s, _, _ in self.uplinks.get(leaf, ()) if s == spine]


def _end(value, parse_error) -> tuple[str, int]:
    if isinstance(value, str):
        name, _, port = value.rpartition(":")
        if not name or not port.isdigit():
            raise parse_error(f"link end {value!r}: use 'switch:ifIndex'")
        return name, int(port)
    return str(value["switch"]), int(value.get("port", value.get("if_index", -1)))


def parse_fabric(doc: dict, parse_speed, parse_error) -> Fabric:
    """The scenario document's roles, rails and links (``parse_speed`` / ``parse_error`` from the model)."""
    fab = Fabric()
    for s in doc.get("switches") or []:
        fab.roles[s["name"]] = str(s.get("role", ""))
        if s.get("rail") is not None:
            fab.rails[s["name"]] = int(s["rail"])
    for link in doc.get("links") or []:
        (a, ap), (b, bp) = _end(link["a"], parse_error), _end(link["b"], parse_error)
        for name in (a, b):
            if name not in fab.roles:
                raise parse_error(f"link {a}:{ap} - {b}:{bp}: unknown switch {name!r}")
        if "speed" not in link:
            raise parse_error(f"link {a}:{ap} - {b}:{bp}: speed missing")
        speed = parse_speed(link["speed"])
        if fab.roles[b] == "spine" and fab.roles[a] != "spine":
            fab.uplinks.setdefault(a, []).append((ap, b, bp, speed))
        elif fab.roles[a] == "spine" and fab.roles[b] != "spine":
            fab.uplinks.setdefault(b, []).append((bp, a, ap, speed))
        fab.links.append({"a": f"{a}:{ap}", "b": f"{b}:{bp}", "speed": link["speed"]})
    for ups in fab.uplinks.values():
        ups.sort()
    return fab


def ecmp_hash(segs: np.ndarray, salt: int = 0) -> np.ndarray:
    """A switch-style 5-tuple hash (uint64) of each segment; ``salt`` varies it per switch."""
    h = np.full(len(segs), np.uint64(0x9E3779B97F4A7C15 ^ (salt & 0xFFFFFFFF)), np.uint64)
    with np.errstate(over="ignore"):
        for col in ("src", "dst", "sport", "dport", "proto"):
            h ^= segs[col].astype(np.uint64)
            h *= np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(33)
    return h


class Ecmp:
    """Uplink choice per segment for a chunk (see module docstring)."""

    def __init__(self, fabric: Fabric, sw_names: list[str], effects):
        self.fabric = fabric
        self.sw_names = sw_names
        self.effects = effects
        self.leaf_ups = [fabric.uplinks.get(s, []) for s in sw_names]

    def route(self, segs: np.ndarray, ssw: np.ndarray, dsw: np.ndarray, t0: int, t1: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """(uplink port on the source leaf, uplink port on the destination leaf) per segment; -1 where the
        segment stays on its leaf, an end is outside the fabric, or the leaf has no uplinks."""
        up_src = np.full(len(segs), -1, np.int64)
        up_dst = np.full(len(segs), -1, np.int64)
        cross = (ssw >= 0) & (dsw >= 0) & (ssw != dsw)
        if not cross.any():
            return up_src, up_dst
        h = ecmp_hash(segs)
        for x in np.unique(ssw[cross]).tolist():
            ups = self.leaf_ups[x]
            rows = np.flatnonzero(cross & (ssw == x))
            if not ups:
                continue
            pick = (h[rows] % np.uint64(len(ups))).astype(np.int64)
            polar = self.effects.polarised(self.sw_names[x], t0, t1)
            if polar is not None:
                port, share = polar
                hot = [p for p, _, _, _ in ups].index(port) if port in [p for p, _, _, _ in ups] else 0
                moved = ((h[rows] >> np.uint64(40)) % np.uint64(10_000)).astype(np.int64) < int(share * 10_000)
                pick = np.where(moved, hot, pick)
            ports = np.array([p for p, _, _, _ in ups], np.int64)
            spines = [s for _, s, _, _ in ups]
            up_src[rows] = ports[pick]
            for k, spine in enumerate(spines):
                sel = rows[pick == k]
                for y in np.unique(dsw[sel]).tolist():
                    back = self.fabric.towards(self.sw_names[y], spine)
                    if back:
                        to_y = sel[dsw[sel] == y]
                        alt = (ecmp_hash(segs[to_y], salt=y + 1) % np.uint64(len(back))).astype(np.int64)
                        up_dst[to_y] = np.array(back, np.int64)[alt]
        return up_src, up_dst


def parse_nics(node: dict, default_speed: int, parse_speed, parse_error) -> tuple[NicPort, ...]:
    """A scenario node's ``nics`` (inventory keys: name, address/addresses/ips, switch, port/if_index, rail,
    speed); IPv4 only, one address per NIC."""
    out = []
    for k, nic in enumerate(node.get("nics") or []):
        addrs = nic.get("address", nic.get("addresses", nic.get("ips")))
        addrs = [addrs] if isinstance(addrs, str) else list(addrs or [])
        port = nic.get("port", nic.get("if_index"))
        if len(addrs) != 1 or not nic.get("switch") or port is None:
            raise parse_error(f"node {node['name']}: nic {k} needs one address, a switch and a port")
        rail = nic.get("rail")
        speed = parse_speed(nic["speed"]) if nic.get("speed") else default_speed
        out.append(NicPort(str(nic.get("name", f"nic{k}")), str(addrs[0]), str(nic["switch"]), int(port),
                           -1 if rail is None else int(rail), speed))
    return tuple(out)


def nic_inventory(nics: tuple[NicPort, ...], format_speed) -> list[dict]:
    """NICs in the inventory's form."""
    out = []
    for n in nics:
        d = {"name": n.name, "address": n.ip, "switch": n.switch, "port": n.if_index,
             "speed": format_speed(n.speed_bps)}
        if n.rail >= 0:
            d["rail"] = n.rail
        out.append(d)
    return out
