"""A validated inventory compiled into numpy lookup tables.

:class:`Inventory` cross-checks the spec (duplicate names and prefixes, unknown
job nodes, overlapping job memberships, duplicate switch agents) and compiles
it into the tables behind the vectorised lookups of the enricher and the
detectors: address -> entry (longest-prefix match), entry -> node, group, rack,
switch and capacity; (node, time) -> job; sFlow agent -> switch; (switch,
ifIndex) -> port.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from schemas.columns import addr16, addr_str

from ..lpm import PrefixTable, parse_prefix, prefix_str
from .models import EXTERNAL_AUTHORIZED_GROUP, UNKNOWN_GROUP, InventoryError, InventorySpec
from .reader import Locator, by_line, parse_text, read_spec
from .topology import Topology, check_topology

__all__ = ["Inventory"]

# Job validity times are clipped to [0, 2**43) ms (1970 .. year 2248) so that
# (node id, time) fits one int64 search key.
_TIME_BITS = 43
_TIME_MAX = (1 << _TIME_BITS) - 1
_MAX_NODES = 1 << 20


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _to_ms(dt: datetime | None, default: int) -> int:
    if dt is None:
        return default
    ms = (dt - _EPOCH) // timedelta(milliseconds=1)
    return min(max(ms, 0), _TIME_MAX + 1)


def _node_ids(spec: InventorySpec, locate: Locator, problems: list[str]) -> dict[str, int]:
    """Node name -> node id (its first position); duplicate names and too many nodes are problems."""
    seen: dict[str, int] = {}
    for i, n in enumerate(spec.nodes):
        if n.name in seen:
            problems.append(f"{locate(('nodes', i, 'name'))}: duplicate node name {n.name!r} "
                            f"(also at {locate(('nodes', seen[n.name]))})")
        else:
            seen[n.name] = i
    if len(spec.nodes) >= _MAX_NODES:
        problems.append(f"too many nodes ({len(spec.nodes)}, limit {_MAX_NODES - 1})")
    return seen


def _address_entries(spec: InventorySpec, node_id: dict[str, int], locate: Locator, problems: list[str]
                     ) -> tuple[list[tuple[int, int]], list[tuple]]:
    """(prefixes, label rows) of the address entries: nodes (and their NICs), networks, external_authorized; a
    prefix given twice is a problem. A row is (node, group, rack, switch, node id, capacity, nic, rail)."""
    prefixes: list[tuple[int, int]] = []
    rows: list[tuple] = []
    where: dict[tuple[int, int], tuple] = {}

    def add(loc: tuple, text: str, row: tuple) -> None:
        p = parse_prefix(text)
        if p in where:
            problems.append(f"{locate(loc)}: prefix {prefix_str(*p)} is already used at {locate(where[p])}")
            return
        where[p] = loc
        prefixes.append(p)
        rows.append(row)

    for i, n in enumerate(spec.nodes):
        cap = float(n.capacity) if n.capacity else math.nan
        nid = node_id.get(n.name, -1)
        for j, a in enumerate(n.addresses):
            add(("nodes", i, "addresses", j), a, (n.name, n.group, n.rack, n.switch, nid, cap, "", -1))
        for j, nic in enumerate(n.nics):
            rail = -1 if nic.rail is None else nic.rail
            nic_cap = float(nic.speed) if nic.speed else cap
            for k, a in enumerate(nic.addresses):
                add(("nodes", i, "nics", j, "addresses", k), a,
                    (n.name, n.group, n.rack, nic.switch or n.switch, nid, nic_cap, nic.name, rail))
    for i, net in enumerate(spec.networks):
        cap = float(net.capacity) if net.capacity else math.nan
        add(("networks", i, "prefix"), net.prefix, ("", net.group, net.rack, net.switch, -1, cap, "", -1))
    for i, a in enumerate(spec.external_authorized):
        add(("external_authorized", i), a, ("", EXTERNAL_AUTHORIZED_GROUP, "", "", -1, math.nan, "", -1))
    return prefixes, rows


def _memberships(spec: InventorySpec, node_id: dict[str, int], node_names: list[str], locate: Locator,
                 problems: list[str]) -> list[tuple[int, int, int, str]]:
    """(node id, from ms, until ms, job) rows; unknown nodes, empty ranges and overlaps are problems."""
    memberships: dict[int, list[tuple[int, int, str, int]]] = {}
    for i, job in enumerate(spec.jobs):
        t0 = min(_to_ms(job.from_, 0), _TIME_MAX)
        t1 = _to_ms(job.until, _TIME_MAX + 1)
        valid = True
        if job.from_ is not None and job.until is not None and job.until <= job.from_:
            problems.append(f"{locate(('jobs', i, 'until'))}: until ({job.until.isoformat()}) "
                            f"is not after from ({job.from_.isoformat()})")
            valid = False
        for name in dict.fromkeys(job.nodes):
            if name not in node_id:
                problems.append(f"{locate(('jobs', i, 'nodes', job.nodes.index(name)))}: unknown node {name!r}")
            elif valid:
                memberships.setdefault(node_id[name], []).append((t0, t1, job.name, i))
    mem_rows = []
    for nid, lst in memberships.items():
        lst.sort()
        for (_, a1, _, ai), (b0, _, _, bi) in zip(lst, lst[1:]):
            if b0 < a1:
                problems.append(
                    f"{locate(('jobs', bi))}: node {node_names[nid]!r} is also in "
                    f"{locate(('jobs', ai))} at an overlapping time"
                )
        mem_rows.extend((nid, t0, t1, name) for t0, t1, name, _ in lst)
    return mem_rows


def _switch_agents(spec: InventorySpec, locate: Locator, problems: list[str]
                   ) -> tuple[dict[str, int], list[tuple[int, int]], list[int]]:
    """(switch name -> its position, agent prefixes, switch number of each agent); a duplicate switch name
    or agent address is a problem."""
    sw_seen: dict[str, int] = {}
    agent_rows: list[tuple[int, int]] = []
    agent_switch: list[int] = []
    agent_where: dict[tuple[int, int], tuple] = {}
    for i, sw in enumerate(spec.switches):
        if sw.name in sw_seen:
            problems.append(f"{locate(('switches', i, 'name'))}: duplicate switch name {sw.name!r} "
                            f"(also at {locate(('switches', sw_seen[sw.name]))})")
            continue
        sw_seen[sw.name] = i
        for j, a in enumerate(sw.agents):
            p = parse_prefix(a)
            loc = ("switches", i, "agents", j)
            if p in agent_where:
                problems.append(f"{locate(loc)}: agent address {prefix_str(*p)} is already used at "
                                f"{locate(agent_where[p])}")
                continue
            agent_where[p] = loc
            agent_rows.append(p)
            agent_switch.append(len(sw_seen) - 1)
    return sw_seen, agent_rows, agent_switch


class Inventory:
    """A validated inventory compiled into lookup tables.

    Entry tables (``entry_*``) have one row per address/prefix plus a leading
    "unknown" row, so ``table[lookup(addrs) + 1]`` labels unknown addresses.
    """

    def __init__(self, spec: InventorySpec, source: str = "<dict>", _locate: Locator | None = None):
        locate = _locate or Locator(spec.model_dump(by_alias=True))
        problems: list[str] = []
        self.spec = spec
        self.source = source
        self.node_names: list[str] = [n.name for n in spec.nodes]
        # checks first (every problem of the file), in file order: nodes, addresses, jobs, switches
        node_id = _node_ids(spec, locate, problems)
        prefixes, rows = _address_entries(spec, node_id, locate, problems)
        mem_rows = _memberships(spec, node_id, self.node_names, locate, problems)
        sw_seen, agent_rows, agent_switch = _switch_agents(spec, locate, problems)
        self.topology: Topology = check_topology(spec, locate, problems)
        if problems:
            raise InventoryError(source, by_line(problems) if locate.csv_lines is not None else problems)
        self._compile_entries(spec, prefixes, rows)
        self._compile_nodes(spec)
        self._compile_jobs(spec, mem_rows)
        self._compile_switches(spec, sw_seen, agent_rows, agent_switch)

    def _compile_entries(self, spec: InventorySpec, prefixes: list[tuple[int, int]], rows: list[tuple]) -> None:
        """Address entries -> LPM table and per-entry label arrays; cluster-range membership per entry."""
        self.lpm = PrefixTable(prefixes)
        self.entry_prefixes = [prefix_str(*p) for p in prefixes]
        self.entry_node = np.array([""] + [r[0] for r in rows], dtype=object)
        self.entry_group = np.array([UNKNOWN_GROUP] + [r[1] for r in rows], dtype=object)
        self.entry_rack = np.array([""] + [r[2] for r in rows], dtype=object)
        self.entry_switch = np.array([""] + [r[3] for r in rows], dtype=object)
        self.entry_node_id = np.array([-1] + [r[4] for r in rows], dtype=np.int32)
        self.entry_capacity_bps = np.array([math.nan] + [r[5] for r in rows], dtype=np.float64)
        self.entry_nic = np.array([""] + [r[6] for r in rows], dtype=object)
        self.entry_rail = np.array([-1] + [r[7] for r in rows], dtype=np.int16)
        self.groups: list[str] = [UNKNOWN_GROUP] + sorted({r[1] for r in rows})
        gid = {g: i for i, g in enumerate(self.groups)}
        self.entry_group_id = np.array([gid[g] for g in self.entry_group], dtype=np.int32)

        ranges = list(dict.fromkeys(parse_prefix(c) for c in spec.cluster_ranges))
        self.cluster_ranges = [prefix_str(*p) for p in ranges]
        self._cluster = PrefixTable(ranges) if ranges else None
        # per entry: 1 = wholly inside a cluster range, 0 = wholly outside, -1 = partly (look up per address)
        status = [-1]
        for v, L in prefixes:
            st = 0
            for rv, rl in ranges:
                if rl <= L and (v >> (128 - rl)) == (rv >> (128 - rl)):
                    st = 1
                    break
                if rl > L and (rv >> (128 - L)) == (v >> (128 - L)):
                    st = -1
            status.append(st)
        self._entry_inside = np.array(status, dtype=np.int8)

    def _compile_nodes(self, spec: InventorySpec) -> None:
        """Nodes by name (sorted, for vectorised name lookups)."""
        node_caps = {}
        for n in spec.nodes:
            node_caps.setdefault(n.name, float(n.capacity) if n.capacity else math.nan)
        order = sorted(node_caps)
        self._node_sorted = np.array(order, dtype=object)
        self._node_sorted_cap = np.array([node_caps[k] for k in order], dtype=np.float64)

    def _compile_jobs(self, spec: InventorySpec, mem_rows: list[tuple[int, int, int, str]]) -> None:
        """Job memberships keyed by (node id << 43 | from_ms)."""
        mem_rows.sort(key=lambda r: (r[0], r[1]))
        self._job_keys = np.array([(nid << _TIME_BITS) | t0 for nid, t0, _, _ in mem_rows], dtype=np.int64)
        self._job_node = np.array([r[0] for r in mem_rows], dtype=np.int64)
        self._job_until = np.array([r[2] for r in mem_rows], dtype=np.int64)
        self._job_name = np.array([r[3] for r in mem_rows] + [""], dtype=object)
        self._job_from = self._job_keys & _TIME_MAX
        # node id -> its only membership row; -1 none, -2 several (looked up by time)
        only = np.full(len(self.node_names), -1, dtype=np.int64)
        if len(mem_rows):
            nodes, first, count = np.unique(self._job_node, return_index=True, return_counts=True)
            only[nodes] = np.where(count == 1, first, -2)
        self._job_only = only
        self.job_names: list[str] = sorted({j.name for j in spec.jobs})

    def _compile_switches(self, spec: InventorySpec, sw_seen: dict[str, int], agent_rows: list[tuple[int, int]],
                          agent_switch: list[int]) -> None:
        """Switches: agent address -> switch, (switch, ifIndex) -> port."""
        self.switch_names: list[str] = list(sw_seen)
        self._agents = PrefixTable(agent_rows)
        self._agent_switch = np.array(agent_switch, dtype=np.int32)
        self._switch_tab = np.array(self.switch_names + [""], dtype=object)
        self.agent_switch: dict[bytes, str] = {
            (v).to_bytes(16, "big"): self.switch_names[s] for (v, _), s in zip(agent_rows, agent_switch)
        }
        port_rows = []
        for s, name in enumerate(self.switch_names):
            for if_index, port in spec.switches[sw_seen[name]].ports.items():
                port_rows.append(((s << 32) | if_index, port.peer, float(port.speed) if port.speed else math.nan))
        explicit = {r[0] for r in port_rows}
        sw_id = {name: s for s, name in enumerate(self.switch_names)}
        for (name, if_index), use in self.topology.ports.items():  # NIC ports and link ends, unless given
            key = (sw_id[name] << 32) | if_index
            if key not in explicit:
                port_rows.append((key, use.peer, use.speed_bps))
        port_rows.sort(key=lambda r: r[0])
        self._port_keys = np.array([r[0] for r in port_rows], dtype=np.int64)
        self._port_peer = np.array([r[1] for r in port_rows] + [""], dtype=object)
        self._port_speed = np.array([r[2] for r in port_rows] + [math.nan], dtype=np.float64)

    # ---- construction

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>", _csv_lines: dict[tuple, int] | None = None) -> Inventory:
        """Validate a dict of the YAML shape; raises :class:`InventoryError`."""
        spec, locate = read_spec(data, source, _csv_lines)
        return cls(spec, source, locate)

    @classmethod
    def parse(cls, text: str, source: str, fmt: str = "yaml") -> Inventory:
        """The inventory a file's text describes (``fmt``: ``"yaml"`` or ``"csv"``, see
        :func:`~.reader.inventory_format`; ``source`` names the file in problems); raises :class:`InventoryError`.
        :func:`processors.config_files.read_inventory` reads the file."""
        data, lines = parse_text(text, source, fmt)
        return cls.from_dict(data, source, lines)

    @classmethod
    def empty(cls) -> Inventory:
        """An inventory with nothing in it: every address is unknown."""
        return cls(InventorySpec(), "<empty>")

    # ---- lookups (all vectorised)

    @property
    def n_entries(self) -> int:
        """Number of address entries (node addresses, networks, external_authorized ranges)."""
        return len(self.entry_prefixes)

    def node_capacities(self) -> dict[str, float]:
        """Node name -> NIC capacity in bits/s, for nodes that have one."""
        return {n.name: float(n.capacity) for n in self.spec.nodes if n.capacity}

    def rated_writes(self) -> dict[str, float]:
        """Storage node name -> its rated write throughput per client in bits/s, for nodes that have one."""
        return {n.name: float(n.rated_write) for n in self.spec.nodes if n.rated_write}

    def dataset_reads(self) -> dict[str, float]:
        """Job name -> its declared dataset-read throughput per node in bits/s, for jobs that have one (the last
        entry of a job that has several)."""
        return {j.name: float(j.dataset_read) for j in self.spec.jobs if j.dataset_read}

    def rack_nodes(self) -> dict[str, list[str]]:
        """Rack -> the names of its nodes, in file order (nodes without a rack are left out)."""
        out: dict[str, list[str]] = {}
        for n in self.spec.nodes:
            if n.rack:
                out.setdefault(n.rack, []).append(n.name)
        return out

    def node_groups(self) -> dict[str, str]:
        """Node name -> its group ("" when it has none)."""
        return {n.name: n.group or "" for n in self.spec.nodes}

    def switch_name(self, agent: str | bytes) -> str:
        """Switch name of one agent address (text, 4 or 16 bytes); the address text when unknown."""
        key = addr16(agent)
        return self.agent_switch.get(key) or addr_str(key)

    def lookup(self, addrs: np.ndarray) -> np.ndarray:
        """int32 entry index per address of an (n, 16) column; -1 when not in the inventory."""
        return self.lpm.lookup(addrs)

    def in_cluster(self, addrs: np.ndarray, entry_index: np.ndarray | None = None) -> np.ndarray:
        """Whether each address is inside the cluster.

        With ``cluster_ranges`` set: inside one of them. Without: known to the
        inventory (a node or network entry, not an ``external_authorized`` one).
        """
        idx = self.lookup(addrs) if entry_index is None else entry_index
        if self._cluster is not None:
            status = self._entry_inside[idx + 1]
            inside = status == 1
            need = np.flatnonzero(status < 0)
            if need.size:
                inside[need] = self._cluster.lookup(np.asarray(addrs).reshape(-1, 16)[need]) >= 0
            return inside
        return (idx >= 0) & (self.entry_group[idx + 1] != EXTERNAL_AUTHORIZED_GROUP)

    def jobs_at(self, node_ids: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
        """Object array of the job each node id is in at each time ("" when none or node id -1)."""
        return self.job_table[self.job_codes_at(node_ids, time_ms)]

    @property
    def job_table(self) -> np.ndarray:
        """Object array of job names indexed by :meth:`job_codes_at` (one row per membership, "" last)."""
        return self._job_name

    def job_codes_at(self, node_ids: np.ndarray, time_ms: np.ndarray) -> np.ndarray:
        """Row of ``job_table`` for the job each node id is in at each time (the "" row when none or node id -1)."""
        nid = np.asarray(node_ids, dtype=np.int64)
        out_none = len(self._job_name) - 1
        if len(self._job_keys) == 0:
            return np.full(len(nid), out_none, dtype=np.intp)
        t = np.clip(np.asarray(time_ms, dtype=np.int64), 0, _TIME_MAX)
        # A node in one job (the usual case) is a table lookup; nodes in several jobs over time, a binary search.
        only = self._job_only
        row = only.take(nid, mode="clip")
        row[(nid < 0) | (nid >= len(only))] = -1  # not a node id (-1: an address without a node)
        several = np.flatnonzero(row == -2)
        if len(several):
            row[several] = self._job_row_search(nid[several], t[several])
        rc = np.maximum(row, 0)
        ok = (row >= 0) & (t >= self._job_from[rc]) & (t < self._job_until[rc])
        return np.where(ok, rc, out_none)

    def _job_row_search(self, nid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Membership row of node ``nid`` (all >= 0) that started last at or before ``t`` (-1 when none)."""
        i = np.searchsorted(self._job_keys, (nid << _TIME_BITS) | t, side="right") - 1
        ic = np.maximum(i, 0)
        return np.where((i >= 0) & (self._job_node[ic] == nid), ic, -1)

    def node_capacity_bps(self, names: Iterable[str] | np.ndarray) -> np.ndarray:
        """float64 NIC link capacity (bits/s) per node name; NaN for unknown nodes or no capacity given."""
        q = np.asarray(names if isinstance(names, np.ndarray) else list(names), dtype=object).reshape(-1)
        if len(self._node_sorted) == 0 or len(q) == 0:
            return np.full(len(q), math.nan)
        pos = np.minimum(np.searchsorted(self._node_sorted, q), len(self._node_sorted) - 1)
        ok = self._node_sorted[pos] == q
        return np.where(ok, self._node_sorted_cap[pos], math.nan)

    def nic_info(self, addrs: np.ndarray, entry_index: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(NIC names, rails) per address of an (n, 16) column: object array ("" when the address is on no listed
        NIC) and int16 (-1 when unknown or no rail given). The node is ``entry_node[lookup(addrs) + 1]``."""
        idx = self.lookup(addrs) if entry_index is None else entry_index
        return self.entry_nic[idx + 1], self.entry_rail[idx + 1]

    def switch_for_agents(self, agent_addrs: np.ndarray) -> np.ndarray:
        """Object array of switch names for an (n, 16) column of sFlow agent addresses ("" when unknown)."""
        idx = self._agents.lookup(agent_addrs)
        sw = np.where(idx >= 0, self._agent_switch[np.maximum(idx, 0)] if len(self._agent_switch) else -1, -1)
        return self._switch_tab[np.where(sw >= 0, sw, len(self.switch_names))]

    def node_ports(self) -> dict[str, str]:
        """Node -> its switch port as ``switch/ifN``, from the ``switches:`` ports (the first one when a node
        has several)."""
        out: dict[str, str] = {}
        for key, peer in zip(self._port_keys.tolist(), self._port_peer[:-1].tolist()):
            if peer and peer not in out:
                out[peer] = f"{self.switch_names[key >> 32]}/if{key & 0xFFFFFFFF}"
        return out

    def port_info(self, agent_addrs: np.ndarray, if_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(peer names, configured speed bps as float64, NaN when unknown) per (agent, ifIndex)."""
        idx = self._agents.lookup(agent_addrs)
        n_none = len(self._port_keys)
        if n_none == 0:
            return self._port_peer[np.full(len(idx), 0)], np.full(len(idx), math.nan)
        sw = np.where(idx >= 0, self._agent_switch[np.maximum(idx, 0)], -1).astype(np.int64)
        ifx = np.asarray(if_index, dtype=np.int64)
        key = (np.maximum(sw, 0) << 32) | (ifx & 0xFFFFFFFF)
        pos = np.minimum(np.searchsorted(self._port_keys, key), n_none - 1)
        ok = (sw >= 0) & (ifx >= 0) & (ifx <= 0xFFFFFFFF) & (self._port_keys[pos] == key)
        pick = np.where(ok, pos, n_none)
        return self._port_peer[pick], self._port_speed[pick]
