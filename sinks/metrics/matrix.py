"""``matrix.windows.v2`` into the flow-metrics families, a window at a time (pure logic, no Kafka).

A :class:`schemas.matrix.MatrixWindow` carries a window's cells of one level and shard as columns over its
label table. The label table is turned into label values once (``node_label``: "" and addresses become
"unknown"); the per-node families (application bytes and packets, SYN, RST, ECN CE, CNP, RoCEv2 operations)
are summed per (node, category) / node with a numpy group-by over the codes and advanced once per group; the
node-pair budget, the rack and group families take one call per cell (their series are per cell). No dict
per cell. A v1 cell dict (tests, tools) goes through the same code as a one-cell window.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from processors.logic.windows.groupby import group_reduce
from schemas.matrix import LEVELS, VALUE_FIELDS, MatrixWindow

from .labels import UNKNOWN, node_label

__all__ = ["BadCell", "as_window", "add_window", "window_identity"]


class BadCell(ValueError):
    """A v1 cell dict whose fields are missing or of the wrong type."""


def as_window(item) -> MatrixWindow:
    """A decoded ``matrix.windows`` value: a :class:`MatrixWindow` as is, a v1 cell dict as a one-cell window
    (``BadCell`` when it is not one)."""
    if isinstance(item, MatrixWindow):
        return item
    if not isinstance(item, Mapping):
        raise BadCell(f"not a matrix cell: {type(item).__name__}")
    for f in ("src", "dst", "category", "level"):
        if not isinstance(item[f], str):
            raise BadCell(f"{f} is not a string: {item[f]!r}")
    if item["level"] not in LEVELS:
        raise BadCell(f"unknown matrix level {item['level']!r}")
    for f in ("window_start_ms", "window_end_ms", "bytes_est", "packets_est"):
        if type(item[f]) is not int:
            raise BadCell(f"{f} is not an integer: {item[f]!r}")
    if any(type(item.get(f, 0)) is not int for f in VALUE_FIELDS):
        raise BadCell("a value column is not an integer")
    return MatrixWindow.from_cells([item])


def window_identity(item, w: MatrixWindow, key: bytes) -> tuple:
    """What a re-emitted duplicate repeats: the Kafka key, and the window with its level, shard and part (v2),
    or the cell's names and window (v1: one key per cell)."""
    if isinstance(item, MatrixWindow):
        return (key, w.level, w.shard, w.part, w.window_start_ms)
    return (key, w.level, item["src"], item["dst"], item["category"], w.window_start_ms)


def _by(codes: np.ndarray, *values: np.ndarray) -> tuple[list[int], list[list[int]]]:
    """(distinct codes, per value column its sum per code) as lists."""
    (k,), sums, _ = group_reduce([codes], list(values))
    return k.tolist(), [s.tolist() for s in sums]


def add_window(state, w: MatrixWindow) -> None:
    """Advance ``state``'s (:class:`sinks.metrics.state.MetricsState`) families by the cells of ``w``."""
    labels = w.labels.tolist()
    names = [node_label(x) for x in labels]
    cats = [x or UNKNOWN for x in labels]
    v = w.values
    src_names = [names[i] for i in w.src.tolist()]
    dst_names = [names[i] for i in w.dst.tolist()]
    cat_names = [cats[i] for i in w.category.tolist()]
    b, p = v["bytes_est"].tolist(), v["packets_est"].tolist()
    if w.level == "rack" or w.level == "group":
        fb, fp = (state.r2r_bytes, state.r2r_packets) if w.level == "rack" else (state.g2g_bytes, state.g2g_packets)
        for key, bi, pi in zip(zip(src_names, dst_names, cat_names), b, p):
            fb.inc(key, bi)
            fp.inc(key, pi)
        return
    ncat = max(len(labels), 1)
    for codes, direction in ((w.src, "tx"), (w.dst, "rx")):
        keys, (kb, kp) = _by(codes.astype(np.int64) * ncat + w.category, v["bytes_est"], v["packets_est"])
        for k, bi, pi in zip(keys, kb, kp):
            key = (names[k // ncat], cats[k % ncat], direction)
            state.app_bytes.inc(key, bi)
            state.app_packets.inc(key, pi)
        for fam, col in ((state.syn, "syn_packets_est"), (state.rst, "rst_packets_est"),
                         (state.ecn, "ecn_ce_packets_est"), (state.cnp, "cnp_packets_est")):
            if not v[col].any():
                continue
            keys, (sums,) = _by(codes, v[col])
            for k, s in zip(keys, sums):
                if s:
                    fam.inc((names[k], direction), s)
    add = state.budget.add
    for s, d, c, bi, pi, syn, rst in zip(src_names, dst_names, cat_names, b, p, v["syn_packets_est"].tolist(),
                                         v["rst_packets_est"].tolist()):
        add(s, d, c, bi, pi, syn, rst)
    state.roce.add_window(w, names, cats, src_names, dst_names)
