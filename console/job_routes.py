"""The console's job endpoints: ``/api/jobs`` and ``/api/job``, live from :class:`console.live.LiveStore` or, for a
time range, from :class:`console.history.History`."""

from __future__ import annotations

import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sinks.archive.fs import ArchiveUnavailable

from . import events as ev
from . import views
from .http import Params, answered_fields
from .visibility import SERVING_GROUPS, job_visibility

DEFAULT_RANGE_MS = 15 * 60_000


def _visibility(state, name: str, lo: int, hi: int) -> dict:
    """The job's collective visibility and RoCEv2 operations over the complete live windows starting in [lo, hi)
    (console.visibility); the members are the inventory's (or the live job source's) at the console."""
    members = list(state.layout.jobs.get(name, []))
    frontends = {n.name for n in state.layout.nodes if n.group in SERVING_GROUPS}
    newest = state.store.latest_window()
    held = [(s, e) for s, e, _n in state.store.window_list() if lo <= s < hi and newest is not None and s <= newest]
    wins = [(s, e, t) for t, s, e in filter(None, (state.store.cells(s) for s, _e in held))]
    return job_visibility(wins, members, frontends) | {"members": len(members), "source": "live"}


def job_routes(state) -> list[tuple]:
    """(path, handler) of the job endpoints of ``state`` (a :class:`console.app.ConsoleState`)."""

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
        vis = await run_in_threadpool(_visibility, state, name, lo, hi)
        return out | {"start_ms": lo, "end_ms": hi, "source": source, "stragglers": stragglers,
                      "visibility": vis, **answered_fields(answered)}

    return [("/api/jobs", jobs), ("/api/job", job)]
