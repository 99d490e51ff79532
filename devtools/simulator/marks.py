"""Mark lines the simulated training jobs and operators send: step and checkpoint marks from each training job's
rank 0 (as :mod:`fabricflow.stepmarks` sends them from a real training loop) and the scenario's ``changes``.

Pure: the chunk's marks as ``(time_ms, datagram, sender node)``, in the scenario's time model (a step starts every
``period_s`` from the workload's ``start_s``; a checkpoint every ``interval_s`` for its write time, stretched by a
storage slow-down as the traffic is). The lines carry no ``time``: the receive time is the event time, as for sFlow,
so an accelerated run keeps them on the same axis as the flows. docs/simulator.md, "Step marks and changes".
"""

from __future__ import annotations

import json

from .model import Scenario

__all__ = ["chunk_marks"]


def _line(d: dict) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


def chunk_marks(scen: Scenario, start_ms: int, t0: int, t1: int, effects) -> list[tuple[int, bytes, str]]:
    """Marks with a scenario time in [t0, t1) (ms from the scenario start), sorted by time."""
    out: list[tuple[int, int, bytes, str]] = []
    if scen.step_marks:
        for w in scen.workloads:
            if w.kind != "training" or not w.nodes:
                continue
            node = w.nodes[0]
            who = {"job": w.job, "node": node, "rank": 0}
            period, base = int(w.period_s * 1000), int(w.start_s * 1000)
            if period > 0:
                k0 = max(0, -(-(t0 - base) // period))
                for k in range(k0, (t1 - 1 - base) // period + 1):
                    s = base + k * period
                    if k > 0:
                        out.append((s, 0, _line({**who, "event": "step_end", "step": k - 1}), node))
                    out.append((s, 1, _line({**who, "event": "step_start", "step": k}), node))
            st = w.checkpoint
            if st and st.interval_s > 0:
                iv, dur = int(st.interval_s * 1000), int(st.duration_s * 1000)
                for j in range(max(1, (t0 - base - 4 * dur) // iv), (t1 - base) // iv + 1):
                    c = base + j * iv
                    real = int(dur / max(effects.storage_factor(st.storage, c, c + 1), 1e-3))
                    for t, ev in ((c, "checkpoint_start"), (c + real, "checkpoint_end")):
                        if t0 <= t < t1:
                            d = {**who, "event": ev}
                            if period > 0:
                                d["step"] = (t - base) // period
                            out.append((t, 2, _line(d), node))
    for c in scen.changes:
        if t0 <= c.at_ms < t1:
            d = {"kind": "change", "text": c.text}
            if c.job:
                d["job"] = c.job
            if c.node:
                d["node"] = c.node
            sender = scen.cluster.jobs[c.job][0] if c.job else (c.node or "operator")
            out.append((c.at_ms, 3, _line(d), sender))
    out.sort(key=lambda r: (r[0], r[1]))
    return [(start_ms + t, data, node) for t, _o, data, node in out]
