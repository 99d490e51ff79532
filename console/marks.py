"""Change markers and step marks in the console: held live (:class:`MarkStore`, fed by the live reader from
``changes.v1`` / ``steps.v1`` and by the console's own POSTs), read from the archive for a range, and the HTTP
write paths that record them.

Write paths (POST /api/marks/change, POST /api/marks/step): with ``console.token`` set they need it like every
request (:class:`console.app.TokenAuth`); they accept only a JSON / NDJSON body (``Content-Type:
application/json`` or ``application/x-ndjson``: a cross-site form or ``text/plain`` fetch cannot send one without
a CORS preflight, which the console never grants) and refuse a request whose ``Origin`` is another site;
``console.accept_marks: false`` turns them off. Step lines are bounded per client address as on the ingest
marks listener (``ingest.marks_max_*``). docs/console.md, "Security".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from schemas.marks import MarkError, change_record, parse_lines

__all__ = ["MarkStore", "mark_routes"]

MAX_BODY = 64 * 1024
_CHANGES_SQL = "SELECT * EXCLUDE (dt, hour) FROM changes ORDER BY time_ms, mark_id"
_STEPS_SQL = """SELECT * EXCLUDE (dt, hour) FROM step_marks WHERE job = $job ORDER BY time_ms, step LIMIT $limit"""


class MarkStore:
    """Recent marks held in memory: the last ``changes`` change markers and ``steps`` step marks per job."""

    def __init__(self, changes: int = 1000, steps: int = 5000):
        self.lock = threading.Lock()
        self._changes: dict[str, dict] = {}
        self.max_changes = changes
        self.max_steps = steps
        self._steps: dict[str, deque] = {}
        self.version = 0

    def add(self, kind: str, rec: dict) -> None:
        with self.lock:
            if kind == "change":
                self._changes[rec["mark_id"]] = rec
                while len(self._changes) > self.max_changes:
                    del self._changes[min(self._changes, key=lambda k: self._changes[k]["time_ms"])]
            else:
                self._steps.setdefault(rec["job"], deque(maxlen=self.max_steps)).append(rec)
            self.version += 1

    def changes(self, lo: int | None = None, hi: int | None = None) -> list[dict]:
        with self.lock:
            out = list(self._changes.values())
        return [c for c in out if (lo is None or c["time_ms"] >= lo) and (hi is None or c["time_ms"] < hi)]

    def steps(self, job: str, lo: int | None = None, hi: int | None = None) -> list[dict]:
        with self.lock:
            out = list(self._steps.get(job, ()))
        return [s for s in out if (lo is None or s["time_ms"] >= lo) and (hi is None or s["time_ms"] < hi)]


def concerns(change: dict, job: str = "", node: str = "", switch: str = "", if_index: int = -1) -> bool:
    """Whether a change belongs on the timeline of a job / node / port: its scope names it, or it has no scope
    (a cluster-wide change). Asked for nothing in particular (the events timeline): every change."""
    scoped = any(change.get(k) for k in ("job", "node", "switch", "src_group"))
    if not scoped or not (job or node or switch):
        return True
    if job and change.get("job") == job:
        return True
    if node and change.get("node") == node:
        return True
    return bool(switch) and change.get("switch") == switch and int(change.get("if_index", -1)) in (-1, if_index)


def _check_write(request: Request, state, kinds: tuple[str, ...]) -> str | None:
    """Why this write request is refused (None = accepted)."""
    if not state.accept_marks:
        return "marks over HTTP are turned off (console.accept_marks)"
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in kinds:
        return f"Content-Type must be {' or '.join(kinds)}"
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc != host:
            return "cross-site request refused (Origin is not this console)"
    elif origin == "null":
        return "cross-site request refused (Origin null)"
    return None


def mark_routes(state, api, error, BadRequest):
    """(path, endpoint, methods) of the marks API; ``api`` wraps a handler as the app's other endpoints."""
    from ingest.marks import TokenBuckets

    buckets = TokenBuckets(state.marks_per_source_per_s, state.marks_per_s)

    async def body_of(request: Request) -> bytes:
        data = await request.body()
        if len(data) > MAX_BODY:
            raise BadRequest(f"body larger than {MAX_BODY} bytes")
        return data

    async def post_change(request: Request, p):
        p.check_unknown()
        why = _check_write(request, state, ("application/json",))
        if why:
            return error(403, why)
        import json

        try:
            d = json.loads(await body_of(request))
        except ValueError:
            raise BadRequest("the body must be one JSON object") from None
        if not isinstance(d, dict):
            raise BadRequest("the body must be one JSON object")
        bad = set(d) - {"text", "job", "node", "switch", "if_index", "src_group", "dst_group", "at", "author"}
        if bad:
            raise BadRequest(f"unknown field {sorted(bad)[0]!r}")
        now = int(time.time() * 1000)
        at = d.get("at")
        if at is not None:
            from query.timerange import parse_time

            try:
                at = parse_time(at)
            except (TypeError, ValueError):
                raise BadRequest("at: an ISO-8601 time or unix ms") from None
        try:
            rec = change_record(d.get("text", ""), now if at is None else at, now, "http", job=d.get("job") or "",
                                node=d.get("node") or "", switch=d.get("switch") or "",
                                if_index=-1 if d.get("if_index") is None else d["if_index"],
                                src_group=d.get("src_group") or "", dst_group=d.get("dst_group") or "",
                                author=d.get("author") or "")
        except MarkError as e:
            raise BadRequest(str(e)) from None
        where = await run_in_threadpool(state.store_mark, "change", rec)
        state.marks.add("change", rec)
        state.store.version += 1
        return {"mark": rec, "stored": where}

    async def post_steps(request: Request, p):
        p.check_unknown()
        why = _check_write(request, state, ("application/json", "application/x-ndjson"))
        if why:
            return error(403, why)
        now = int(time.time() * 1000)
        good, bad = parse_lines(await body_of(request), now, "http")
        if not good and bad:
            raise BadRequest(str(bad[0]))
        client = request.client.host if request.client else "?"
        accepted, limited = [], 0
        for kind, rec in good:
            if buckets.take(client, now / 1000.0):
                accepted.append((kind, rec))
            else:
                limited += 1
        if accepted:
            where = await run_in_threadpool(state.store_marks, accepted)
            for kind, rec in accepted:
                state.marks.add(kind, rec)
            state.store.version += 1
        else:
            where = None
        return {"accepted": len(accepted), "rate_limited": limited, "stored": where,
                "refused": [{"reason": e.reason, "error": str(e)} for e in bad]}

    async def get_marks(request: Request, p):
        p.check_unknown("job", "node", "switch", "if_index", "from", "to", "last", "steps")
        job, node, switch = p.text("job") or "", p.text("node") or "", p.text("switch") or ""
        idx = p.integer("if_index", -1, -1, 2**32 - 1)
        want_steps = p.choice("steps", ("0", "1"), "0") == "1"
        rng = p.range()
        lo, hi = rng if rng else (None, None)
        changes = {c["mark_id"]: c for c in state.marks.changes(lo, hi)}
        steps = state.marks.steps(job, lo, hi) if want_steps and job else []
        if rng is not None and state.history is not None:
            t = await run_in_threadpool(state.history.query, _CHANGES_SQL, lo, hi)
            for c in ([] if t is None else t.to_pylist()):
                changes.setdefault(c["mark_id"], c)
            if want_steps and job:
                t = await run_in_threadpool(state.history.query, _STEPS_SQL, lo, hi, {"job": job, "limit": 20000})
                seen = {(s["time_ms"], s["event"], s["step"]) for s in steps}
                steps += [s for s in ([] if t is None else t.to_pylist())
                          if (s["time_ms"], s["event"], s["step"]) not in seen]
        out = sorted((c for c in changes.values() if concerns(c, job, node, switch, idx)),
                     key=lambda c: (c["time_ms"], c["mark_id"]))
        return {"changes": out, "steps": sorted(steps, key=lambda s: (s["time_ms"], s.get("step", -1)))}

    return [("/api/marks/change", api(post_change), ["POST"]), ("/api/marks/step", api(post_steps), ["POST"]),
            ("/api/marks", api(get_marks), ["GET"])]
