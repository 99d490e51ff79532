"""Cluster inventory: addresses -> node, rack, ToR switch, group, jobs over time, switches.

Loads a YAML or CSV file (format in ``docs/inventory.md``), validates it and
compiles it into numpy tables for the vectorised lookups the enricher and the
detectors use; every problem is reported in one :class:`InventoryError` as
``<file>: <where>: <what>``. File reads are the only I/O; time comes in as an
argument.

- :mod:`.models`: the file's shape (pydantic models, value parsers);
- :mod:`.reader`: YAML / CSV text -> validated spec, with problem locations;
- :mod:`.tables`: :class:`Inventory`, the compiled lookup tables;
- :mod:`.watcher`: :class:`InventoryWatcher`, reloads the file when it changes.
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
from .reader import CSV_COLUMNS, CSV_KINDS
from .tables import Inventory
from .watcher import InventoryWatcher

__all__ = [
    "CSV_COLUMNS",
    "CSV_KINDS",
    "EXTERNAL_AUTHORIZED_GROUP",
    "UNKNOWN_GROUP",
    "Inventory",
    "InventoryError",
    "InventorySpec",
    "InventoryWatcher",
    "JobSpec",
    "NetworkSpec",
    "NodeSpec",
    "PortSpec",
    "SwitchSpec",
    "parse_bps",
]
