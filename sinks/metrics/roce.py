"""RoCEv2 operations per node and per job from node-level matrix cells (pure logic, no Kafka).

Each node cell carries ``roce_<op>_packets_est`` and ``cnp_packets_est`` (sFlow header samples; NetFlow and
IPFIX carry no BTH): the sender counts them as ``direction="tx"``, the receiver as ``rx``, and the sender's job
at the window end (from the inventory) as its job's. ``op`` is one of :data:`ROCE_OPS` (seven values), so the
series are at most nodes x 2 x 7 plus jobs x 7. docs/metrics.md, "RoCEv2 operations".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from processors.logic.windows.groupby import group_reduce
from processors.logic.windows.roce import ROCE_OP_COLUMNS, ROCE_OPS

from .labels import UNKNOWN
from .store import COUNTER
from .visibility import COLLECTIVE, VisibilityFamilies

__all__ = ["RoceFamilies"]

_COLUMNS = tuple(zip(ROCE_OPS, (*ROCE_OP_COLUMNS, "cnp_packets_est")))


class RoceFamilies:
    """``family(name, doc, labels, kind)`` registers a family; ``jobs_at(t_ms)``: {node: job} at a time."""

    def __init__(self, family, jobs_at: Callable[[int], dict[str, str]], frontend: Callable[[str], bool] | None = None):
        self.visibility = VisibilityFamilies(family, jobs_at, frontend)  # the job's collectives seen at all (RoCEv2 or TCP)
        self.node = family("node_roce_operations_total", "Estimated RoCEv2 packets per node, direction and "
                           "operation (BTH opcode of sFlow header samples)", ("node", "direction", "op"), COUNTER)
        self.job = family("job_roce_operations_total", "Estimated RoCEv2 packets sent by a job's nodes, per "
                          "operation", ("job", "op"), COUNTER)
        self.jobs_at = jobs_at
        self._jobs: tuple[int, dict[str, str]] = (-1, {})

    def add_window(self, w, names: list[str], cats: list[str], src: list[str], dst: list[str]) -> None:
        """A node-level ``matrix.windows.v2`` window (``schemas.matrix.MatrixWindow``): its operations summed per
        sending and receiving node with a group-by over its codes, and its part in the jobs' collective
        visibility. ``names`` / ``cats``: the label table as node / category label values; ``src`` / ``dst``:
        each cell's node label value."""
        end_ms = w.window_end_ms
        self.visibility.add_window(end_ms, set(src) | set(dst), {
            (s, d) for s, d, c in zip(src, dst, w.category.tolist()) if cats[c] in COLLECTIVE and s != d},
            self._served(w, names))
        for op, col in _COLUMNS:
            x = w.values[col]
            if not x.any():
                continue
            for codes, direction in ((w.src, "tx"), (w.dst, "rx")):
                (k,), (sums,), _ = group_reduce([codes], [x])
                for code, v in zip(k.tolist(), sums.tolist()):
                    if not v:
                        continue
                    self.node.inc((names[code], direction, op), v)
                    if direction == "tx":
                        if self._jobs[0] != end_ms:
                            self._jobs = (end_ms, self.jobs_at(end_ms))
                        self.job.inc((self._jobs[1].get(names[code]) or UNKNOWN, op), v)

    def _served(self, w, names: list[str]) -> set[str]:
        """The nodes a frontend sent to in ``w``: one frontend test per label, a mask over the codes."""
        front = np.array([self.visibility.frontend(n) for n in names] or [False], dtype=bool)
        hit = front[w.src] & (w.src != w.dst)
        return {names[c] for c in np.unique(w.dst[hit]).tolist()}

    def add_cell(self, c: Mapping, src: str, dst: str, end_ms: int) -> None:
        """A node-level cell's operations (cells without them, written before they existed, add nothing), and
        its part in the job's collective visibility."""
        self.visibility.add_cell(src, dst, c["category"], end_ms)
        for op, col in _COLUMNS:
            v = c.get(col, 0)
            if not v:
                continue
            if type(v) is not int:
                raise ValueError(f"{col} is not an integer")
            self.node.inc((src, "tx", op), v)
            self.node.inc((dst, "rx", op), v)
            if self._jobs[0] != end_ms:
                self._jobs = (end_ms, self.jobs_at(end_ms))
            self.job.inc((self._jobs[1].get(src) or UNKNOWN, op), v)
