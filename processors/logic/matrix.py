"""Traffic matrix per window: enriched flows -> MatrixCell dicts (matrix_cell.avsc).

``CellAggregator`` is the window aggregator shared by the matrix, straggler and
pattern detectors: per window it keeps estimated bytes, estimated packets, flow
records and samples (sampled packets) per (src node, dst node, src group, dst
group, src job, dst job, category), as columns of interned string codes.
``matrix_cells`` turns one closed window into node x node and group x group
cells. Pure logic; time comes in with the data.

Cells from workers that saw different exporters are additive: summing
bytes_est / packets_est / flow_records / samples of equal (window, level, src,
dst, category) keys gives the cluster-wide cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .windows import Interner, dump_columns, group_reduce, load_columns

__all__ = ["MatrixConfig", "CellAggregator", "KEY_COLUMNS", "VALUE_COLUMNS", "matrix_cells", "UNKNOWN"]

# key columns (int32 interned codes) and value columns (int64) of a window state
KEY_COLUMNS = ("sn", "dn", "sg", "dg", "sj", "dj", "cat")
VALUE_COLUMNS = ("bytes_est", "packets_est", "flow_records", "samples")
UNKNOWN = "unknown"


@dataclass(frozen=True)
class MatrixConfig:
    """Traffic matrix settings.

    levels: which matrices to emit ("node", "group").
    min_bytes_est: cells with fewer estimated bytes are not emitted (0 = all).
    compact_rows: a window state re-aggregates its pending partial groups once
      they exceed this many rows (memory/CPU trade-off only; results identical).
    """

    levels: tuple[str, ...] = ("node", "group")
    min_bytes_est: int = 0
    compact_rows: int = 50_000


class CellAggregator:
    """Window aggregator (initialize / agg / result) over interned cell keys."""

    def __init__(self, compact_rows: int = 50_000):
        self.compact_rows = compact_rows

    def initialize(self) -> dict:
        return {"chunks": [], "rows": 0, "compacted": 0}

    @staticmethod
    def _reduce(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        if len(chunks) == 1:
            return chunks[0]
        cat = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
        keys, sums, _ = group_reduce([cat[k] for k in KEY_COLUMNS], [cat[v] for v in VALUE_COLUMNS])
        out = dict(zip(KEY_COLUMNS, keys))
        out.update(zip(VALUE_COLUMNS, sums))
        return out

    def agg(self, state: dict, rows: dict[str, np.ndarray], window_start: int) -> dict:
        keys, sums, _ = group_reduce([rows[k] for k in KEY_COLUMNS], [rows[v] for v in VALUE_COLUMNS])
        part = dict(zip(KEY_COLUMNS, keys))
        part.update(zip(VALUE_COLUMNS, sums))
        chunks = state["chunks"] + [part]
        nrows = state["rows"] + len(keys[0])
        compacted = state["compacted"]
        if nrows > max(self.compact_rows, 2 * compacted):
            merged = self._reduce(chunks)
            chunks = [merged]
            nrows = compacted = len(merged["sn"])
        return {"chunks": chunks, "rows": nrows, "compacted": compacted}

    def result(self, state: dict, window_start: int, window_end: int) -> dict[str, np.ndarray]:
        if not state["chunks"]:
            return {k: np.zeros(0, np.int32) for k in KEY_COLUMNS} | {v: np.zeros(0, np.int64) for v in VALUE_COLUMNS}
        return self._reduce(state["chunks"])

    def dump(self, state: dict) -> dict:
        merged = self.result(state, 0, 0)
        return dump_columns(merged)

    def load(self, obj: dict) -> dict:
        cols = load_columns(obj)
        n = len(cols["sn"])
        return {"chunks": [cols] if n else [], "rows": n, "compacted": n}


def matrix_cells(
    cells: dict[str, np.ndarray],
    interner: Interner,
    window_start: int,
    window_end: int,
    config: MatrixConfig = MatrixConfig(),
) -> list[dict]:
    """MatrixCell dicts for one closed window, sorted by (level, src, dst, category)."""
    out: list[dict] = []
    for level, (ks, kd) in (("node", ("sn", "dn")), ("group", ("sg", "dg"))):
        if level not in config.levels or len(cells["sn"]) == 0:
            continue
        keys, sums, _ = group_reduce([cells[ks], cells[kd], cells["cat"]], [cells[v] for v in VALUE_COLUMNS])
        src = interner.lookup(keys[0]).tolist()
        dst = interner.lookup(keys[1]).tolist()
        cat = interner.lookup(keys[2]).tolist()
        b, p, r, s = (x.tolist() for x in sums)
        for i in range(len(src)):
            out.append(
                {
                    "window_start_ms": int(window_start),
                    "window_end_ms": int(window_end),
                    "level": level,
                    "src": src[i] or UNKNOWN,
                    "dst": dst[i] or UNKNOWN,
                    "category": cat[i],
                    "bytes_est": int(b[i]),
                    "packets_est": int(p[i]),
                    "flow_records": int(r[i]),
                    "samples": int(s[i]),
                }
            )
    out.sort(key=lambda c: (c["level"], c["src"], c["dst"], c["category"]))
    # "" and "unknown" both map to "unknown" at node level: merge equal keys
    merged: list[dict] = []
    for c in out:
        if merged and all(merged[-1][k] == c[k] for k in ("level", "src", "dst", "category")):
            for v in VALUE_COLUMNS:
                merged[-1][v] += c[v]
        else:
            merged.append(c)
    return [c for c in merged if c["bytes_est"] >= config.min_bytes_est]
