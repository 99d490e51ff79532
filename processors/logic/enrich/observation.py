"""Observation policy: which flow records count, so that every packet is counted once.

Several observation points can see one packet (source ToR sFlow, destination ToR uplink, core
NetFlow, border IPFIX, host exporters). This module decides, per record and without state, whether a
record is the one that counts (column ``duplicate`` of ``flow_enriched`` is true for the others): sFlow
of the source's own switch always counts, other views only for paths no primary view covers, and
``exporters`` overrides per exporter address (``primary``, ``secondary``, ``ignore``). The matrix,
incast, straggler and pattern detectors, the archive queries and the hourly summaries use only counted
records. The rule table and its assumptions: docs/detectors.md, "Counting each packet once".
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from schemas.columns import PROTO_SFLOW5, addr16

from .inventory import Inventory

__all__ = ["ObservationPolicy", "ROLES"]

ROLES = ("primary", "secondary", "ignore")
_PRIMARY, _SECONDARY, _IGNORE = 0, 1, 2


def _addr_key(addrs: np.ndarray) -> np.ndarray:
    """(n, 16) uint8 address column -> (n,) void keys comparable with ``==`` and usable in ``np.unique``."""
    a = np.ascontiguousarray(addrs, dtype=np.uint8).reshape(len(addrs), 16)
    return a.view(np.dtype((np.void, 16))).ravel()


class ObservationPolicy:
    """The counting rule compiled for one inventory (docs/detectors.md, "Counting each packet once")."""

    def __init__(self, inventory: Inventory, exporters: Mapping[str, str] | None = None):
        self.inventory = inventory
        bad = {k: v for k, v in (exporters or {}).items() if v not in ROLES}
        if bad:
            k, v = next(iter(bad.items()))
            raise ValueError(f"exporter {k}: role {v!r} is not one of {', '.join(ROLES)}")
        self.exporter_role: dict[bytes, int] = {addr16(k): ROLES.index(v) for k, v in (exporters or {}).items()}
        spec = inventory.spec
        sflow = {sw.name for sw in spec.switches if sw.agents}
        self._switch_no = {name: i for i, name in enumerate(inventory.switch_names) if name in sflow}
        peer_switch = {p.peer: sw.name for sw in spec.switches if sw.name in sflow for p in sw.ports.values() if p.peer}
        # entry table row (lookup + 1; row 0 = unknown) -> number of the sFlow switch the entry's node sits behind
        # (its own switch, else the switch listing it as a port's peer), -1 when none: not covered
        self.entry_switch = np.array(
            [self._switch_no.get(sw, self._switch_no.get(peer_switch.get(node, ""), -1)) if node else -1
             for node, sw in zip(inventory.entry_node.tolist(), inventory.entry_switch.tolist())], dtype=np.int64)
        self.covered_entry = self.entry_switch >= 0
        self.covered_nodes = frozenset(n for n, s in zip(inventory.entry_node.tolist(), self.entry_switch.tolist())
                                       if n and s >= 0)
        self.active = bool(self.covered_nodes) or bool(self.exporter_role)

    def counted(self, flows: np.ndarray, src_entry: np.ndarray, dst_entry: np.ndarray) -> np.ndarray:
        """Boolean per record: does it count? ``src_entry``/``dst_entry``: inventory entry rows (lookup + 1)."""
        n = len(flows)
        if not self.active or n == 0:
            return np.ones(n, dtype=bool)
        src_sw = self.entry_switch[src_entry]
        src_cov = src_sw >= 0
        dst_cov = self.covered_entry[dst_entry]
        out = ~(src_cov | dst_cov)  # secondary views: only paths no primary sees
        sflow = flows["export_protocol"] == PROTO_SFLOW5
        if sflow.any() and self._switch_no:
            idx = np.flatnonzero(sflow)
            sw = self._switch_numbers(flows["exporter_addr"][idx])
            known = sw >= 0
            if known.any():
                k = idx[known]
                # the source's own ToR: the primary view; another inventory switch: only uncovered sources
                out[k] = (src_sw[k] == sw[known]) | ~src_cov[k]
        if self.exporter_role:
            self._apply_overrides(flows["exporter_addr"], out, ~(src_cov | dst_cov))
        return out

    def _switch_numbers(self, agents: np.ndarray) -> np.ndarray:
        """Switch number per (n, 16) agent address, -1 when the agent is not in the inventory."""
        keys = _addr_key(agents)
        uniq, inv = np.unique(keys, return_inverse=True) if len(keys) > 1 and not (keys == keys[0]).all() \
            else (keys[:1], np.zeros(len(keys), dtype=np.intp))
        names = self.inventory.switch_for_agents(np.frombuffer(uniq.tobytes(), dtype=np.uint8).reshape(-1, 16))
        per = np.array([self._switch_no.get(s, -1) for s in names.tolist()], dtype=np.int64)
        return per[inv.ravel()]

    def _apply_overrides(self, exporters: np.ndarray, out: np.ndarray, secondary: np.ndarray) -> None:
        keys = _addr_key(exporters)
        for addr, role in self.exporter_role.items():
            rows = keys == np.frombuffer(addr, dtype=np.dtype((np.void, 16)))[0]
            out[rows] = True if role == _PRIMARY else False if role == _IGNORE else secondary[rows]
