"""Marks: training-step lines and change markers, from their wire form (one JSON object) to the records of
``step_mark.avsc`` / ``change_mark.avsc``. Pure: bytes or values in, validated records out, no I/O, no clock.

A mark line is one JSON object (UTF-8, at most :data:`MAX_LINE_BYTES`); a UDP datagram or an HTTP body may hold
several, one per line. A line with ``"kind": "change"`` is a change marker; every other line is a step mark::

    {"job": "train-a", "event": "step_start", "step": 1200}
    {"job": "train-a", "event": "checkpoint_end", "time": 1764600123.25, "node": "gpu01", "rank": 0}
    {"job": "train-a", "event": "phase_start", "phase": "eval"}
    {"kind": "change", "text": "raised NCCL_IB_TIMEOUT to 22", "job": "train-a"}

``time`` (unix seconds, a float as ``time.time()`` gives) is the event time; without it the receive time is.
A bad line raises :class:`MarkError` with a reason from :data:`REASONS` (a bounded metrics label). docs/closed-loop.md,
"The mark protocol", is the reference.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

__all__ = [
    "CHANGE_SCOPE",
    "MAX_LINE_BYTES",
    "MAX_TIME_SKEW_MS",
    "MarkError",
    "REASONS",
    "STEP_EVENTS",
    "change_key",
    "change_record",
    "looks_like_mark",
    "parse_lines",
    "parse_mark",
]

MAX_LINE_BYTES = 2048
MAX_LINES = 64  # lines per datagram / request body
MAX_TEXT = 500
MAX_NAME = 64
MAX_AUTHOR = 100
MAX_TIME_SKEW_MS = 86_400_000  # a sender's time more than a day from the receive time is refused
STEP_EVENTS = ("step_start", "step_end", "checkpoint_start", "checkpoint_end", "eval_start", "eval_end",
               "phase_start", "phase_end")
CHANGE_SCOPE = ("job", "node", "switch", "if_index", "src_group", "dst_group")
#: Why a line was refused (closed set: the metrics label ``reason``).
REASONS = ("too_long", "not_utf8", "not_json", "not_object", "missing_job", "bad_event", "bad_field", "bad_time",
           "missing_text", "too_many_lines")
_NAME = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,64}$")  # inventory names: jobs, nodes, switches, groups, phases
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_STEP_KEYS = {"job", "event", "step", "phase", "node", "rank", "time", "time_ms", "kind", "v"}
_CHANGE_KEYS = {"kind", "text", "time", "time_ms", "author", "v", *CHANGE_SCOPE}


class MarkError(ValueError):
    """A mark that cannot be used; ``reason`` is one of :data:`REASONS`, the message one line."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _name(d: dict, key: str, required: bool = False) -> str:
    v = d.get(key, "")
    if v is None or v == "":
        if required:
            raise MarkError("missing_job" if key == "job" else "bad_field", f"{key} is required")
        return ""
    if not isinstance(v, str) or not _NAME.match(v):
        raise MarkError("bad_field", f"{key} must be a name of 1-{MAX_NAME} letters, digits or _.:@/+- (got {str(v)[:40]!r})")
    return v


def _int(d: dict, key: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if v is None:
        return -1
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MarkError("bad_field", f"{key} must be an integer between {lo} and {hi}")
    return v


def _time_ms(d: dict, received_ms: int, check_skew: bool = True) -> int:
    """The line's event time: ``time_ms`` (integer ms) or ``time`` (seconds), else ``received_ms``."""
    if "time_ms" in d and d["time_ms"] is not None:
        v = d["time_ms"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise MarkError("bad_time", "time_ms must be an integer (unix ms)")
        t = v
    elif "time" in d and d["time"] is not None:
        v = d["time"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MarkError("bad_time", "time must be unix seconds (a number)")
        t = int(round(v * 1000))
    else:
        return int(received_ms)
    if not 0 < t < 32503680000000:
        raise MarkError("bad_time", "time out of range")
    if check_skew and abs(t - received_ms) > MAX_TIME_SKEW_MS:
        raise MarkError("bad_time", "time is more than a day away from the receive time (a wrong clock or unit?)")
    return t


def _step(d: dict, received_ms: int, source: str) -> dict:
    unknown = set(d) - _STEP_KEYS
    if unknown:
        raise MarkError("bad_field", f"unknown field {sorted(unknown)[0]!r}")
    job = _name(d, "job", required=True)
    event = d.get("event")
    if event not in STEP_EVENTS:
        raise MarkError("bad_event", f"event must be one of {', '.join(STEP_EVENTS)} (got {str(event)[:40]!r})")
    phase = _name(d, "phase")
    if event.startswith("phase_") and not phase:
        raise MarkError("bad_field", f"{event} needs a phase name")
    return {"time_ms": _time_ms(d, received_ms), "received_ms": int(received_ms), "job": job, "event": event,
            "step": _int(d, "step", 0, 2**62), "phase": phase, "node": _name(d, "node"),
            "rank": _int(d, "rank", 0, 2**31), "source": source}


def change_key(rec: dict) -> str:
    """Kafka key of a change: its job, else node, else switch, else the group pair, else ``cluster``."""
    if rec.get("job"):
        return rec["job"]
    if rec.get("node"):
        return rec["node"]
    if rec.get("switch"):
        return rec["switch"]
    if rec.get("src_group") or rec.get("dst_group"):
        return f"{rec.get('src_group', '')}>{rec.get('dst_group', '')}"
    return "cluster"


def change_record(text: str, time_ms: int, recorded_ms: int, source: str, *, job: str = "", node: str = "",
                  switch: str = "", if_index: int = -1, src_group: str = "", dst_group: str = "",
                  author: str = "") -> dict:
    """A validated ``change_mark`` record; ``mark_id`` from time, text and scope (the same change gives the same id)."""
    if not isinstance(text, str) or not text.strip():
        raise MarkError("missing_text", "a change needs a text saying what was changed")
    text = text.strip()
    if len(text) > MAX_TEXT or _CTRL.search(text):
        raise MarkError("bad_field", f"text must be at most {MAX_TEXT} characters without control characters")
    if not isinstance(author, str) or len(author) > MAX_AUTHOR or _CTRL.search(author):
        raise MarkError("bad_field", f"author must be at most {MAX_AUTHOR} characters without control characters")
    scope = {"job": job, "node": node, "switch": switch, "src_group": src_group, "dst_group": dst_group}
    for k, v in scope.items():
        scope[k] = _name(scope, k)
    if isinstance(if_index, bool) or not isinstance(if_index, int) or not -1 <= if_index < 2**32:
        raise MarkError("bad_field", "if_index must be an integer ifIndex")
    if if_index >= 0 and not scope["switch"]:
        raise MarkError("bad_field", "if_index needs a switch")
    if bool(scope["src_group"]) != bool(scope["dst_group"]):
        raise MarkError("bad_field", "a group pair needs both src_group and dst_group")
    if not 0 < int(time_ms) < 32503680000000:
        raise MarkError("bad_time", "time out of range")
    ident = json.dumps([int(time_ms), text, scope, if_index], sort_keys=True).encode()
    return {"mark_id": hashlib.sha256(ident).hexdigest()[:16], "time_ms": int(time_ms), "recorded_ms": int(recorded_ms),
            "text": text, **scope, "if_index": int(if_index), "author": author.strip(), "source": source}


def _change(d: dict, received_ms: int, source: str) -> dict:
    unknown = set(d) - _CHANGE_KEYS
    if unknown:
        raise MarkError("bad_field", f"unknown field {sorted(unknown)[0]!r}")
    if_index = d.get("if_index", -1)
    return change_record(d.get("text", ""), _time_ms(d, received_ms), received_ms, source,
                         job=d.get("job") or "", node=d.get("node") or "", switch=d.get("switch") or "",
                         if_index=-1 if if_index is None else if_index, src_group=d.get("src_group") or "",
                         dst_group=d.get("dst_group") or "", author=d.get("author") or "")


def parse_mark(line: bytes | str, received_ms: int, source: str) -> tuple[str, dict]:
    """One JSON line -> ``("step", step_mark record)`` or ``("change", change_mark record)``."""
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogatepass")
    if len(line) > MAX_LINE_BYTES:
        raise MarkError("too_long", f"a mark line is at most {MAX_LINE_BYTES} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise MarkError("not_utf8", "a mark line must be UTF-8") from None
    try:
        d = json.loads(text)
    except ValueError:
        raise MarkError("not_json", "a mark line must be one JSON object") from None
    if not isinstance(d, dict):
        raise MarkError("not_object", "a mark line must be a JSON object")
    if d.get("kind", "step") == "change":
        return "change", _change(d, received_ms, source)
    if d.get("kind", "step") != "step":
        raise MarkError("bad_field", "kind must be step or change")
    return "step", _step(d, received_ms, source)


def parse_lines(data: bytes, received_ms: int, source: str) -> tuple[list[tuple[str, dict]], list[MarkError]]:
    """Every non-empty line of a datagram or body: (good marks in order, errors). At most :data:`MAX_LINES`
    lines are read; the rest count as one ``too_many_lines`` error."""
    good: list[tuple[str, dict]] = []
    bad: list[MarkError] = []
    lines = [x for x in bytes(data).split(b"\n") if x.strip()]
    if len(lines) > MAX_LINES:
        bad.append(MarkError("too_many_lines", f"more than {MAX_LINES} lines in one datagram or request"))
        lines = lines[:MAX_LINES]
    for line in lines:
        try:
            good.append(parse_mark(line.strip(), received_ms, source))
        except MarkError as e:
            bad.append(e)
    return good, bad


def looks_like_mark(payload: bytes) -> bool:
    """True for a datagram that starts (after blanks) with ``{``: mark lines, never an export datagram
    (sFlow/NetFlow/IPFIX start with a version number 0x00 ...)."""
    return bytes(payload[:64]).lstrip()[:1] == b"{"
