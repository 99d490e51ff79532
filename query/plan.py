"""Which datasets answer a flow report over a time range: the coarsest rollups that answer it exactly, the
raw flows for the rest (docs/archive.md, "Rollups")."""

from __future__ import annotations

from query.errors import ArchiveError
from query.timerange import iso
from sinks.archive import layout

#: ``--source`` of the flow reports -> the dataset it reads (``auto``: :func:`plan_sources`).
SOURCES = {"raw": "flows_enriched", "1m": "traffic_1m", "1h": "traffic_1h"}
SOURCE_CHOICES = ("auto", *SOURCES)


def _aligned(ms: int | None, bucket_ms: int) -> bool:
    return ms is None or ms % bucket_ms == 0


def _ceil(ms: int, b: int) -> int:
    return -(-ms // b) * b


def plan_sources(frm_ms: int | None, to_ms: int | None, present, source: str = "auto",
                 needs_raw: str | None = None) -> list[tuple[str, int | None, int | None]]:
    """The datasets a flow report over [frm_ms, to_ms) reads, as (dataset, from, to) pieces that tile the range.

    ``auto``: the whole hours inside the range from ``traffic_1h``, the whole minutes left at its edges from
    ``traffic_1m``, the rest (under a minute at each end) from ``flows_enriched``; a rollup only if it is
    ``present``, so an archive without rollups reads the raw flows as before. A rollup row is counted in a
    piece when its bucket starts in it, which is exact because pieces are whole buckets. An open end (None) is
    the start or end of the dataset. ``needs_raw`` names what only the raw flows can answer (one exporter's
    view, a node given by address): then ``flows_enriched`` alone. ``raw``/``1m``/``1h`` force one dataset;
    a forced rollup that cannot answer the range exactly raises :class:`ArchiveError` saying why.
    """
    if source not in SOURCE_CHOICES:
        raise ValueError(f"source must be one of {', '.join(SOURCE_CHOICES)}, got {source!r}")
    raw = SOURCES["raw"]
    if source != "auto":
        name = SOURCES[source]
        if name != raw:
            if needs_raw:
                raise ArchiveError(f"{needs_raw} needs the raw flows: use --source raw or auto")
            b = layout.spec(name).bucket_ms
            if not (_aligned(frm_ms, b) and _aligned(to_ms, b)):
                unit = "hours" if b >= layout.HOUR_MS else "minutes"
                raise ArchiveError(
                    f"the {source} rollup answers only ranges of whole {unit} (from "
                    f"{iso(frm_ms) if frm_ms is not None else 'start'} to {iso(to_ms) if to_ms is not None else 'end'})"
                    ": use --source raw or auto")
        return [(name, frm_ms, to_ms)]
    if needs_raw is not None:
        return [(raw, frm_ms, to_ms)]
    levels = sorted(((n, layout.spec(n).bucket_ms) for n in SOURCES.values() if n != raw and n in present),
                    key=lambda x: -x[1])

    def split(lo, hi, levels):
        if lo is not None and hi is not None and hi <= lo:
            return []
        if not levels:
            return [(raw, lo, hi)]
        name, b = levels[0]
        a = None if lo is None else _ceil(lo, b)
        z = None if hi is None else hi // b * b
        if a is not None and z is not None and a >= z:
            return split(lo, hi, levels[1:])
        left = [] if lo is None or a == lo else split(lo, a, levels[1:])
        right = [] if hi is None or z == hi else split(z, hi, levels[1:])
        return left + [(name, a, z)] + right

    return split(frm_ms, to_ms, levels)
