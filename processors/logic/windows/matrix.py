"""Traffic matrix per window: enriched flows -> MatrixWindow columns (matrix_window_v2.avsc).

``CellAggregator`` is the window aggregator shared by the matrix, straggler and
pattern detectors: per window it keeps estimated bytes, estimated packets, flow
records, samples (sampled packets) and the estimated TCP / congestion signal
packets (SYN, RST, ECN CE, RoCEv2 CNP: see :func:`signal_columns`) per (src node,
dst node, src group, dst group, src job, dst job, category, src rack, dst rack),
as columns of interned string codes. ``matrix_windows`` turns one closed window
into node x node, rack x rack and group x group cells, one columnar message per level. Pure logic; time comes
in with the data.

Cells from workers that saw different exporters are additive: summing every
value column of equal (window, level, src, dst, category) keys gives the
cluster-wide cell.
"""

from __future__ import annotations


import numpy as np
from pydantic import Field

from schemas.matrix import MatrixWindow

from ..params import detector_params
from .groupby import group_reduce
from .interning import Interner
from .roce import ROCE_OP_COLUMNS, roce_op_columns
from .snapshots import dump_columns, load_columns

__all__ = [
    "MatrixConfig", "CellAggregator", "KEY_COLUMNS", "VALUE_COLUMNS", "SIGNAL_COLUMNS", "HIDDEN_COLUMNS",
    "WINDOW_COLUMNS", "LEVELS", "matrix_cells", "matrix_windows", "signal_columns", "UNKNOWN",
]  # fmt: skip

# key columns (int32 interned codes) and value columns (int64) of a window state; the rack columns come last so
# that adding them left the interner's code order of the other labels as it was
KEY_COLUMNS = ("sn", "dn", "sg", "dg", "sj", "dj", "cat", "sr", "dr")
SIGNAL_COLUMNS = ("syn_packets_est", "rst_packets_est", "ecn_ce_packets_est", "cnp_packets_est", *ROCE_OP_COLUMNS)
VALUE_COLUMNS = ("bytes_est", "packets_est", "flow_records", "samples", *SIGNAL_COLUMNS)
# window-state columns that no matrix cell emits: RoCEv2 packets whose BTH the record showed (sFlow header samples;
# NetFlow/IPFIX never): whether an absence of CNPs can be judged (the diagnosis)
HIDDEN_COLUMNS = ("bth_packets_est",)
WINDOW_COLUMNS = (*VALUE_COLUMNS, *HIDDEN_COLUMNS)
# matrix level -> (src key column, dst key column); cells come out sorted by level name
LEVELS = {"group": ("sg", "dg"), "node": ("sn", "dn"), "rack": ("sr", "dr")}
UNKNOWN = "unknown"
TCP = 6
TCP_SYN, TCP_RST = 0x02, 0x04
ECN_CE = 3  # IP ECN bits 11
ROCE_CNP = 0x81  # RoCEv2 BTH opcode of a congestion notification packet


def signal_columns(batch) -> dict[str, np.ndarray]:
    """The SIGNAL_COLUMNS of a flow batch (``flow_enriched`` rows or anything indexable by field), int64.

    - ``syn_packets_est`` / ``rst_packets_est``: TCP records whose ``tcp_flags`` has SYN / RST, each counted as
      its sampling rate (one sampled packet scaled). sFlow: one record per sampled packet, so this is the
      estimate; NetFlow/IPFIX: ``tcp_flags`` is an OR over the flow's packets, so a record stands for at least
      one such packet: a lower bound.
    - ``ecn_ce_packets_est``: ``packets_est`` of records whose ``tos & 3 == 3`` (IP ECN CE mark).
    - ``cnp_packets_est``: ``packets_est`` of records whose RoCEv2 BTH opcode is 0x81 (CNP; sFlow header
      samples only, -1 elsewhere).
    - ``roce_<op>_packets_est``: ``packets_est`` of records whose BTH opcode is that RoCEv2 operation (send,
      write, read_request, read_response, ack, atomic: :mod:`.roce`).
    - ``bth_packets_est`` (a window column no cell emits): ``packets_est`` of records with a BTH opcode.
    """
    rate = np.maximum(np.asarray(batch["sampling_rate"], dtype=np.int64), 1)
    packets_est = np.asarray(batch["packets_est"], dtype=np.int64)
    tcp = np.asarray(batch["ip_protocol"]) == TCP
    flags = np.asarray(batch["tcp_flags"])
    zero = np.zeros(len(rate), dtype=np.int64)
    return {
        "syn_packets_est": np.where(tcp & ((flags & TCP_SYN) != 0), rate, zero),
        "rst_packets_est": np.where(tcp & ((flags & TCP_RST) != 0), rate, zero),
        "ecn_ce_packets_est": np.where((np.asarray(batch["tos"]) & 3) == ECN_CE, packets_est, zero),
        "cnp_packets_est": np.where(np.asarray(batch["roce_opcode"]) == ROCE_CNP, packets_est, zero),
        "bth_packets_est": np.where(np.asarray(batch["roce_opcode"]) >= 0, packets_est, zero),
        **roce_op_columns(batch["roce_opcode"], packets_est),
    }


@detector_params
class MatrixConfig:
    """Traffic matrix parameters (docs/detectors.md, "Traffic matrix")."""

    levels: tuple[str, ...] = Field(("node", "rack", "group"), description="Matrices to emit per window (node, rack, group)")
    min_bytes_est: int = Field(0, ge=0, description="Cells with fewer estimated bytes are not emitted (0 = all)")
    compact_rows: int = Field(50_000, ge=1, description="A window re-aggregates its pending partial groups beyond this many rows (memory/CPU only; results identical)")
    max_cells_per_message: int = Field(20_000, ge=1, description="A window's cells at one level go out in one matrix.windows.v2 message, split into parts of at most this many cells (about 30 bytes each: keeps a message under Kafka's 1 MB default)")


class CellAggregator:
    """Window aggregator (initialize / agg / result) over interned cell keys."""

    def __init__(self, compact_rows: int = 50_000):
        self.compact_rows = compact_rows

    def initialize(self) -> dict:
        return {"chunks": [], "rows": 0, "compacted": 0}

    @staticmethod
    def _reduce(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        cat = chunks[0] if len(chunks) == 1 else {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
        keys, sums, _ = group_reduce([cat[k] for k in KEY_COLUMNS], [cat[v] for v in WINDOW_COLUMNS])
        out = dict(zip(KEY_COLUMNS, keys))
        out.update(zip(WINDOW_COLUMNS, sums))
        return out

    def agg(self, state: dict, rows: dict[str, np.ndarray], window_start: int) -> dict:
        # Rows are kept as they come (no group-by per batch); they are reduced once they exceed compact_rows
        # and at close. Integer sums do not depend on the grouping, so results are identical.
        part = {k: rows[k] for k in (*KEY_COLUMNS, *VALUE_COLUMNS)}
        for h in HIDDEN_COLUMNS:
            part[h] = rows[h] if h in rows else np.zeros(len(part["sn"]), np.int64)
        chunks = state["chunks"] + [part]
        nrows = state["rows"] + len(part["sn"])
        compacted = state["compacted"]
        if nrows > max(self.compact_rows, 2 * compacted):
            merged = self._reduce(chunks)
            chunks = [merged]
            nrows = compacted = len(merged["sn"])
        return {"chunks": chunks, "rows": nrows, "compacted": compacted}

    def result(self, state: dict, window_start: int, window_end: int) -> dict[str, np.ndarray]:
        if not state["chunks"]:
            return {k: np.zeros(0, np.int32) for k in KEY_COLUMNS} | {v: np.zeros(0, np.int64) for v in WINDOW_COLUMNS}
        return self._reduce(state["chunks"])

    def dump(self, state: dict) -> dict:
        merged = self.result(state, 0, 0)
        if len(state["chunks"]) > 1 or state["rows"] != state["compacted"]:  # keep the reduction (same contents)
            n = len(merged["sn"])
            state.update(chunks=[merged] if n else [], rows=n, compacted=n)
        return dump_columns(merged)

    def load(self, obj: dict) -> dict:
        cols = load_columns(obj)
        n = len(cols["sn"])
        # a snapshot written before the rack and signal columns: rack code 0 (the interner's "") and zero signals
        for k in KEY_COLUMNS:
            cols.setdefault(k, np.zeros(n, np.int32))
        for v in WINDOW_COLUMNS:
            cols.setdefault(v, np.zeros(n, np.int64))
        return {"chunks": [cols] if n else [], "rows": n, "compacted": n}


def matrix_windows(
    cells: dict[str, np.ndarray],
    interner: Interner,
    window_start: int,
    window_end: int,
    config: MatrixConfig = MatrixConfig(),
    shard: int = 0,
) -> list[MatrixWindow]:
    """The ``matrix.windows.v2`` messages of one closed window: per level (group, node, rack) one
    :class:`MatrixWindow` of its cells sorted by (src, dst, category) name, split into parts of at most
    ``config.max_cells_per_message`` cells. No object per cell.

    "" and "unknown" endpoints are one key ("unknown"). Keys are ranked by their text first, so the group-by
    yields the cells already merged and in output order.
    """
    out: list[MatrixWindow] = []
    n = len(cells["sn"])
    for level, (ks, kd) in sorted(LEVELS.items()):
        if level not in config.levels or n == 0:
            continue
        ep_names, ep_rank = _ranks(interner, cells[ks], cells[kd], empty_as=UNKNOWN)
        cat_names, cat_rank = _ranks(interner, cells["cat"])
        keys, sums, _ = group_reduce([ep_rank[0], ep_rank[1], cat_rank[0]], [cells[v] for v in VALUE_COLUMNS])
        keep = sums[0] >= config.min_bytes_est
        if not keep.all():
            keys = [k[keep] for k in keys]
            sums = [v[keep] for v in sums]
        values = {col: np.asarray(v, dtype=np.int64) for col, v in zip(VALUE_COLUMNS, sums)}
        step = config.max_cells_per_message
        for part, lo in enumerate(range(0, len(keys[0]), step)):
            rows = slice(lo, lo + step)
            out.append(_window(ep_names, cat_names, [k[rows] for k in keys], {c: v[rows] for c, v in values.items()},
                               window_start, window_end, level, shard, part))
    return out


def _window(ep_names: np.ndarray, cat_names: np.ndarray, keys: list[np.ndarray], values: dict[str, np.ndarray],
            ws: int, we: int, level: str, shard: int, part: int) -> MatrixWindow:
    """One message's cells: the sorted table of the names they use, and codes into it."""
    ep_used, ep_code = np.unique(np.concatenate(keys[:2]), return_inverse=True)
    cat_used, cat_code = np.unique(keys[2], return_inverse=True)
    names = np.concatenate([ep_names.take(ep_used), cat_names.take(cat_used)])
    labels, code = np.unique(names, return_inverse=True)  # endpoint and category names may coincide
    code = code.reshape(-1).astype(np.int32)
    m = len(keys[0])
    ep_code = code.take(ep_code.reshape(-1))
    cat_code = code.take(len(ep_used) + cat_code.reshape(-1))
    return MatrixWindow(ws, we, level, shard, labels, ep_code[:m], ep_code[m:], cat_code, values, part)


def matrix_cells(cells: dict[str, np.ndarray], interner: Interner, window_start: int, window_end: int,
                 config: MatrixConfig = MatrixConfig()) -> list[dict]:
    """The v1 ``matrix_cell`` dicts of :func:`matrix_windows`, in order (tests and tools only)."""
    return [c for w in matrix_windows(cells, interner, window_start, window_end, config) for c in w.cells()]


def _ranks(
    interner: Interner, *code_columns: np.ndarray, empty_as: str | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(sorted distinct names, per column the rank of each row's name) for interned code columns.

    ``empty_as``: the name "" stands for (its rows then share that name's rank).
    """
    u, inv = np.unique(np.concatenate(code_columns), return_inverse=True)
    names = [interner.strings[c] for c in u.tolist()]
    if empty_as is not None:
        names = [x or empty_as for x in names]
    distinct = sorted(set(names))
    pos = {x: i for i, x in enumerate(distinct)}
    lut = np.array([pos[x] for x in names], dtype=np.int64)
    ranks = lut[inv.reshape(-1)]
    bounds = np.cumsum([0] + [len(c) for c in code_columns])
    table = np.empty(len(distinct), dtype=object)
    table[:] = distinct
    return table, [ranks[bounds[i] : bounds[i + 1]] for i in range(len(code_columns))]
