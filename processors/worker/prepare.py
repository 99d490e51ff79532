"""Stage 1, ``prepare``: raw messages -> enrichment -> ``flows.enriched.v1`` and the shuffle.

Raw flow messages taken together are enriched at once; ``flows.enriched.v1`` still gets each raw message's
rows under its key. The raw rows go to the shuffle partition of their detector shard
(:func:`~processors.logic.core.shard_of` of the enriched rows), one message per shard for the batch; counter
batches go there unchanged, by exporter; sFlow dropped-packet notifications (``discards.raw.v1``) go unchanged
to their exporter's shard only (the one that reports its link health). For shards this worker detects, the enriched rows are kept
(:class:`ReuseCache`) so ``detect`` need not decode and enrich them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import NamedTuple

import numpy as np

from fabricflow.streams import counter_shard
from schemas import codec
from schemas.columns import concat_rows

from ..logic.core import ProcessorCore, shard_of
from ..logic.enrich.enricher import LabeledFlows
from ..logic.enrich.inventory import Inventory
from . import shuffle
from .metrics import ProcessorMetrics
from .publish import OutputPublisher
from .shard import Kept, Shard, Shards

log = logging.getLogger("fabricflow.processors")


class RawPart(NamedTuple):
    """One raw flow message taken by ``prepare``."""

    src: str  # "topic:partition"
    offset: int
    key: bytes
    flows: np.ndarray  # its decoded flow_record rows
    raw: tuple[bytes, dict]  # (the message, its field spans): the enriched message copies the flow fields


class ReuseCache:
    """Enriched rows ``prepare`` kept for shuffle messages this worker's ``detect`` will read, at most
    ``capacity`` records in all (entries live in each :class:`Shard`'s ``reuse``)."""

    def __init__(self, capacity: int, inventory: Inventory):
        self.capacity = capacity
        self.inventory = inventory  # a kept entry is used only with the inventory it was enriched with
        self.records = 0

    def remember(self, shard: Shard, key: tuple, msg: bytes, enriched: LabeledFlows, unknown: int) -> None:
        if self.records + len(enriched) > self.capacity:
            return  # full: detect is far behind; it decodes and enriches these itself
        shard.reuse[key] = Kept(msg, enriched, unknown, self.inventory)
        self.records += len(enriched)

    def take(self, shard: Shard, source: tuple | None, value: bytes):
        """(enriched rows, unknown addresses) kept for this exact shuffle message, else None.

        Entries of the shard remembered before it are dropped (detect reads a shard in production order, so
        they were skipped). A hit needs the very same message bytes and the current inventory, so the rows
        equal what decoding and enriching the message would give.
        """
        entries = shard.reuse
        if not entries or source is None:
            return None
        key = (source[0], *source[1])
        if key not in entries:
            return None
        while True:
            k, kept = next(iter(entries.items()))
            del entries[k]
            self.records -= len(kept.enriched)
            if k == key:
                break
        if kept.inventory is not self.inventory or kept.message != value:  # a memcmp
            return None
        return kept.enriched, kept.unknown

    def forget(self, shard: Shard) -> None:
        for kept in shard.reuse.values():
            self.records -= len(kept.enriched)
        shard.reuse = {}

    async def let_detect_catch_up(self, max_wait_s: float = 0.5) -> None:
        """Backpressure: while the cache is 3/4 full, wait (bounded) so detect reads what prepare kept."""
        cap = self.capacity
        if not cap or self.records < cap * 3 // 4:
            return
        deadline = time.monotonic() + max_wait_s
        while self.records >= cap // 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)


class Prepare:
    """The ``prepare`` stage (testable without Faust: :meth:`handle_many`)."""

    def __init__(self, settings, core: ProcessorCore, shards: Shards, reuse: ReuseCache,
                 publisher: OutputPublisher, metrics: ProcessorMetrics):
        self.settings = settings
        self.core = core  # enrichment only
        self.shards = shards
        self.reuse = reuse
        self.publisher = publisher
        self.metrics = metrics
        self.partitions = settings.kafka.partitions
        self.shuffle_topic = settings.kafka.topics.shuffle
        self.taken: list = []  # raw messages taken by the agent, not prepared yet
        self.taken_since = 0.0  # time.monotonic() when the first of them was taken

    def take(self, item) -> bool:
        """Take one raw message ``(topic, key, value, partition, offset)``; True once a batch is due."""
        if not self.taken:
            self.taken_since = time.monotonic()
        self.taken.append(item)
        return len(self.taken) >= self.settings.processors.prepare_batch_messages

    def prepare_waited(self, now: float) -> bool:
        """Prepare the raw messages taken once the first of them has waited ``processors.prepare_batch_wait_s``
        (``now``: time.monotonic()); True if it did. At high rates a batch ends at ``prepare_batch_messages``
        first; at moderate rates it collects what arrives in that wait, so fewer, larger batches pay the
        per-message and per-detector-call costs (docs/performance.md)."""
        if not self.taken or now - self.taken_since < self.settings.processors.prepare_batch_wait_s:
            return False
        self.prepare_taken()
        return True

    def prepare_taken(self) -> None:
        """Prepare the raw messages taken so far."""
        items, self.taken = self.taken, []
        if items:
            try:
                self.handle_many(items)
            except Exception as e:  # a bug must not silently stop the agent (faust-streaming#175)
                self.metrics.failed("prepare", e)

    def handle_many(self, items) -> None:
        """Enrich, publish flows.enriched.v1, re-partition to the shuffle.

        ``items``: raw messages ``(topic, key, value, partition, offset)`` in
        consumption order. The flow batches among them are enriched together;
        ``flows.enriched.v1`` still gets each raw message's rows under its key.
        Each shard gets its rows of all of them in one shuffle message (up to
        ``processors.shuffle_max_records``; one raw message's rows are split
        in chunks only when they alone exceed it), in consumption order.
        Every shuffle message carries a ``src`` header (raw topic, partition,
        offset, chunk of its last piece) and, when it combines several pieces,
        a ``seg`` header listing each with its row count, so a shard can skip
        rows that ``prepare`` produced again after a restart (it is
        at-least-once like any Kafka consumer), also when they come back
        grouped with new ones. The counter batches among ``items`` go to every
        shard in one shuffle message (:meth:`_shuffle_counters`): their
        exporter's shard reports link health, every other one only keeps the
        port state (``role`` header).
        """
        flows = []
        counters: list[tuple[str, int, bytes, bytes]] = []
        for topic, key, value, partition, offset in items:
            try:
                name = codec.schema_of(value)
                if name == "flow_batch":
                    spans: dict = {}
                    rows = codec.decode_batch(value, spans=spans)
                    flows.append(RawPart(f"{topic}:{partition}", offset, key or b"", rows, (value, spans)))
                elif name == "counter_batch":
                    counters.append((f"{topic}:{partition}", offset, key or b"", value))
                elif name == "discard_batch":  # before any counters taken with them: link events read them
                    self._shuffle_discards(f"{topic}:{partition}", offset, key or b"", value)
                else:
                    self.metrics.undecodable.labels(topic).inc()
                    log.warning("ignoring %s message on %s", name, topic)
            except codec.CodecError as e:
                self.metrics.undecodable.labels(topic).inc()
                log.warning("undecodable message on %s: %s", topic, e)
        if counters:  # before the flows, as the counter messages came before them
            self._shuffle_counters(counters)
        if flows:
            self._prepare_flows(flows)
        self.publisher.poll()

    def _shuffle_discards(self, src: str, offset: int, key: bytes, value: bytes) -> None:
        """A dropped-packet notification batch, unchanged, to its exporter's shard (:func:`counter_shard` of the
        key, as its counters): the drop reasons the link events of its ports carry."""
        self.publisher.produce(self.shuffle_topic, key, value, partition=counter_shard(key, self.partitions),
                               headers=[shuffle.src_header(src, offset, 0)])

    def _shuffle_counters(self, items: list[tuple[str, int, bytes, bytes]]) -> None:
        """The counter batches taken together: ONE shuffle message per shard for all of them.

        The owner shard of a batch (:func:`fabricflow.streams.counter_shard` of its exporter key) reports its link health; every other shard only
        updates its port state with it (storage_bound headroom, cause links, live incast capacity). The batches
        travel unchanged (:func:`shuffle.frame_counters` when there are several), with a ``seg`` header (one
        piece per raw message) and a ``role`` header saying per piece whether the shard owns it
        (:func:`shuffle.role_header`). detect applies the pieces one after the other, as separate messages.
        """
        value = shuffle.frame_counters([v for *_x, v in items])
        pieces = [(src, (offset, 0), 0) for src, offset, _k, _v in items]
        owners = [counter_shard(key, self.partitions) for _s, _o, key, _v in items]
        src, (offset, chunk), _n = pieces[-1]
        head = [shuffle.src_header(src, offset, chunk)]
        if len(pieces) > 1:
            head.append(shuffle.seg_header(pieces))
        key = items[-1][2]
        for s in range(self.partitions):
            role = shuffle.role_header([o != s for o in owners])
            headers = head if role is None else [*head, role]
            self.publisher.produce(self.shuffle_topic, key, value, partition=s, headers=headers)

    def _prepare_flows(self, parts: list[RawPart]) -> None:
        """``parts``: consecutive raw flow messages."""
        p = self.settings.processors
        core = self.core
        flows = concat_rows([part.flows for part in parts])
        before = core.stats.unknown_addresses
        enriched = core.enrich_labels(flows)  # no string objects: rows are cheap to select
        self.metrics.records.inc(len(flows))
        self.metrics.unknown.inc(core.stats.unknown_addresses - before)
        coded = enriched.label_codes()
        unknown_rows = core.enricher.last_unknown_rows
        lengths = [len(part.flows) for part in parts]
        a = 0
        for part, n in zip(parts, lengths):
            rows = slice(a, a + n)
            self.publisher.enriched(part.key, enriched[rows], p.enriched_max_records, codec.coded_rows(coded, rows), part.raw)
            a += n
        # an unregistered in-cluster source goes to its own address's shard: its alert fires once across shards
        shards = shard_of(enriched, self.partitions, coded, by_src=core.unregistered_sources(enriched))
        # The shuffle carries the raw records of each shard (a copy to write, a view to read); detect
        # enriches them again with the same inventory unless it finds them in the reuse cache.
        piece_of = np.repeat(np.arange(len(parts)), lengths) if len(parts) > 1 else None
        step = p.shuffle_max_records
        local = all(part.offset >= 0 for part in parts)
        # The rows grouped by shard, each shard's in input order: one gather of every column, then a slice (a view)
        # per shard, instead of a boolean selection of every column per shard.
        order = np.argsort(shards, kind="stable")
        by_shard = enriched[order]
        sorted_shards = shards[order]
        present = np.unique(sorted_shards)
        starts = np.searchsorted(sorted_shards, present).tolist() + [len(order)]
        for j, shard in enumerate(present.tolist()):
            sel = slice(starts[j], starts[j + 1])
            part_enriched = by_shard[sel]
            part = part_enriched.flows
            counts = (np.bincount(piece_of[order[sel]], minlength=len(parts)).tolist() if piece_of is not None
                      else [len(part)])
            pieces = [(rp.src, (rp.offset, chunk), min(step, n - i))
                      for rp, n in zip(parts, counts) for chunk, i in enumerate(range(0, n, step))]
            reuse = local and self.shards.owned(shard)
            if reuse:
                part_unknown = unknown_rows[order[sel]]
            r0 = 0
            for group in shuffle.fill(pieces, step):
                r1 = r0 + sum(n for *_x, n in group)
                msg = shuffle.encode_flows(part[r0:r1])
                src, (off, chunk), _n = group[-1]
                headers = [shuffle.src_header(src, off, chunk)]
                if len(group) > 1:
                    headers.append(shuffle.seg_header(group))
                if reuse:
                    self.reuse.remember(self.shards.get(shard), (src, off, chunk), msg, part_enriched[r0:r1],
                                        int(part_unknown[r0:r1].sum()))
                self.publisher.produce(self.shuffle_topic, str(shard).encode(), msg, partition=shard, headers=headers)
                r0 = r1
