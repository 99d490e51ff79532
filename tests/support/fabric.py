"""A leaf-spine fabric inventory for tests: one rail leaf with uplinks to two spines, a second leaf, two two-NIC nodes."""

from __future__ import annotations

from processors.logic.enrich.inventory import Inventory

LEAF_AGENT = "10.255.0.1"


def fabric_inventory() -> Inventory:
    """One rail leaf (4 uplinks, 2 to each spine) and a second leaf; two nodes with a NIC on each leaf."""
    return Inventory.from_dict({
        "nodes": [
            {"name": f"n{i}", "group": "gpu", "rack": "su1", "capacity": "400G",
             "nics": [{"name": "eth0", "address": f"10.0.0.{i}", "switch": "leaf-0", "port": i, "rail": 0},
                      {"name": "eth1", "address": f"10.1.0.{i}", "switch": "leaf-1", "port": i, "rail": 1}]}
            for i in (1, 2)],
        "switches": [
            {"name": "leaf-0", "role": "leaf", "rail": 0, "agents": [LEAF_AGENT]},
            {"name": "leaf-1", "role": "leaf", "rail": 1, "agents": ["10.255.0.2"]},
            {"name": "spine-0", "role": "spine"}, {"name": "spine-1", "role": "spine"},
        ],
        "links": [{"a": f"leaf-{leaf}:{49 + k}", "b": f"spine-{k % 2}:{10 * leaf + k}", "speed": "400G"}
                  for leaf in (0, 1) for k in range(4)],
    })
