"""The console's traffic-matrix endpoints: ``/api/windows``, ``/api/matrix``, ``/api/matrix/cell`` and
``/api/topn``: the cells of the newest or a chosen live window, or of a time range from the archive."""

from __future__ import annotations

import pyarrow as pa
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from processors.logic.enrich.categories import CATEGORIES

from . import views
from .http import JSON, Params, answered_fields
from .live import CELL_SCHEMA


def _empty_cells() -> pa.Table:
    return CELL_SCHEMA.empty_table()


def _as_cells(t: pa.Table) -> pa.Table:
    """The cell columns of ``t`` in :data:`CELL_SCHEMA` order and types (names as plain strings)."""
    return t.select(CELL_SCHEMA.names).cast(CELL_SCHEMA)


def matrix_routes(state) -> list[tuple]:
    """(path, handler) of the traffic-matrix endpoints of ``state`` (a :class:`console.app.ConsoleState`)."""

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

    return [("/api/windows", windows), ("/api/matrix", matrix), ("/api/matrix/cell", matrix_cell), ("/api/topn", topn)]
