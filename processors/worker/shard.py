"""One detector shard (a shuffle partition) and everything this worker holds for it, in one object.

A :class:`Shard` keeps the shard's core, the last applied shuffle offset, the raw pieces applied per raw
partition, the events applied but not yet covered by a snapshot, the counter samples waiting for link
health, and the enriched rows ``prepare`` kept for it. Losing the partition drops the object.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from schemas import codec
from schemas.columns import concat_rows

from ..logic.core import ProcessorCore
from ..logic.enrich.enricher import LabeledFlows
from ..logic.enrich.inventory import Inventory

log = logging.getLogger("fabricflow.processors")

_order = itertools.count()  # the order in which shards' counter samples started waiting


@dataclass(slots=True)
class Kept:
    """What ``prepare`` enriched for one shuffle message that this worker's ``detect`` will read."""

    message: bytes  # the shuffle message as produced (a hit needs the same bytes)
    enriched: LabeledFlows  # with the label codes the detectors use
    unknown: int  # unknown addresses the enrichment counted
    inventory: Inventory


@dataclass(slots=True, eq=False)
class Shard:
    """The state of one shard in this worker. Its snapshot (:meth:`snapshot`) is what survives the worker."""

    partition: int
    core: ProcessorCore | None = None  # None until detect applies (or restores) the shard
    last_offset: int = -1  # the last shuffle offset applied
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)  # raw "topic:partition" -> (offset, chunk) applied
    pending: list = field(default_factory=list)  # events applied, not yet covered by a snapshot (unacked)
    pending_since: float = 0.0  # monotonic time of the oldest pending event
    counters_waiting: list[np.ndarray] = field(default_factory=list)  # counter batches not yet through link health
    counters_since: int = 0  # order key: when the waiting samples started waiting
    reuse: dict[tuple, Kept] = field(default_factory=dict)  # (raw "topic:partition", offset, chunk) -> Kept, produced order

    # -- pieces applied (dedup of what prepare produced again after a restart)

    def fresh(self, pieces) -> list[bool]:
        """For each ``(src, (offset, chunk), rows)`` piece: True when this shard has not applied it yet."""
        seen = self.sources
        return [not (key in seen and pos <= seen[key]) for key, pos, _n in pieces]

    def mark_applied(self, pieces, fresh: list[bool]) -> None:
        for (key, pos, _n), new in zip(pieces, fresh):
            if new:
                self.sources[key] = pos

    # -- counter samples waiting for link health

    def queue_counters(self, counters: np.ndarray) -> int:
        """Queue a counter batch; return the samples now waiting."""
        if not self.counters_waiting:
            self.counters_since = next(_order)
        self.counters_waiting.append(counters)
        return sum(len(c) for c in self.counters_waiting)

    def take_counters(self) -> list[np.ndarray]:
        waiting, self.counters_waiting = self.counters_waiting, []
        return waiting

    # -- snapshot

    def snapshot(self) -> bytes:
        """The shard's state: core snapshot, last applied shuffle offset, raw sources applied, and the counter
        samples of applied messages still waiting for link health (zlib'd JSON).

        The waiting samples are kept, not applied here: their link-health records would be produced just
        before the snapshot that covers their messages, and lost if the worker died before delivering them.
        """
        snap = {"offset": self.last_offset, "core": self.core.snapshot(), "sources": {k: list(v) for k, v in self.sources.items()}}
        if self.counters_waiting:
            batch = codec.encode_batch("counter_batch", concat_rows(self.counters_waiting))
            snap["counters_waiting"] = {"rows": [len(c) for c in self.counters_waiting], "batch": base64.b64encode(batch).decode()}
        return zlib.compress(json.dumps(snap, separators=(",", ":")).encode(), 1)

    def restore(self, data: bytes) -> None:
        """Load a :meth:`snapshot` into this shard (its core already created)."""
        snap = json.loads(zlib.decompress(data))
        self.core.restore(snap["core"])
        self.last_offset = snap["offset"]
        self.sources = {k: tuple(v) for k, v in snap.get("sources", {}).items()}
        waiting = snap.get("counters_waiting")
        if waiting:  # counter samples the snapshot's messages carried, not applied yet
            rows = codec.decode_batch(base64.b64decode(waiting["batch"]), expect="counter_batch")
            ends = np.cumsum(waiting["rows"]).tolist()
            self.counters_waiting = [rows[a:b] for a, b in zip([0] + ends[:-1], ends)]
            self.counters_since = next(_order)
        log.info("shard %d restored at offset %d", self.partition, self.last_offset)


class Shards:
    """This worker's shards by partition. A shard's core is created (and restored from its snapshot, when
    ``load`` has one) the first time ``detect`` needs it."""

    def __init__(self, new_core: Callable[[], ProcessorCore], load: Callable[[int], bytes | None]):
        self._new_core = new_core
        self._load = load
        self._by_partition: dict[int, Shard] = {}
        self.assigned: set[int] | None = None  # shuffle partitions assigned to this worker (None: not tracked, tests)

    def __getitem__(self, partition: int) -> Shard:
        return self._by_partition[partition]

    def __contains__(self, partition: int) -> bool:
        return partition in self._by_partition

    def __iter__(self) -> Iterator[Shard]:
        return iter(list(self._by_partition.values()))

    def get(self, partition: int) -> Shard:
        """The shard, created without a core if new."""
        shard = self._by_partition.get(partition)
        if shard is None:
            shard = self._by_partition[partition] = Shard(partition)
        return shard

    def active(self, partition: int) -> Shard:
        """The shard with its core (restored from its snapshot when there is one)."""
        shard = self.get(partition)
        if shard.core is None:
            shard.core = self._new_core()
            shard.core.engine.shard = partition  # matrix keys name their shard: partial group cells never share a key
            data = self._load(partition)
            if data:
                shard.restore(data)
        return shard

    def detecting(self) -> list[Shard]:
        """The shards with a core."""
        return [s for s in self._by_partition.values() if s.core is not None]

    def owned(self, partition: int) -> bool:
        """True when this worker's detect reads the partition (assigned by Faust, or already detecting it)."""
        shard = self._by_partition.get(partition)
        return (shard is not None and shard.core is not None) or (self.assigned is not None and partition in self.assigned)

    def is_assigned(self, partition: int) -> bool:
        return self.assigned is None or partition in self.assigned

    def drop(self, partition: int) -> Shard | None:
        return self._by_partition.pop(partition, None)
