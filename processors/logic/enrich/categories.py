"""App category of each flow from protocol, ports, groups and cluster membership (vectorised).

Categories: ``collective``, ``rocev2``, ``storage``, ``dns``, ``mgmt``,
``external`` and ``other``. Rules are tried in ``CategoryRules.order``; the
first one that matches a flow wins, ``other`` takes the rest (and every
non-IP flow). A port rule matches when either side's port (source or
destination) matches, because the server port is on whichever side the
server is. The defaults are tabulated in ``docs/inventory.md``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "CATEGORIES",
    "CATEGORY_CODE",
    "CategoryRules",
    "categorize",
    "categorize_groups",
    "category_names",
    "category_table",
    "parse_port_match",
]

CATEGORIES = ("collective", "rocev2", "storage", "dns", "mgmt", "external", "other")
CATEGORY_CODE = {name: i for i, name in enumerate(CATEGORIES)}
_NAMES = np.array(CATEGORIES, dtype=object)
_OTHER = CATEGORY_CODE["other"]

_PROTO = {"tcp": 6, "udp": 17, "sctp": 132}
_PORT_RE = re.compile(r"^(tcp|udp|sctp|any)/(\d{1,5})(?:-(\d{1,5}))?$")

RuleName = Literal["collective", "rocev2", "storage", "dns", "mgmt", "external"]


def parse_port_match(text: str) -> tuple[int, int, int]:
    """``"tcp/22"``, ``"udp/161-162"``, ``"any/53"`` -> (protocol or -1 for any of TCP/UDP/SCTP, low, high)."""
    m = _PORT_RE.match(text.strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a port match (use proto/port or proto/low-high, proto tcp|udp|sctp|any)")
    lo = int(m.group(2))
    hi = int(m.group(3)) if m.group(3) else lo
    if not 0 <= lo <= hi <= 65535:
        raise ValueError(f"{text!r}: ports must satisfy 0 <= low <= high <= 65535")
    return (_PROTO.get(m.group(1), -1), lo, hi)


def _check_port_match(text: str) -> str:
    parse_port_match(text)
    return text.strip().lower()


PortMatch = Annotated[str, AfterValidator(_check_port_match)]


class CategoryRules(BaseModel):
    """Classification rules; every field has a documented default (docs/inventory.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    order: tuple[RuleName, ...] = Field(
        default=("rocev2", "storage", "dns", "mgmt", "collective", "external"),
        description="Rules in the order they are tried; the first match wins, 'other' takes the rest.",
    )
    rocev2_ports: tuple[PortMatch, ...] = ("udp/4791",)
    collective_groups: tuple[str, ...] = ("gpu",)
    collective_ports: tuple[PortMatch, ...] = Field(
        default=("tcp/1024-65535",),
        description="NCCL socket ports; one side must match, and both ports must be >= collective_min_port.",
    )
    collective_min_port: int = Field(default=1024, ge=0, le=65535)
    storage_ports: tuple[PortMatch, ...] = ("tcp/2049", "udp/2049", "tcp/3260", "tcp/988")
    object_store_ports: tuple[PortMatch, ...] = ("tcp/80", "tcp/443", "tcp/9000")
    storage_groups: tuple[str, ...] = ("storage",)
    dns_ports: tuple[PortMatch, ...] = ("udp/53", "tcp/53")
    mgmt_ports: tuple[PortMatch, ...] = ("tcp/22", "udp/161", "udp/162", "udp/623")
    external_group_prefix: str = "external"

    @field_validator("order")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("each rule may appear only once in order")
        return v


def category_names(codes: np.ndarray) -> np.ndarray:
    """Object array of category names for int codes (indexes into ``CATEGORIES``)."""
    return _NAMES[np.asarray(codes)]


def category_table() -> np.ndarray:
    """Object array of the category names, indexed by code (``category_names(codes) == category_table()[codes]``)."""
    return _NAMES


@lru_cache(maxsize=64)
def _ports(specs: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    return tuple(parse_port_match(s) for s in specs)


# Port tests are table look-ups: row per L4 protocol (0 = no L4 protocol or port out of range: never matches),
# column per port; a flow side's index into the flattened table is computed once per batch.
_L4_ROW = {6: 1, 17: 2, 132: 3}
_ROW_OF_PROTO = np.zeros(256, dtype=np.int64)
for _p, _r in _L4_ROW.items():
    _ROW_OF_PROTO[_p] = _r


@lru_cache(maxsize=64)
def _port_table(specs: tuple[str, ...]) -> np.ndarray:
    """Flattened bool table (4 x 65536): does (protocol row, port) match one of the specs."""
    t = np.zeros((4, 65536), dtype=bool)
    for p, lo, hi in _ports(specs):
        rows = [1, 2, 3] if p < 0 else [_L4_ROW[p]]
        t[rows, lo : hi + 1] = True
    return t.ravel()


def _side_index(proto: np.ndarray, port: np.ndarray) -> np.ndarray:
    """Per flow: index of (protocol, port) into a ``_port_table``."""
    ok = (proto >= 0) & (proto < 256) & (port >= 0) & (port <= 65535)
    row = np.where(ok, _ROW_OF_PROTO[np.where(ok, proto, 0)], 0)
    return row * 65536 + np.where(ok, port, 0)


def _port_side(idx: np.ndarray, specs: tuple[str, ...]) -> np.ndarray:
    """Per flow: this one port matches one of the specs (protocol included); ``idx`` from ``_side_index``."""
    return _port_table(specs)[idx]


def _either(sidx, didx, specs) -> np.ndarray:
    t = _port_table(specs)
    return t[sidx] | t[didx]


def categorize(
    ip_protocol: np.ndarray,
    src_port: np.ndarray,
    dst_port: np.ndarray,
    src_group_id: np.ndarray,
    dst_group_id: np.ndarray,
    groups: Sequence[str],
    src_inside: np.ndarray,
    dst_inside: np.ndarray,
    rules: CategoryRules | None = None,
    is_ip: np.ndarray | None = None,
) -> np.ndarray:
    """int8 category codes per flow.

    Groups come as int ids into ``groups`` (the group vocabulary), so group
    tests are table look-ups. ``src_inside``/``dst_inside`` say whether each
    address is inside the cluster; ``is_ip`` false forces ``other``.
    """
    rules = rules or CategoryRules()
    proto = np.asarray(ip_protocol, dtype=np.int32)
    sp = np.asarray(src_port, dtype=np.int32)
    dp = np.asarray(dst_port, dtype=np.int32)
    sg = np.asarray(src_group_id, dtype=np.intp)
    dg = np.asarray(dst_group_id, dtype=np.intp)
    n = len(proto)
    vocab = list(groups)

    def table(pred) -> np.ndarray:
        return np.array([bool(pred(g)) for g in vocab], dtype=bool) if vocab else np.zeros(1, dtype=bool)

    sidx = _side_index(proto, sp)
    didx = _side_index(proto, dp)
    codes = np.full(n, _OTHER, dtype=np.int8)
    done = np.zeros(n, dtype=bool) if is_ip is None else ~np.asarray(is_ip, dtype=bool)
    for rule in rules.order:
        if done.all():
            break
        if rule == "rocev2":
            m = _either(sidx, didx, rules.rocev2_ports)
        elif rule == "collective":
            coll = table(lambda g: g in rules.collective_groups)
            m = (
                coll[sg]
                & coll[dg]
                & (np.minimum(sp, dp) >= rules.collective_min_port)
                & _either(sidx, didx, rules.collective_ports)
            )
        elif rule == "storage":
            stor = table(lambda g: g in rules.storage_groups)
            m = _either(sidx, didx, rules.storage_ports)
            m |= _port_side(didx, rules.object_store_ports) & stor[dg]
            m |= _port_side(sidx, rules.object_store_ports) & stor[sg]
        elif rule == "dns":
            m = _either(sidx, didx, rules.dns_ports)
        elif rule == "mgmt":
            m = _either(sidx, didx, rules.mgmt_ports)
        else:  # external
            ext = table(lambda g: g.startswith(rules.external_group_prefix))
            m = ~np.asarray(src_inside, dtype=bool) | ~np.asarray(dst_inside, dtype=bool) | ext[sg] | ext[dg]
        m &= ~done
        codes[m] = CATEGORY_CODE[rule]
        done |= m
    return codes


def categorize_groups(
    ip_protocol: np.ndarray,
    src_port: np.ndarray,
    dst_port: np.ndarray,
    src_group: Sequence[str] | np.ndarray,
    dst_group: Sequence[str] | np.ndarray,
    src_inside: np.ndarray,
    dst_inside: np.ndarray,
    rules: CategoryRules | None = None,
    is_ip: np.ndarray | None = None,
) -> np.ndarray:
    """Like :func:`categorize` but with group names; returns an object array of category names."""
    sg = np.asarray(src_group, dtype=object)
    dg = np.asarray(dst_group, dtype=object)
    vocab, inv = np.unique(np.concatenate([sg, dg]).astype(str), return_inverse=True)
    n = len(sg)
    codes = categorize(
        ip_protocol, src_port, dst_port, inv[:n], inv[n:], [str(v) for v in vocab], src_inside, dst_inside, rules, is_ip
    )
    return category_names(codes)
