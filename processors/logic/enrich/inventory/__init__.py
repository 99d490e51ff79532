"""Cluster inventory: addresses -> node, rack, ToR switch, group, jobs over time, switches.

Parses the text of a YAML or CSV inventory file (format in ``docs/inventory.md``),
validates it and compiles it into numpy tables for the vectorised lookups the
enricher and the detectors use; every problem is reported in one
:class:`InventoryError` as ``<file>: <where>: <what>``. No I/O: the file is read
(and watched) by :mod:`processors.config_files`; time comes in as an argument.

- :mod:`.models`: the file's shape (pydantic models, value parsers);
- :mod:`.reader`: YAML / CSV text -> validated spec, with problem locations;
- :mod:`.tables`: :class:`Inventory`, the compiled lookup tables.
"""

from .models import (
    EXTERNAL_AUTHORIZED_GROUP,
    UNKNOWN_GROUP,
    InventoryError,
    InventorySpec,
    JobSpec,
    NetworkSpec,
    NodeSpec,
    PortSpec,
    SwitchSpec,
    parse_bps,
)
from .reader import CSV_COLUMNS, CSV_KINDS, inventory_format
from .tables import Inventory

__all__ = [
    "CSV_COLUMNS",
    "CSV_KINDS",
    "EXTERNAL_AUTHORIZED_GROUP",
    "UNKNOWN_GROUP",
    "Inventory",
    "InventoryError",
    "InventorySpec",
    "JobSpec",
    "NetworkSpec",
    "NodeSpec",
    "PortSpec",
    "SwitchSpec",
    "inventory_format",
    "parse_bps",
]
