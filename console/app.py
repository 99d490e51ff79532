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
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote

import pyarrow as pa
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from processors.logic.enrich.categories import CATEGORIES
from query.render import describe
from query.timerange import parse_time
from schemas.columns import addr_str
from sinks.archive.fs import ArchiveUnavailable

from . import events as ev
from . import views
from .closedloop import closedloop_routes
from .exporters import exporter_routes
from .history import History
from .layout import Layout
from .live import CELL_SCHEMA, LiveStore
from .marks import MarkStore, mark_routes

STATIC = Path(__file__).parent / "static"
DEFAULT_RANGE_MS = 15 * 60_000
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_CTRL = re.compile(r"[\x00-\x1f\x7f]")


class BadRequest(Exception):
    pass


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


# ----------------------------------------------------------------------------- JSON


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


# ----------------------------------------------------------------------------- parameters


class Params:
    """Validated query parameters; every accessor raises :class:`BadRequest` with a one-line message."""

    def __init__(self, request: Request, state: ConsoleState):
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

    def live_window(p: Params) -> tuple[str, int, int] | None:
        """("window", start, end) for ?window= or the newest live window."""
        w = p.integer("window", None, 0, 2**53)
        if w is None:
            w = state.store.latest_window()
            if w is None:
                return None
        held = state.store.cells(w)
        if held is not None:
            return ("live", held[1], held[2])
        size = state.store.window_ms or 10_000
        return ("archive", w, w + size)

    def cells_for(p: Params, level: str):
        """(cells table, start, end, windows, source, answered) for the request's window or range; ``answered``:
        what answered it (:func:`answered_fields`)."""
        rng = p.range()
        if rng is None:
            sel = live_window(p)
            if sel is None:
                return None
            source, lo, hi = sel
            if source == "live":
                return state.store.cells(lo)[0], lo, hi, 1, "live", {}
            rng = (lo, hi)
        lo, hi = rng
        held = state.store.cells_range(lo, hi)
        if held is not None and held[1] > 0:
            return held[0], lo, hi, held[1], "live", {}
        if state.history is None:
            return None
        cells, windows, answered = state.history.matrix_cells(lo, hi, "group" if level == "group" else "node")
        return cells, lo, hi, windows, "archive", answered_fields(answered)

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

    async def windows(request: Request, p: Params):
        p.check_unknown("from", "to", "last")
        rng = p.range()
        live = [{"start_ms": s, "end_ms": e, "cells": c} for s, e, c in state.store.window_list()]
        archive = []
        if rng is not None and state.history is not None:
            archive = [{"start_ms": s, "end_ms": e} for s, e in
                       await run_in_threadpool(state.history.matrix_windows, *rng)]
        return {"live": live, "archive": archive}

    async def matrix(request: Request, p: Params):
        p.check_unknown("window", "from", "to", "last", "level", "category", "encoding")
        level = p.choice("level", views.LEVELS, "node")
        cats = p.choices("category", CATEGORIES)
        enc = p.choice("encoding", ("list", "b64"), "list")
        got = await run_in_threadpool(cells_for, p, level)
        if got is None:
            return views.matrix(_empty_cells(), state.layout, level, cats, 0, 0, 0, enc) | {"source": "none"}
        cells, lo, hi, n, source, answered = got
        return await run_in_threadpool(lambda: JSON(views.matrix(cells, state.layout, level, cats, lo, hi, n, enc)
                                                    | {"source": source, **answered}))

    async def matrix_cell(request: Request, p: Params):
        p.check_unknown("window", "from", "to", "last", "level", "src", "dst")
        level = p.choice("level", views.LEVELS, "node")
        src, dst = p.text("src", required=True), p.text("dst", required=True)
        got = await run_in_threadpool(cells_for, p, level)
        if got is None:
            return views.cell_detail(_empty_cells(), state.layout, level, src, dst, 0, 0)
        cells, lo, hi, _n, source, answered = got
        return views.cell_detail(cells, state.layout, level, src, dst, lo, hi) | {"source": source, **answered}

    async def topn(request: Request, p: Params):
        p.check_unknown("window", "from", "to", "last", "level", "category", "n")
        level = p.choice("level", views.LEVELS, "group")
        cats = p.choices("category", CATEGORIES)
        n = p.integer("n", 10, 1, 200)
        got = await run_in_threadpool(cells_for, p, level)
        if got is None:
            return views.topn(_empty_cells(), state.layout, level, cats, n, 0, 0) | {"source": "none"}
        cells, lo, hi, _n, source, answered = got
        if source == "archive" and level == "group":  # the top talkers come from node cells
            node = await run_in_threadpool(cells_for, p, "node")
            cells = pa.concat_tables([_as_cells(cells), _as_cells(node[0])], promote_options="permissive")
        return views.topn(cells, state.layout, level, cats, n, lo, hi) | {"source": source, **answered}

    def _recent_link_events(lo: int | None, hi: int | None, evs: list[dict]) -> dict:
        out: dict = {}
        for e in evs:
            if e["type"] != "link":
                continue
            if lo is not None and (e["end_ms"] < lo or e["start_ms"] >= hi):
                continue
            out.setdefault((e["switch"], int(e["if_index"])), {})[e["subtype"]] = e["end_ms"]
        # a port that came back up or regained its speed after the event is not flagged by the older event
        return out

    async def topology(request: Request, p: Params):
        p.check_unknown("from", "to", "last")
        rng = p.range()
        if rng is None:
            states = [{"switch": s.switch, "if_index": s.if_index, "time_ms": s.time_ms, "if_speed": s.if_speed,
                       "oper_up": s.oper_up, "util_in": s.util_in, "util_out": s.util_out,
                       "errors_per_s": s.errors_per_s, "discards_per_s": s.discards_per_s}
                      for s in state.store.port_states()]
            now = int(time.time() * 1000)
            recent = _recent_link_events(now - 10 * 60_000, now + 1, state.store.events())
            source = "live"
        else:
            if state.history is None:
                raise BadRequest("no archive configured for a time range")
            states = await run_in_threadpool(state.history.ports_latest, *rng)
            recs = await run_in_threadpool(state.history.event_records, rng[0], rng[1], {"link"})
            recent = _recent_link_events(*rng, [e for r in recs["link"] if (e := ev.link_event(r))])
            source = "archive"
        return views.topology(state.layout, states, recent) | {"source": source}

    async def port(request: Request, p: Params):
        p.check_unknown("switch", "if_index", "from", "to", "last")
        switch = p.text("switch", required=True)
        idx = p.integer("if_index", None, 0, 2**32 - 1)
        if idx is None:
            raise BadRequest("if_index is required")
        rng = p.range()
        answered = []
        if rng is None:
            series = state.store.port_series(switch, idx) or []
            source = "live"
        else:
            if state.history is None:
                raise BadRequest("no archive configured for a time range")
            agents = [addr_str(a) for a, sw in state.layout.agents.items() if sw == switch]
            series, answered = await run_in_threadpool(state.history.port_series, switch, idx, *rng, agents)
            source = "archive"
        info = state.layout.port_by_key.get((switch, idx))
        cols = ("time_ms", "util_in", "util_out", "errors_per_s", "discards_per_s", "if_speed", "oper_up")
        return {"switch": switch, "if_index": idx, "node": info.node if info else "",
                "speed_bps": info.speed_bps if info else None, "source": source, **answered_fields(answered),
                "series": {c: [row[i] for row in series] for i, c in enumerate(cols)}}

    async def jobs(request: Request, p: Params):
        p.check_unknown()
        names = dict(state.layout.jobs)
        scored: dict[str, int] = {}
        for s in state.store.straggler_scores():
            names.setdefault(s["job"], [])
            scored[s["job"]] = scored.get(s["job"], 0) + 1
        # live_scores: the straggler scores the live window holds for the job; the page opens on the first job
        # that has some (every job with nodes has its nodes' send/receive rates in /api/job's traffic)
        return {"jobs": [{"name": j, "nodes": n, "live_scores": scored.get(j, 0)} for j, n in sorted(names.items())]}

    async def job(request: Request, p: Params):
        p.check_unknown("name", "from", "to", "last")
        name = p.text("name", required=True)
        rng = p.range()
        if rng is None:
            scores = state.store.straggler_scores(name)
            nodes = views.job_nodes(state.layout, name, scores)
            # each node's send/receive rate per held matrix window (all its traffic, not only the job's)
            held = await run_in_threadpool(state.store.node_totals)
            traffic = views.window_traffic(nodes, held) | {"source": "live"}
            spans = [(s["window_start_ms"], s["window_end_ms"]) for s in scores] + [(s, e) for s, e, _ in held]
            if spans:
                lo = min(s for s, _ in spans)
                hi = max(e for _, e in spans)
            else:
                hi = int(time.time() * 1000)
                lo = hi - DEFAULT_RANGE_MS
            source = "live"
        else:
            lo, hi = rng
            scores = await run_in_threadpool(state.history.scores, name, lo, hi) if state.history else []
            nodes = views.job_nodes(state.layout, name, scores)
            if state.history is not None:
                rows, t_bin, bucket, t_answered = await run_in_threadpool(state.history.node_traffic, nodes, lo, hi)
                traffic = views.binned_traffic(nodes, rows, lo, hi, t_bin, bucket) | {
                    "source": "archive", **answered_fields(t_answered)}
            else:  # no archive: the live windows held in the range
                held = await run_in_threadpool(state.store.node_totals, lo, hi)
                traffic = views.window_traffic(nodes, held) | {"source": "live"}
            source = "archive"
        bin_ms = max(1000, (hi - lo) // 600 // 1000 * 1000)
        phases, period, answered = [], None, []
        if state.history is not None:
            try:  # the phases from the smallest dataset that answers (bins of its buckets for long ranges)
                phases, bin_ms, answered = await run_in_threadpool(state.history.phases, name, lo, hi)
                comm = [int(r["t"]) for r in phases if r["phase"] == "communication"]
                if comm:  # the period from the last minutes of the job's communication, not of the range
                    period = await run_in_threadpool(state.history.iteration_period_ms, name, lo, hi, 100,
                                                     max(comm) + bin_ms)
            except ArchiveUnavailable:
                phases, period = [], None
        out = views.job_view(state.layout, name, scores, phases, bin_ms, period, state.store.pattern_records(name),
                             traffic)
        stragglers = [e for e in ev.straggler_events(scores, state.store.window_ms)]
        return out | {"start_ms": lo, "end_ms": hi, "source": source, "stragglers": stragglers,
                      **answered_fields(answered)}

    def _all_events(rng, types: set[str]) -> list[dict]:
        out = {e["id"]: e for e in state.store.events() if e["type"] in types}
        if rng is not None and state.history is not None:
            recs = state.history.event_records(rng[0], rng[1], types)
            arch = ev.merge_incast(recs.get("incast", [])) + ev.straggler_events(recs.get("straggler", []),
                                                                                 state.store.window_ms)
            for r in recs.get("link", []):
                port_info = state.layout.port_by_key.get((r.get("switch"), r.get("if_index")))
                if (e := ev.link_event(r, port_info.node if port_info else "")) is not None:
                    arch.append(e)
            latest = {r["dedup_key"]: r for r in recs.get("alert", [])}  # by last_seen: the latest message
            arch += [ev.alert_event(r) for r in latest.values()]
            for e in arch:
                out.setdefault(e["id"], e)
        evs = list(out.values())
        if rng is not None:
            evs = [e for e in evs if e["end_ms"] >= rng[0] and e["start_ms"] < rng[1]]
        return sorted(evs, key=lambda e: (e["start_ms"], e["id"]))

    async def events_list(request: Request, p: Params):
        p.check_unknown("from", "to", "last", "types", "q", "severity", "limit")
        rng = p.range()
        types = set(p.choices("types", ev.TYPES) or ev.TYPES)
        sev = p.choices("severity", ("info", "warning", "critical"))
        q = (p.text("q") or "").lower()
        limit = p.integer("limit", 1000, 1, 10_000)
        evs = await run_in_threadpool(_all_events, rng, types)
        if sev:
            evs = [e for e in evs if e["severity"] in sev]
        if q:
            evs = [e for e in evs if q in e["summary"].lower() or q in str(e["entity"]).lower()
                   or q in _verdict_text(e)]
        total = len(evs)
        evs = evs[-limit:]
        return {"events": [{k: _brief(k, v) for k, v in e.items() if k != "evidence"} for e in evs], "total": total,
                "truncated": total > len(evs), "source": "live+archive" if rng else "live"}

    async def event_detail(request: Request, p: Params):
        p.check_unknown("id", "from", "to", "last", "flows")
        eid = p.text("id", required=True, max_len=500)
        rng = p.range()
        nflows = p.integer("flows", 20, 1, 500)
        evs = await run_in_threadpool(_all_events, rng, set(ev.TYPES))
        event = next((e for e in evs if e["id"] == eid), None)
        if event is None:
            return error(404, f"no event {eid!r} in the live window" + (" or the archive range" if rng else ""))
        rel = ev.related(event, evs, state.layout)
        flows, flows_error = [], None
        lo, hi = event["start_ms"], event["end_ms"]
        if hi - lo < 10_000:  # short windows (incast): the surrounding matrix window
            size = state.store.window_ms or 10_000
            lo, hi = lo // size * size, max(hi, lo // size * size + size)
        filt: dict = {}
        if event["type"] == "incast":
            filt = {"dst": event["entity"]}
        elif event["type"] == "straggler":
            filt = {"node": event["entity"]}
        elif event["type"] == "link" and event.get("nodes"):
            filt = {"node": event["nodes"][0]}
        elif event["type"] == "alert":
            ents = event["evidence"]["entities"]
            filt = {"src": ents.get("src_node", ""), "dst": ents.get("dst_node", "")}
        if state.history is None:
            flows_error = "no archive configured"
        else:
            try:
                flows = await run_in_threadpool(lambda: state.history.flows(lo, hi, limit=nflows, **filt))
            except ArchiveUnavailable as e:
                flows_error = f"archive unavailable: {e}"
        return {"event": event, "related": rel, "flows": flows, "flows_error": flows_error,
                "flows_range": {"start_ms": lo, "end_ms": hi, **filt}}

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
        Route("/api/windows", api(windows)),
        Route("/api/matrix", api(matrix)),
        Route("/api/matrix/cell", api(matrix_cell)),
        Route("/api/topn", api(topn)),
        Route("/api/topology", api(topology)),
        Route("/api/port", api(port)),
        Route("/api/jobs", api(jobs)),
        Route("/api/job", api(job)),
        Route("/api/events", api(events_list)),
        Route("/api/event", api(event_detail)),
        Route("/api/inventory", api(inventory)),
        *(Route(path, fn, methods=methods) for path, fn, methods in (
            mark_routes(state, api, error, BadRequest) + closedloop_routes(state, api, BadRequest)
            + exporter_routes(state, api, BadRequest))),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.console = state
    return TokenAuth(app, state.token)


def _verdict_text(event: dict) -> str:
    """The event's diagnosis verdict and title, lower case, for the events search ("" without one)."""
    d = event.get("diagnosis") or {}
    return f"{d.get('verdict', '')} {d.get('title', '')}".lower()


def _brief(key: str, value):
    """A field of an event as the events list sends it: the diagnosis as its verdict and title only (the detail
    view has the rest)."""
    if key == "diagnosis" and value:
        return {"verdict": value["verdict"], "title": value["title"]}
    return value


def answered_fields(answered: list[dict]) -> dict:
    """``answered_by`` (the archive datasets that answered, each with its range and file count) and
    ``answered`` (what the page shows: "1-hour rollups + 1-minute rollups")."""
    if not answered:
        return {}
    return {"answered_by": answered, "answered": describe([(a["dataset"],) for a in answered])}


def _empty_cells() -> pa.Table:
    return CELL_SCHEMA.empty_table()


def _as_cells(t: pa.Table) -> pa.Table:
    """The cell columns of ``t`` in :data:`CELL_SCHEMA` order and types (names as plain strings)."""
    return t.select(CELL_SCHEMA.names).cast(CELL_SCHEMA)


__all__ = ["BadRequest", "ConsoleState", "Response", "create_app"]
