"""The console's web application (Starlette): the page, its JSON APIs and the live event stream.

Thin: parameters are validated here (a bad one is HTTP 400 with a one-line
message), data comes from :class:`console.live.LiveStore` (recent windows held
in memory) or :class:`console.history.History` (the archive), and the JSON is
built by :mod:`console.views`. docs/console.md documents every endpoint.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from processors.logic.enrich.categories import CATEGORIES
from sinks.archive.fs import ArchiveUnavailable

from . import events as ev
from . import views
from .closedloop import closedloop_routes
from .event_routes import event_routes
from .exporters import exporter_routes
from .fabric import fabric_routes
from .history import History
from .http import JSON, BadRequest, Params, error
from .job_routes import job_routes
from .layout import Layout
from .live import LiveStore
from .marks import MarkStore, mark_routes
from .matrix_routes import matrix_routes

STATIC = Path(__file__).parent / "static"


@dataclass
class ConsoleState:
    """What the app serves from; ``feed`` and ``history`` are optional (tests, archive-only or live-only)."""

    layout: Layout
    store: LiveStore
    history: History | None = None
    feed: object | None = None  # console.feed.KafkaFeed (anything with .status())
    token: str | None = None
    max_range_ms: int = 7 * 86_400_000
    extra_status: dict = field(default_factory=dict)
    marks: MarkStore = field(default_factory=MarkStore)  # change markers and step marks held live (console/marks.py)
    store_marks: object | None = None  # [(kind, record)] -> where stored (console.closedloop.mark_storer); None: read-only
    accept_marks: bool = True
    marks_per_s: float = 1000.0
    marks_per_source_per_s: float = 100.0
    window_ms: int = 10_000  # processors.window_s: the compare windows are multiples of it

    def store_mark(self, kind: str, rec: dict) -> str:
        if self.store_marks is None:
            raise ArchiveUnavailable("this console cannot store marks (no broker and no archive)")
        return self.store_marks([(kind, rec)])


# ----------------------------------------------------------------------------- auth


class TokenAuth:
    """ASGI middleware: with a token configured, every request needs ``Authorization: Bearer TOKEN`` or ``?token=``."""

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.token:
            return await self.app(scope, receive, send)
        given = None
        for k, v in scope.get("headers", []):
            if k == b"authorization":
                text = v.decode("latin-1")
                if text.lower().startswith("bearer "):
                    given = text[7:].strip()
        if given is None:
            qs = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (qs.get("token") or [None])[0]
        if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            resp = JSON({"error": "missing or wrong access token (Authorization: Bearer TOKEN or ?token=TOKEN)"},
                        status_code=401, headers={"WWW-Authenticate": "Bearer"})
            return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


# ----------------------------------------------------------------------------- app


def create_app(state: ConsoleState) -> Starlette:
    def api(handler):
        async def endpoint(request: Request):
            try:
                out = await handler(request, Params(request, state))
                return out if isinstance(out, Response) else JSON(out)
            except BadRequest as e:
                return error(400, str(e))
            except ArchiveUnavailable as e:
                return error(503, f"archive unavailable: {e}")
        return endpoint

    async def index(request: Request):
        html = (STATIC / "index.html").read_text()
        tok = request.query_params.get("token") if state.token else None
        suffix = f"?token={quote(tok, safe='')}" if tok else ""
        return HTMLResponse(html.replace("{{asset_query}}", suffix.replace("&", "&amp;")),
                            headers={"Cache-Control": "no-store"})

    async def status(request: Request, p: Params):
        p.check_unknown()
        if state.history is not None and not state.history.ok:  # see at once when the archive is back
            await run_in_threadpool(state.history.check)
        # not configured (--no-live / --no-archive): ok is null, and the page shows no banner for it
        feed = state.feed.status() if state.feed is not None else {"ok": None, "error": None, "configured": False}
        hist = state.history.status() if state.history is not None else {"ok": None, "error": None, "configured": False}
        return {"now_ms": int(time.time() * 1000), "broker": feed, "archive": hist, "live": state.store.summary(),
                "categories": list(CATEGORIES), "levels": list(views.LEVELS), "event_types": list(ev.TYPES),
                **state.extra_status}

    async def inventory(request: Request, p: Params):
        p.check_unknown()
        L = state.layout
        return {"nodes": [n.__dict__ for n in L.nodes], "switches": L.switches,
                "ports": [x.__dict__ for x in L.ports], "jobs": L.jobs}

    async def stream(request: Request):
        async def gen():
            last_v, last_s, last_ping = -1, None, time.monotonic()
            yield "retry: 3000\n\n"
            while not await request.is_disconnected():
                st = (state.feed.status()["ok"] if state.feed else None,
                      state.history.ok if state.history else None)
                v = state.store.version
                if v != last_v or st != last_s:
                    data = {"version": v, "broker_ok": st[0], "archive_ok": st[1],
                            "latest_window_ms": state.store.summary()["latest_window_ms"]}
                    yield f"event: update\ndata: {json.dumps(data)}\n\n"
                    last_v, last_s, last_ping = v, st, time.monotonic()
                elif time.monotonic() - last_ping > 15:
                    yield ": ping\n\n"
                    last_ping = time.monotonic()
                await asyncio.sleep(0.5)
        return StreamingResponse(gen(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def not_found(request: Request, exc):
        return error(404, f"no such path {request.url.path!r}")

    routes = [
        Route("/", index),
        Route("/api/status", api(status)),
        Route("/api/stream", stream),
        *(Route(path, api(fn)) for path, fn in (matrix_routes(state) + fabric_routes(state) + job_routes(state)
                                                 + event_routes(state))),
        Route("/api/inventory", api(inventory)),
        *(Route(path, fn, methods=methods) for path, fn, methods in (
            mark_routes(state, api, error, BadRequest) + closedloop_routes(state, api, BadRequest)
            + exporter_routes(state, api, BadRequest))),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.console = state
    return TokenAuth(app, state.token)


__all__ = ["BadRequest", "ConsoleState", "Response", "create_app"]
