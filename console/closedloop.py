"""The console's closed-loop endpoints: ``/api/compare`` (before vs after a change, :mod:`query.compare`) and
``/api/steps`` (a job's steps aligned with its flows), plus how the console stores a mark it was sent (Kafka when
it has a broker, else a change straight into the archive). docs/console.md, "Compare" and the JSON API."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from .history import ArchiveUnavailable

__all__ = ["closedloop_routes", "mark_storer"]


def mark_storer(settings, live: bool, archive: bool):
    """``store(marks) -> where``: publish ``[(kind, record)]`` to changes.v1 / steps.v1 when the console reads a
    broker, else write change markers into the archive; raises :class:`ArchiveUnavailable` when neither can."""

    def store(marks: list[tuple[str, dict]]) -> str:
        if live:
            from ingest.marks import publish_marks

            try:
                publish_marks(settings.kafka, marks, timeout_s=5.0)
            except RuntimeError as e:
                raise ArchiveUnavailable(f"the broker did not take the marks: {e}") from None
            return "kafka"
        if archive and all(kind == "change" for kind, _ in marks):
            from sinks.archive.marks import write_change

            try:
                for _kind, rec in marks:
                    write_change(settings.archive, rec)
            except OSError as e:
                raise ArchiveUnavailable(f"writing the marker failed: {e}") from None
            return "archive"
        raise ArchiveUnavailable("no broker to publish step marks to (the console runs with --no-live)")

    return store


def closedloop_routes(state, api, BadRequest):
    """(path, endpoint, methods) of /api/compare and /api/steps."""
    from query.compare.report import SCOPES, CompareError, CompareRequest, build_report
    from query.compare.steps import step_table
    from query.errors import ArchiveError
    from query.reports import ArchiveQuery

    def with_query(fn):
        h = state.history
        if h is None:
            raise BadRequest("no archive configured: compare and steps read the archive")
        with h.lock:
            try:
                return fn(ArchiveQuery(h.fs, h.root, h.con))
            except ArchiveError as e:
                raise ArchiveUnavailable(str(e)) from None
            except OSError as e:
                raise ArchiveUnavailable(f"{type(e).__name__}: {e}") from None

    def period(p, a: str, b: str):
        lo, hi = p.time(a), p.time(b)
        if lo is None and hi is None:
            return None
        if lo is None or hi is None or hi <= lo:
            raise BadRequest(f"{a} and {b} go together, {b} after {a}")
        if hi - lo > state.max_range_ms:
            raise BadRequest(f"a period is longer than {state.max_range_ms // 1000} s (console.query_max_range_s)")
        return lo, hi

    async def compare(request: Request, p):
        p.check_unknown("scope", "entity", "bfrom", "bto", "afrom", "ato", "at", "window", "settle")
        scope = p.choice("scope", SCOPES, "job")
        entity = p.text("entity", required=True)
        before, after = period(p, "bfrom", "bto"), period(p, "afrom", "ato")
        if (before is None) != (after is None):
            raise BadRequest("give both periods (bfrom/bto and afrom/ato) or neither (around the latest change)")
        base = state.window_ms
        window, settle = p.duration_ms("window"), p.duration_ms("settle")
        if window is not None and (window < base or window % base):
            raise BadRequest(f"window must be a multiple of {base // 1000} s")
        req = CompareRequest(scope, entity, before, after, window, settle, base, p.time("at"))
        try:
            return await run_in_threadpool(with_query, lambda q: build_report(q, req))
        except CompareError as e:
            raise BadRequest(str(e)) from None

    async def steps(request: Request, p):
        p.check_unknown("job", "from", "to", "last", "limit")
        job = p.text("job", required=True)
        lo, hi = p.range(required=True)
        limit = p.integer("limit", 2000, 1, 20000)
        rows = await run_in_threadpool(with_query, lambda q: step_table(q, job, lo, hi))
        return {"job": job, "start_ms": lo, "end_ms": hi, "steps": rows[-limit:], "total": len(rows),
                "stretched": sum(1 for r in rows if r.get("stretched")),
                "rule": "communication time above median + max(25 % of it, 3 x 1.4826 x MAD, 2 timeline slots)"}

    return [("/api/compare", api(compare), ["GET"]), ("/api/steps", api(steps), ["GET"])]
