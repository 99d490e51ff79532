"""The inventory file's shape: pydantic models and the value parsers behind them.

Every section of the YAML file (docs/inventory.md) is a frozen model that
rejects unknown keys; values are checked as they are read (addresses and CIDRs,
names, group names, link speeds, ISO 8601 times). Cross-checks that need the
whole file (duplicates, unknown job nodes, overlapping jobs) are made when the
tables are compiled (:mod:`.tables`).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Sequence
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = [
    "EXTERNAL_AUTHORIZED_GROUP",
    "UNKNOWN_GROUP",
    "InventoryError",
    "InventorySpec",
    "SWITCH_ROLES",
    "JobSpec",
    "LinkEndSpec",
    "LinkSpec",
    "NetworkSpec",
    "NicSpec",
    "NodeSpec",
    "PortSpec",
    "SwitchSpec",
    "parse_bps",
]

UNKNOWN_GROUP = "unknown"
EXTERNAL_AUTHORIZED_GROUP = "external-authorized"


class InventoryError(ValueError):
    """An inventory file or dict is invalid; ``problems`` lists each problem (without the source prefix)."""

    def __init__(self, source: str, problems: Sequence[str]):
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


# ---------------------------------------------------------------- value parsers

_BPS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)\s*(bps|b/s|bit/s|bits/s)?\s*$", re.IGNORECASE)
_BPS_UNIT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bps(value: Any) -> int:
    """Bits per second from an int or a string like ``25G``, ``100Gbps``, ``400G``, ``10 Mb/s`` (SI units)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a link speed")
    if isinstance(value, int):
        bps = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a link speed")
        bps = int(round(value))
    elif isinstance(value, str):
        m = _BPS_RE.match(value)
        if not m:
            raise ValueError(f"{value!r} is not a link speed (use bits/s or e.g. 25G, 100Gbps, 400G)")
        bps = int(round(float(m.group(1)) * _BPS_UNIT[m.group(2).lower()]))
    else:
        raise ValueError(f"{value!r} is not a link speed")
    if bps <= 0:
        raise ValueError(f"link speed must be positive, got {value!r}")
    return bps


def _prefix(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an IP address or CIDR (must be a string)")
    text = value.strip()
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR") from None
    if int(net.network_address) != int(ipaddress.ip_interface(text).ip):
        raise ValueError(f"{value!r} has host bits set (network is {net})")
    return str(net)


def _host(value: Any) -> str:
    text = _prefix(value)
    net = ipaddress.ip_network(text)
    if net.num_addresses != 1:
        raise ValueError(f"{value!r} is a network; expected a single IP address")
    return text


def _name(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ValueError(f"{value!r} is not a valid name (non-empty, no spaces)")
    return value.strip()


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value.strip()


_GROUP_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _group(value: Any) -> str:
    if not isinstance(value, str) or not _GROUP_RE.match(value.strip()):
        raise ValueError(f"{value!r} is not a valid group name (lower-case letters, digits, '.', '_', '-')")
    if value.strip() == UNKNOWN_GROUP:
        raise ValueError(f"group {UNKNOWN_GROUP!r} is reserved for addresses not in the inventory")
    return value.strip()


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 timestamp") from None
    else:
        raise ValueError(f"{value!r} is not an ISO 8601 timestamp")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def _one_or_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _ports_by_index(value: Any) -> Any:
    """Ports as a list of ``{if_index, peer|node, speed}`` -> mapping ifIndex -> port."""
    if not isinstance(value, list):
        return value
    out: dict[Any, Any] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "if_index" not in item:
            raise ValueError(f"list item {i} has no if_index")
        key = item["if_index"]
        if key in out:
            raise ValueError(f"list item {i} repeats if_index {key!r}")
        out[key] = {k: v for k, v in item.items() if k != "if_index"}
    return out


def _link_end(value: Any) -> Any:
    """A link end written ``switch:ifIndex`` (``leaf-1:49``) -> ``{switch, port}``."""
    if isinstance(value, str):
        name, sep, port = value.rpartition(":")
        if not sep or not name or not port.strip().isdigit():
            raise ValueError(f"{value!r} is not a link end (use 'switch:ifIndex' or {{switch, port}})")
        return {"switch": name, "port": int(port)}
    return value


Prefix = Annotated[str, BeforeValidator(_prefix)]
HostAddr = Annotated[str, BeforeValidator(_host)]
Name = Annotated[str, BeforeValidator(_name)]
Label = Annotated[str, BeforeValidator(_label)]
Group = Annotated[str, BeforeValidator(_group)]
Bps = Annotated[int, BeforeValidator(parse_bps)]
Timestamp = Annotated[datetime, BeforeValidator(_timestamp)]
IfIndex = Annotated[int, Field(ge=0, le=0xFFFFFFFF)]
Rail = Annotated[int, Field(ge=0, le=255)]


# ---------------------------------------------------------------- models

_CFG = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NicSpec(BaseModel):
    """One network interface of a node: its addresses, the switch port it is cabled to and its rail.

    ``port`` is the switch's ifIndex; ``rail`` numbers the NIC's rail in a rail-optimised fabric (rank r's
    traffic goes out on rail r); ``speed`` defaults to the node's ``capacity``.
    """

    model_config = _CFG
    name: Name
    addresses: Annotated[
        list[Prefix],
        BeforeValidator(_one_or_list),
        Field(min_length=1, validation_alias=AliasChoices("addresses", "address", "ips")),
    ]
    switch: Label = ""
    port: Annotated[IfIndex | None, Field(validation_alias=AliasChoices("port", "if_index"))] = None
    rail: Rail | None = None
    speed: Bps | None = None


class NodeSpec(BaseModel):
    """A named host: its addresses (IPs or CIDRs), group, rack, ToR switch and NIC link capacity.

    A node with several NICs lists them in ``nics`` (each with its own addresses, switch port and rail);
    ``addresses`` then holds only the addresses that are on no listed NIC (it may be empty). A node
    needs ``addresses`` or ``nics`` (checked with the cross-references).
    """

    model_config = _CFG
    name: Name
    addresses: Annotated[
        list[Prefix],
        BeforeValidator(_one_or_list),
        Field(validation_alias=AliasChoices("addresses", "ips")),
    ]
    group: Group
    rack: Label = ""
    switch: Label = ""
    capacity: Bps | None = None
    # storage nodes: the write throughput one client gets when the storage is healthy (storage_bound's reference
    # for a storage node slow from the start; docs/detectors.md, "Storage-bound verdict")
    rated_write: Bps | None = None
    nics: list[NicSpec] = []

    @model_validator(mode="before")
    @classmethod
    def _addresses_optional_with_nics(cls, data: Any) -> Any:
        """``addresses`` may be left out when ``nics`` is given (required otherwise)."""
        if isinstance(data, dict) and data.get("nics") and "addresses" not in data and "ips" not in data:
            return {**data, "addresses": []}
        return data


class NetworkSpec(BaseModel):
    """An address range without a node name (e.g. a storage subnet)."""

    model_config = _CFG
    prefix: Prefix
    group: Group
    rack: Label = ""
    switch: Label = ""
    capacity: Bps | None = None


class JobSpec(BaseModel):
    """A named set of nodes, valid from ``from`` (inclusive) until ``until`` (exclusive); open ends allowed."""

    model_config = _CFG
    name: Name
    nodes: Annotated[list[Name], BeforeValidator(_one_or_list), Field(min_length=1)]
    from_: Timestamp | None = Field(default=None, alias="from")
    until: Timestamp | None = None
    # the dataset-read throughput per node the job's data loader takes when storage keeps up (average over a
    # window): storage_bound's reference for a job whose storage is slow from its start (docs/detectors.md)
    dataset_read: Bps | None = None


class PortSpec(BaseModel):
    """One switch port: the peer on the other end and the configured speed."""

    model_config = _CFG
    peer: Annotated[Label, Field(validation_alias=AliasChoices("peer", "node"))] = ""
    speed: Bps | None = None


SWITCH_ROLES = ("", "leaf", "spine")


class SwitchSpec(BaseModel):
    """A switch: sFlow agent / management addresses, optional ports by ifIndex, its role in a two-tier fabric
    (``leaf`` or ``spine``; empty when not said) and, for a rail leaf, the rail it carries."""

    model_config = _CFG
    name: Name
    agents: Annotated[
        list[HostAddr], BeforeValidator(_one_or_list), Field(validation_alias=AliasChoices("agents", "agent"))
    ] = []
    rack: Label = ""
    ports: Annotated[dict[IfIndex, PortSpec], BeforeValidator(_ports_by_index)] = {}
    role: Literal["", "leaf", "spine"] = ""
    rail: Rail | None = None


class LinkEndSpec(BaseModel):
    """One end of a switch-to-switch link: the switch and its port (ifIndex)."""

    model_config = _CFG
    switch: Name
    port: Annotated[IfIndex, Field(validation_alias=AliasChoices("port", "if_index"))]


class LinkSpec(BaseModel):
    """A switch-to-switch link (e.g. a leaf uplink to a spine): both ends and the link speed (required)."""

    model_config = _CFG
    a: Annotated[LinkEndSpec, BeforeValidator(_link_end)]
    b: Annotated[LinkEndSpec, BeforeValidator(_link_end)]
    speed: Bps


class InventorySpec(BaseModel):
    """The whole inventory file."""

    model_config = _CFG
    version: Literal[1] = 1
    cluster_ranges: Annotated[list[Prefix], BeforeValidator(_one_or_list)] = []
    external_authorized: Annotated[list[Prefix], BeforeValidator(_one_or_list)] = []
    nodes: list[NodeSpec] = []
    networks: list[NetworkSpec] = []
    jobs: list[JobSpec] = []
    switches: list[SwitchSpec] = []
    links: list[LinkSpec] = []
    simulation: Any = Field(default=None, description="ignored: simulator scenario files double as inventories")
