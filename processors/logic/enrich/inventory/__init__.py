"""Cluster inventory: addresses -> node, NIC, rail, rack, ToR switch, group, jobs over time, switches, links.

Parses the text of a YAML or CSV inventory file (format in ``docs/inventory.md``),
validates it and compiles it into numpy tables for the vectorised lookups the
enricher and the detectors use; every problem is reported in one
:class:`InventoryError` as ``<file>: <where>: <what>``. No I/O: the file is read
(and watched) by :mod:`processors.config_files`; time comes in as an argument.

- :mod:`.models`: the file's shape (pydantic models, value parsers);
- :mod:`.reader`: YAML / CSV text -> validated spec, with problem locations;
- :mod:`.tables`: :class:`Inventory`, the compiled lookup tables;
- :mod:`.topology`: :class:`Topology`, switch roles, links, NICs and rails.
"""

from .models import (
    EXTERNAL_AUTHORIZED_GROUP,
    UNKNOWN_GROUP,
    InventoryError,
    InventorySpec,
    SWITCH_ROLES,
    JobSpec,
    LinkEndSpec,
    LinkSpec,
    NetworkSpec,
    NicSpec,
    NodeSpec,
    PortSpec,
    SwitchSpec,
    parse_bps,
)
from .reader import CSV_COLUMNS, CSV_KINDS, inventory_format
from .tables import Inventory
from .topology import Link, Nic, PortUse, Topology

__all__ = [
    "CSV_COLUMNS",
    "CSV_KINDS",
    "EXTERNAL_AUTHORIZED_GROUP",
    "UNKNOWN_GROUP",
    "Inventory",
    "InventoryError",
    "InventorySpec",
    "SWITCH_ROLES",
    "JobSpec",
    "Link",
    "LinkEndSpec",
    "LinkSpec",
    "Nic",
    "NicSpec",
    "PortUse",
    "Topology",
    "NetworkSpec",
    "NodeSpec",
    "PortSpec",
    "SwitchSpec",
    "inventory_format",
    "parse_bps",
]
