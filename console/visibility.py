"""A job's collective visibility and RoCEv2 operations from the live matrix windows (pure, columnar).

The same rule as the metrics sink's ``job_collective_visibility_*`` (:func:`sinks.metrics.visibility.visibility`,
docs/metrics.md "Collective visibility"), per held window: *active* members (a member node in any node-level cell
of the window, as source or destination), *seen* members (those sending category ``collective`` or ``rocev2`` to
another member), ``share = seen / active`` and the state ``visible`` / ``partial`` / ``not_visible`` (collectives
not visible: InfiniBand, or this fabric is not sampled) / ``idle``. RoCEv2 operations by type (from the BTH
opcodes of sFlow header samples) per member node, as sender, summed over the held windows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sinks.metrics.visibility import COLLECTIVE, SERVING_GROUPS, Recent, visibility

__all__ = ["ROCE_OPS", "NOT_VISIBLE", "SERVING_GROUPS", "job_visibility"]

#: operation name -> matrix cell column (packets_est of records with that BTH opcode class)
ROCE_OPS = {"send": "roce_send_packets_est", "write": "roce_write_packets_est",
            "read_request": "roce_read_request_packets_est", "read_response": "roce_read_response_packets_est",
            "ack": "roce_ack_packets_est", "atomic": "roce_atomic_packets_est", "cnp": "cnp_packets_est"}
NOT_VISIBLE = "collectives not visible (InfiniBand, or this fabric is not sampled)"
MAX_LISTED = 32


def _labels(col) -> np.ndarray:
    """A (dictionary or plain) string column as an object array of Python strings."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return np.asarray(col.to_pylist(), dtype=object)


def _node_cells(table: pa.Table, members: set[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table]:
    """(src, dst, category, rows) of the node-level cells with a member at either end."""
    t = table.filter(pc.equal(table.column("level").cast(pa.string()), "node")) if len(table) else table
    if not len(t):
        return (np.array([], object),) * 3 + (t,)
    src, dst = _labels(t.column("src")), _labels(t.column("dst"))
    m = np.isin(src, list(members)) | np.isin(dst, list(members))
    idx = np.flatnonzero(m)
    t = t.take(pa.array(idx, pa.int64()))
    return src[idx], dst[idx], _labels(t.column("category")), t


def job_visibility(windows: list[tuple[int, int, pa.Table]], members: list[str], frontends: set[str] = frozenset()
                   ) -> dict:
    """The visibility of a job with ``members`` over held ``windows`` ((start, end, cells), oldest first):
    per window (start, end, share or None, state), the newest window's details, and RoCEv2 operations per
    member node (packets sent, estimated) and for the job. ``frontends``: nodes of the frontend groups (a job
    they send to serves requests: ``serving`` when it sends no collectives)."""
    mset = set(members)
    per_window = []
    ops = {op: {} for op in ROCE_OPS}
    latest = {"state": "idle", "share": None, "active": [], "seen": [], "not_seen": []}
    recent = Recent()  # collectives seen lately count: a checkpoint or evaluation pause is not a blind spot
    for ws, we, table in windows:
        src, dst, cat, t = _node_cells(table, mset)
        active = (set(src.tolist()) | set(dst.tolist())) & mset
        coll = np.isin(cat, list(COLLECTIVE)) & (src != dst) & np.isin(src, list(mset)) & np.isin(dst, list(mset))
        senders = recent.update(int(we), set(src[coll].tolist()))
        served = bool(frontends) and bool((np.isin(src, list(frontends)) & np.isin(dst, list(mset))).any())
        share, state = visibility(active, senders, served)
        per_window.append({"start_ms": int(ws), "end_ms": int(we), "share": share, "state": state,
                           "active": len(active), "seen": len(senders & active)})
        latest = {"state": state, "share": share, "active": sorted(active)[:MAX_LISTED],
                  "seen": sorted(senders & active)[:MAX_LISTED],
                  "not_seen": sorted(active - senders)[:MAX_LISTED], "start_ms": int(ws), "end_ms": int(we)}
        sent = np.isin(src, list(mset))
        for op, colname in ROCE_OPS.items():
            if colname not in t.column_names or not sent.any():
                continue
            vals = np.asarray(t.column(colname).to_numpy(zero_copy_only=False), dtype=np.int64)[sent]
            for node, v in zip(src[sent].tolist(), vals.tolist()):
                if v:
                    ops[op][node] = ops[op].get(node, 0) + v
    nodes = sorted({n for d in ops.values() for n in d})
    return {
        "state": latest["state"], "share": latest["share"], "latest": latest, "windows": per_window,
        "not_visible_text": NOT_VISIBLE,
        "roce_ops": {"ops": list(ROCE_OPS), "job": {op: sum(d.values()) for op, d in ops.items()},
                     "nodes": [{"node": n, **{op: ops[op].get(n, 0) for op in ROCE_OPS}} for n in nodes]},
    }
