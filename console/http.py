"""The console's HTTP vocabulary: JSON responses, one-line errors, validated query parameters.

Every accessor of :class:`Params` raises :class:`BadRequest` with a one-line message (HTTP 400); the route
modules (:mod:`console.app`, :mod:`console.fabric`, :mod:`console.job_routes`, :mod:`console.event_routes`) share these.
"""

from __future__ import annotations

import json
import math
import re
import time

from starlette.requests import Request
from starlette.responses import JSONResponse

from query.render import describe
from query.timerange import parse_time

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_CTRL = re.compile(r"[\x00-\x1f\x7f]")


class BadRequest(Exception):
    pass


def _clean(x):
    """JSON-safe copy: non-finite floats become null (browsers reject NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if x and type(x[0]) is int and type(x[-1]) is int:
            return x
        return [_clean(v) for v in x]
    return x


class JSON(JSONResponse):
    def render(self, content) -> bytes:
        return json.dumps(_clean(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def error(status: int, message: str) -> JSON:
    return JSON({"error": message}, status_code=status)


class Params:
    """Validated query parameters; every accessor raises :class:`BadRequest` with a one-line message."""

    def __init__(self, request: Request, state):
        """``state``: the :class:`console.app.ConsoleState` served (its ``max_range_ms`` bounds ranges)."""
        self.q = request.query_params
        self.state = state
        unknown = set(self.q) - {"token"}
        self.allowed: set[str] = set()
        self._unknown = unknown

    def check_unknown(self, *allowed: str) -> None:
        bad = sorted(self._unknown - set(allowed))
        if bad:
            raise BadRequest(f"unknown parameter {bad[0]!r} (this endpoint takes: {', '.join(allowed) or 'none'})")

    def text(self, name: str, default: str | None = None, required: bool = False, max_len: int = 200) -> str | None:
        v = self.q.get(name)
        if v is None or v == "":
            if required:
                raise BadRequest(f"{name} is required")
            return default
        if len(v) > max_len:
            raise BadRequest(f"{name} is longer than {max_len} characters")
        if _CTRL.search(v):
            raise BadRequest(f"{name} contains control characters")
        return v

    def integer(self, name: str, default: int | None, lo: int, hi: int) -> int | None:
        v = self.q.get(name)
        if v is None or v == "":
            return default
        if not re.fullmatch(r"-?\d{1,19}", v.strip()):
            raise BadRequest(f"{name} must be an integer, got {v[:40]!r}")
        i = int(v)
        if not lo <= i <= hi:
            raise BadRequest(f"{name} must be between {lo} and {hi}, got {i}")
        return i

    def choice(self, name: str, options, default: str) -> str:
        v = self.q.get(name) or default
        if v not in options:
            raise BadRequest(f"{name} must be one of {', '.join(options)}, got {v[:40]!r}")
        return v

    def choices(self, name: str, options) -> list[str]:
        v = self.q.get(name)
        if not v:
            return []
        out = [x.strip() for x in v.split(",") if x.strip()]
        for x in out:
            if x not in options:
                raise BadRequest(f"{name}: unknown value {x[:40]!r} (expected any of {', '.join(options)})")
        return out

    def time(self, name: str) -> int | None:
        v = self.q.get(name)
        if v is None or v == "":
            return None
        try:
            t = parse_time(v)
        except (ValueError, TypeError, OverflowError):
            raise BadRequest(f"{name}: cannot read {v[:40]!r} as a time (ISO-8601 or unix ms)") from None
        if not 0 <= t < 32503680000000:  # year 3000
            raise BadRequest(f"{name}: time out of range")
        return t

    def duration_ms(self, name: str) -> int | None:
        v = self.q.get(name)
        if not v:
            return None
        m = _DURATION.match(v.strip())
        if not m:
            raise BadRequest(f"{name} must be a duration like 90s, 15m, 1h or 2d, got {v[:40]!r}")
        return int(float(m.group(1)) * _UNIT_MS[m.group(2)])

    def range(self, required: bool = False) -> tuple[int, int] | None:
        """[from, to) from ``from``/``to`` or ``last`` (ending now); None when neither is given."""
        frm, to, last = self.time("from"), self.time("to"), self.duration_ms("last")
        if last is not None:
            if frm is not None:
                raise BadRequest("give either last or from/to, not both")
            to = to if to is not None else int(time.time() * 1000)
            frm = to - last
        if frm is None and to is None:
            if required:
                raise BadRequest("a time range is required (from and to, or last)")
            return None
        if frm is None or to is None:
            raise BadRequest("from and to go together")
        if to <= frm:
            raise BadRequest("to must be after from")
        if to - frm > self.state.max_range_ms:
            raise BadRequest(f"the range is longer than {self.state.max_range_ms // 1000} s (console.query_max_range_s)")
        return frm, to


def answered_fields(answered: list[dict]) -> dict:
    """``answered_by`` (the archive datasets that answered, each with its range and file count) and
    ``answered`` (what the page shows: "1-hour rollups + 1-minute rollups")."""
    if not answered:
        return {}
    return {"answered_by": answered, "answered": describe([(a["dataset"],) for a in answered])}

