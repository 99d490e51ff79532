"""The console's fabric endpoints: ``/api/topology`` (the graph of spines, leaves, nodes and links), ``/api/port``
(one switch port over time), ``/api/link`` (one link over time: both ends, utilisation and health per sample) and
``/api/rails`` (per-rail and per-NIC rates). Live from the store, or from the archive for a range, as the other
views. The JSON is built by :mod:`console.topology` and :mod:`console.views`; docs/console.md documents it."""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool

from schemas.columns import addr_str

from . import events as ev
from . import topology as topo
from . import views
from .http import BadRequest, answered_fields

__all__ = ["fabric_routes", "recent_link_events"]

RECENT_MS = 10 * 60_000  # live: link events of the last 10 minutes mark a port
_SERIES = ("time_ms", "util_in", "util_out", "errors_per_s", "discards_per_s", "if_speed", "oper_up")


def recent_link_events(lo: int | None, hi: int | None, evs: list[dict]) -> dict[tuple[str, int], dict[str, int]]:
    """(switch, ifIndex) -> {link event kind: its latest end} of the link events in [lo, hi)."""
    out: dict = {}
    for e in evs:
        if e["type"] != "link":
            continue
        if lo is not None and (e["end_ms"] < lo or e["start_ms"] >= hi):
            continue
        out.setdefault((e["switch"], int(e["if_index"])), {})[e["subtype"]] = e["end_ms"]
    return out


def _live_states(store) -> list[dict]:
    return [{"switch": s.switch, "if_index": s.if_index, "time_ms": s.time_ms, "if_speed": s.if_speed,
             "oper_up": s.oper_up, "util_in": s.util_in, "util_out": s.util_out, "errors_per_s": s.errors_per_s,
             "discards_per_s": s.discards_per_s} for s in store.port_states()]


def link_health_series(layout, key: tuple[str, int], series: dict) -> list[list[str]]:
    """The health flags of each sample of one port's series (as :func:`views.port_health` judges the latest)."""
    info = layout.port_by_key.get(key)
    cfg = info.speed_bps if info else None
    return [views.port_health(cfg, int(sp or 0), up, er, di) for sp, up, er, di in
            zip(series["if_speed"], series["oper_up"], series["errors_per_s"], series["discards_per_s"])]


def fabric_routes(state) -> list[tuple]:
    """(path, handler) of /api/topology, /api/ports, /api/port, /api/link and /api/rails of ``state`` (a
    :class:`console.app.ConsoleState`)."""

    def need_history():
        if state.history is None:
            raise BadRequest("no archive configured for a time range")
        return state.history

    async def port_data(p):
        """(latest port states, recent link events, source) for the request's range or the live window."""
        rng = p.range()
        if rng is None:
            now = int(time.time() * 1000)
            return _live_states(state.store), recent_link_events(now - RECENT_MS, now + 1, state.store.events()), "live"
        h = need_history()
        states = await run_in_threadpool(h.ports_latest, *rng)
        recs = await run_in_threadpool(h.event_records, rng[0], rng[1], {"link"})
        return states, recent_link_events(*rng, [e for r in recs["link"] if (e := ev.link_event(r))]), "archive"

    async def topology(request, p):
        p.check_unknown("from", "to", "last", "group_over", "detail", "expand")
        group_over = p.integer("group_over", topo.GROUP_OVER, 1, 100_000)
        detail = p.choice("detail", ("auto", "all"), "auto")
        expand = [x for x in (p.text("expand", max_len=4000) or "").split(",") if x]
        states, recent, source = await port_data(p)
        g = topo.graph(state.layout, states, recent, group_over)
        return topo.select_links(g, detail, expand) | {"source": source}

    async def ports(request, p):
        p.check_unknown("from", "to", "last")
        states, recent, source = await port_data(p)
        return views.topology(state.layout, states, recent) | {"source": source}

    async def series_of(switch: str, idx: int, rng) -> tuple[dict, str, list[dict]]:
        if rng is None:
            rows, source, answered = state.store.port_series(switch, idx) or [], "live", []
        else:
            agents = [addr_str(a) for a, sw in state.layout.agents.items() if sw == switch]
            rows, answered = await run_in_threadpool(need_history().port_series, switch, idx, *rng, agents)
            source = "archive"
        return {c: [row[i] for row in rows] for i, c in enumerate(_SERIES)}, source, answered

    async def port(request, p):
        p.check_unknown("switch", "if_index", "from", "to", "last")
        switch = p.text("switch", required=True)
        idx = p.integer("if_index", None, 0, 2**32 - 1)
        if idx is None:
            raise BadRequest("if_index is required")
        series, source, answered = await series_of(switch, idx, p.range())
        info = state.layout.port_by_key.get((switch, idx))
        return {"switch": switch, "if_index": idx, "node": info.node if info else "",
                "speed_bps": info.speed_bps if info else None, "source": source, **answered_fields(answered),
                "series": series}

    async def link(request, p):
        p.check_unknown("id", "from", "to", "last")
        link_id = p.text("id", required=True)
        found = topo.find_link(state.layout, link_id)
        if found is None:
            raise BadRequest(f"id must be a link as /api/topology names it (switch:ifIndex), got {link_id[:40]!r}")
        rng = p.range()
        ends, answered, source = [], [], "live"
        for sw, idx in found["ends"]:
            series, source, got = await series_of(sw, idx, rng)
            answered += got
            ends.append({"switch": sw, "if_index": idx, "series": series,
                         "health": link_health_series(state.layout, (sw, idx), series)})
        states, recent, source = await port_data(p)
        now = topo.link_now(state.layout, found, states, recent)
        return {k: v for k, v in found.items() if k != "_of"} | {"ends": ends, "now": now, "source": source,
                                                                 **answered_fields(answered)}

    async def rails(request, p):
        p.check_unknown("from", "to", "last", "below")
        below = p.integer("below", int(topo.BELOW_SHARE * 100), 1, 100) / 100
        rng = p.range()
        if rng is None:
            rates, source = topo.live_rates(_live_states(state.store)), "live"
        else:
            rows = await run_in_threadpool(need_history().ports_rates, *rng)
            rates, source = {(r["switch"], int(r["if_index"])): r for r in rows}, "archive"
        return topo.rails(state.layout, rates, below) | {"source": source}

    return [("/api/topology", topology), ("/api/ports", ports), ("/api/port", port), ("/api/link", link),
            ("/api/rails", rails)]
