"""Per-uplink and per-rail fabric metrics from link-health samples and the inventory's topology.

Every ``sample`` record of ``link.health.v1`` (utilisation in and out over one counter interval, from the
switch's own counters) on a port the topology names is folded into bounded families: bytes per (leaf,
spine) over the leaf's uplinks, the leaf's uplink imbalance (busiest uplink / mean of its uplinks), bytes
per rail over the NIC ports of that rail, and min / mean / max NIC-port utilisation per rail. Label sets
grow with the inventory only (leaves x spines, rails), never with traffic: docs/metrics.md, "Fabric".
Pure logic: time comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable

from processors.logic.enrich.inventory import Inventory

from .store import COUNTER, GAUGE, Family

__all__ = ["FabricMetrics"]


class FabricMetrics:
    """The fabric families (created through ``family``, the state's family factory) and their updates."""

    def __init__(self, family: Callable[..., Family], ttl_s: float, inventory: Inventory):
        self.uplink_bytes = family("fabric_uplink_bytes_total", "Bytes over a leaf's uplinks to one spine, from the switch port counters (direction tx = leaf to spine)", ("leaf", "spine", "direction"), COUNTER)
        self.uplink_imbalance = family("fabric_leaf_uplink_imbalance_ratio", "Busiest uplink's tx rate / mean tx rate of the leaf's equal-cost uplinks over the last counter interval (1 = even; k = all on one of k uplinks)", ("leaf",), GAUGE, ttl_s)
        self.rail_bytes = family("fabric_rail_bytes_total", "Bytes through the NIC ports of a rail, from the switch port counters (direction tx = sent by the nodes)", ("rail", "direction"), COUNTER)
        self.rail_util = family("fabric_rail_utilization_ratio", "Min, mean or max utilisation (0..1, the larger of in and out) over the NIC ports of a rail, each at its last counter interval", ("rail", "stat"), GAUGE, ttl_s)
        self.set_inventory(inventory)

    def set_inventory(self, inventory: Inventory) -> None:
        """Port roles from the topology: (switch, ifIndex) -> ("u", leaf, spine) or ("r", rail)."""
        topo = inventory.topology
        self.ports: dict[tuple[str, int], tuple[str, str, str]] = {}
        for leaf in topo.switch_role:
            for port, spine, _, _ in topo.uplinks(leaf):
                self.ports[(leaf, port)] = ("u", leaf, spine)
        for nic in topo.nics:
            if nic.rail >= 0 and nic.port >= 0:
                self.ports[(nic.switch, nic.port)] = ("r", str(nic.rail), "")
        self.up_rate: dict[str, dict[int, float]] = {}  # leaf -> uplink port -> last tx bytes/s
        self.rail_port_util: dict[str, dict[tuple[str, int], float]] = {}  # rail -> NIC port -> last utilisation

    def add_sample(self, switch: str, if_index: int, interval_ms: int, speed_bps: int, util_in: float,
                   util_out: float, now: float) -> bool:
        """One link-health sample; False when the port is neither an uplink nor a NIC port of a rail."""
        role = self.ports.get((switch, if_index))
        if role is None or interval_ms <= 0 or speed_bps <= 0:
            return False
        rx = util_in * speed_bps * interval_ms / 8000.0
        tx = util_out * speed_bps * interval_ms / 8000.0
        kind, name, spine = role
        if kind == "u":
            self.uplink_bytes.inc((name, spine, "tx"), tx)
            self.uplink_bytes.inc((name, spine, "rx"), rx)
            rates = self.up_rate.setdefault(name, {})
            rates[if_index] = tx * 1000.0 / interval_ms
            mean = sum(rates.values()) / len(rates)
            if len(rates) >= 2 and mean > 0:
                self.uplink_imbalance.set((name,), max(rates.values()) / mean, now)
            return True
        # a NIC port: the switch receives what the node sends
        self.rail_bytes.inc((name, "tx"), rx)
        self.rail_bytes.inc((name, "rx"), tx)
        utils = self.rail_port_util.setdefault(name, {})
        utils[(switch, if_index)] = max(util_in, util_out)
        vals = utils.values()
        self.rail_util.set((name, "min"), min(vals), now)
        self.rail_util.set((name, "mean"), sum(vals) / len(utils), now)
        self.rail_util.set((name, "max"), max(vals), now)
        return True
