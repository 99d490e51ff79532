"""The console's events endpoints: ``/api/events`` (live and archived detections on one list) and
``/api/event`` (one event with its related events and flows)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sinks.archive.fs import ArchiveUnavailable

from . import events as ev
from .http import Params, error


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


def event_routes(state) -> list[tuple]:
    """(path, handler) of the events endpoints of ``state`` (a :class:`console.app.ConsoleState`)."""

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

    return [("/api/events", events_list), ("/api/event", event_detail)]
