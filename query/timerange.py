"""Times as the query layer takes them (ISO-8601 text, a datetime, unix ms) and the ranges built from them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from query.errors import ArchiveError


def parse_time(value) -> int:
    """Unix ms from an int/float (ms), an aware or naive (= UTC) datetime, or an ISO-8601 string."""
    if isinstance(value, bool):
        raise TypeError("a time cannot be a bool")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"-?\d+", s):
            return int(s)
        try:
            value = datetime.fromisoformat(s)
        except ValueError:
            raise ValueError(f"cannot read {value!r} as a time (ISO-8601 or unix ms)") from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    raise TypeError(f"cannot read {value!r} as a time")


def iso(ms: int) -> str:
    """Unix ms as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_range(lo: int, hi: int) -> None:
    """Raise :class:`ArchiveError` unless ``lo`` is before ``hi``."""
    if hi <= lo:
        raise ArchiveError(f"empty time range: from {iso(lo)} is not before to {iso(hi)}")
