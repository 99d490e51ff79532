"""Drop reasons per port, node and job from the archive's ``discards_raw`` (sFlow dropped-packet notifications).

The archive keeps each notification as it came (where: agent and ifIndex; why: the spec's reason code; what:
the dropped packet's addresses). This report attributes them with an inventory exactly as the metrics sink's
``*_dropped_packets_total`` families do (:func:`sinks.metrics.drops.drop_labels`): the switch port (egress
ifIndex of an egress drop, else the input one) and the node behind it, the dropped packet's source and
destination nodes, and the job (the destination node's at the notification's time, else the source node's).
Each notification is one dropped packet, counted once. docs/archive.md, "Command line: `fabricflow query ...`".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from processors.logic.enrich.inventory import Inventory
from schemas.columns import DISCARD_DTYPE
from sinks.metrics.drops import drop_labels

__all__ = ["BY", "drop_reasons"]

#: what a report can group by (``node``: the node behind the port)
BY = ("switch", "port", "node", "src_node", "dst_node", "job", "reason")
_COLUMNS = ("exporter_addr", "in_if", "out_if", "reason", "time_received_ms", "src_addr", "dst_addr")


def _rows(table: pa.Table) -> np.ndarray:
    """The columns :func:`drop_labels` reads, as DISCARD_DTYPE rows (column at a time)."""
    n = table.num_rows
    out = np.zeros(n, dtype=DISCARD_DTYPE)
    for name in _COLUMNS:
        col = table.column(name).combine_chunks()
        if DISCARD_DTYPE[name].shape == (16,):
            if not pa.types.is_fixed_size_binary(col.type):
                col = col.cast(pa.binary(16))
            data = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=(col.offset + n) * 16)
            out[name] = data[col.offset * 16:].reshape(n, 16)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


def drop_reasons(q, inventory: Inventory, frm: int | None, to: int | None, by: tuple[str, ...] = BY) -> pa.Table:
    """Dropped packets (and their bytes) per ``by`` over the notifications received in [frm, to), most first.
    ``q``: a :class:`query.reports.ArchiveQuery`."""
    unknown = [b for b in by if b not in BY]
    if unknown or not by:
        raise ValueError(f"--by {','.join(by)}: choose from {', '.join(BY)}")
    files = q.files_in_range("discards_raw", frm, to)
    q.answered = [("discards_raw", frm, to, len(files))]
    parts = []
    for f in files:
        with q.fs.open(f, "rb") as fh:
            t = pq.read_table(fh, columns=[*_COLUMNS, "bytes"])
        tc = t.column("time_received_ms")
        if frm is not None:
            t = t.filter(pc.greater_equal(tc, frm))
            tc = t.column("time_received_ms")
        if to is not None:
            t = t.filter(pc.less(tc, to))
        if t.num_rows:
            parts.append(t)
    names = [*by, "drops", "bytes"]
    if not parts:
        return pa.table({n: pa.array([], pa.int64() if n in ("drops", "bytes") else pa.string()) for n in names})
    t = pa.concat_tables(parts)
    lab = drop_labels(inventory, _rows(t))
    lab["node"] = lab.pop("peer")
    cols = {b: pa.array(lab[b], pa.string()) for b in by}
    g = pa.table({**cols, "bytes": t.column("bytes")}).group_by(list(by)).aggregate([("bytes", "count"), ("bytes", "sum")])
    g = g.rename_columns([{"bytes_count": "drops", "bytes_sum": "bytes"}.get(c, c) for c in g.column_names])
    return g.select(names).sort_by([("drops", "descending"), *[(b, "ascending") for b in by]])
