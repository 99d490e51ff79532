"""Re-delivery guards of the flow-metrics state: the ids of events already counted, and the matrix cells of the
recent windows (a processor re-emits closed windows after a crash, with the same Kafka keys)."""

from __future__ import annotations

from collections import OrderedDict

DEDUP_KEEP = 100_000  # event ids remembered against re-delivered duplicates


class SeenIds:
    """Bounded set of ids (oldest forgotten first)."""

    def __init__(self, keep: int = DEDUP_KEEP):
        self.keep = keep
        self.ids: OrderedDict = OrderedDict()

    def add(self, key) -> bool:
        """True when ``key`` was not seen before."""
        if key in self.ids:
            return False
        self.ids[key] = None
        if len(self.ids) > self.keep:
            self.ids.popitem(last=False)
        return True


class CellKeys:
    """Matrix cell keys of the windows ending within ``horizon_ms`` of the newest window end seen.

    A processor re-emits the cells of windows it closed again after a crash (its outputs are at-least-once
    with deterministic Kafka keys: window start, level, src, dst, category and shard). A cell whose
    (window end, key) is held is a duplicate; windows that end more than the horizon before the newest are
    forgotten, so memory is bounded by the cells of the windows within it. A key (any hashable: the service
    passes the Kafka key with the cell's window and names) is held as its 64-bit hash.
    """

    def __init__(self, horizon_ms: int):
        self.horizon_ms = horizon_ms
        self.by_end: dict[int, set[int]] = {}
        self.newest = -1

    def add(self, end_ms: int, key) -> bool:
        """True when (``end_ms``, ``key``) is new (or its window is beyond the horizon: cannot tell, counted)."""
        if end_ms < self.newest - self.horizon_ms:
            return True
        seen = self.by_end.get(end_ms)
        if seen is None:
            seen = self.by_end[end_ms] = set()
        h = hash(key)
        if h in seen:
            return False
        seen.add(h)
        if end_ms > self.newest:
            self.newest = end_ms
            cut = end_ms - self.horizon_ms
            for e in [e for e in self.by_end if e < cut]:
                del self.by_end[e]
        return True

    def __len__(self) -> int:
        return sum(len(s) for s in self.by_end.values())
