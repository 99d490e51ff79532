"""The console's fabric endpoints: ``/api/topology``, ``/api/port``, ``/api/jobs`` and ``/api/job``, live from
:class:`console.live.LiveStore` or, for a time range, from :class:`console.history.History`."""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from schemas.columns import addr_str
from sinks.archive.fs import ArchiveUnavailable

from . import events as ev
from . import views
from .http import BadRequest, Params, answered_fields

DEFAULT_RANGE_MS = 15 * 60_000


def fabric_routes(state) -> list[tuple]:
    """(path, handler) of the fabric endpoints of ``state`` (a :class:`console.app.ConsoleState`)."""

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

    return [("/api/topology", topology), ("/api/port", port), ("/api/jobs", jobs), ("/api/job", job)]
