"""Label values from bounded sets: node names (never an IP), ports, inventory lookups for switches."""

from __future__ import annotations

import ipaddress

__all__ = ["UNKNOWN", "node_label", "is_address"]

UNKNOWN = "unknown"
_CACHE: dict[str, str] = {}


def is_address(text: str) -> bool:
    """True for an IPv4/IPv6 address text (with or without a /prefix)."""
    if not text or not (text[0].isdigit() or ":" in text):
        return False
    try:
        ipaddress.ip_interface(text)
    except ValueError:
        return False
    return True


def node_label(name) -> str:
    """A node (or rack/group/switch) name as a label: "" and addresses become "unknown"."""
    if not name:
        return UNKNOWN
    hit = _CACHE.get(name)
    if hit is None:
        if not isinstance(name, str):
            raise TypeError(f"label value {name!r} is not a string")
        if len(_CACHE) > 100_000:
            _CACHE.clear()
        hit = _CACHE[name] = UNKNOWN if is_address(name) else name
    return hit
