"""Stage 2, ``detect``: shuffle messages -> the shard's core -> detector outputs.

Each shuffle partition is one shard (:mod:`processors.worker.shard`). A message is applied once: at or below
the shard's last offset, or made only of raw pieces the shard has applied, it is skipped. Flow batches are
LZ4 ``.npy`` (:mod:`processors.worker.shuffle`), enriched here unless ``prepare`` kept them; counter batches
(Avro; several in one message when ``prepare`` took them together) wait per shard until
``processors.counter_batch_rows`` samples or the next tick; other shards' counter batches (``role`` header)
only update the port state, at once. Dropped-packet notification batches (Avro, from the exporter's
``discards.raw.v1`` message) go to the shard's link health at once: the counter samples that follow read them.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from schemas import codec
from schemas.columns import concat_rows

from . import shuffle
from .metrics import ProcessorMetrics
from .prepare import ReuseCache
from .publish import OutputPublisher
from .shard import Shard, Shards

log = logging.getLogger("fabricflow.processors")


class Detect:
    """The ``detect`` stage (testable without Faust: :meth:`handle`, :meth:`handle_events`, :meth:`tick`)."""

    def __init__(self, settings, shards: Shards, reuse: ReuseCache, publisher: OutputPublisher,
                 metrics: ProcessorMetrics):
        self.settings = settings
        self.shards = shards
        self.reuse = reuse
        self.publisher = publisher
        self.metrics = metrics
        self.shuffle_topic = settings.kafka.topics.shuffle
        self._late_logged = 0  # too-late records already reported in the log
        self._counter_rows: dict[bytes, np.ndarray] = {}  # counter message -> its decoded rows (a few, newest last)

    def handle_events(self, events, generation: int | None = None) -> None:
        """Apply Faust events of the shuffle topic in order; each becomes pending until a snapshot covers it.

        ``generation``: the consumer generation; events fetched in an older one are ignored (not acked), as are
        events of partitions revoked since they were taken (their next owner gets them from the committed offset).
        """
        now = time.monotonic()
        for ev in events:
            m = ev.message
            part = m.partition
            if generation is not None and getattr(m, "generation_id", generation) != generation:
                continue
            if not self.shards.is_assigned(part):
                continue  # revoked while the event waited in Faust's buffers
            try:
                self.handle(part, m.offset, ev.value, shuffle.source_of(m.headers), shuffle.segments_of(m.headers),
                            state_only=shuffle.state_roles(m.headers))
            except Exception as e:  # skipped and counted, like an undecodable message; acked with the next snapshot
                self.metrics.failed("detect", e)
            shard = self.shards.get(part)
            if not shard.pending:
                shard.pending_since = now
            shard.pending.append(ev)

    def handle(self, partition: int, offset: int, value: bytes, source: tuple | None = None,
               segments: list | None = None, state_only: bool | list[bool] = False) -> bool:
        """Process one shuffle message; False when it was already applied (skipped).

        The state is not snapshotted here (:mod:`processors.worker.checkpoint`).

        Skipped: messages at or below the shard's last applied offset (Kafka
        re-delivery after a restore), and messages whose ``source`` (raw
        partition, offset, chunk) the shard has already applied (``prepare``
        produced them again after a restart). A message with ``segments``
        (:func:`shuffle.segments_of`) is skipped when every piece was applied;
        when only some were, the rows of the others are applied.

        ``state_only``: a counter batch another shard reports (header ``role=state``): applied at once to the
        port state only (no outputs, not queued, not counted); a list: per piece of a counter message that
        combines several (:func:`shuffle.state_roles`), each piece applied in turn as if it came alone.
        """
        shard = self.shards.active(partition)
        core = shard.core
        if offset <= shard.last_offset:
            return False  # re-delivered after a restart: already in the restored state
        # the message's pieces: its seg header, else its src header as one piece (row count not needed)
        pieces = segments or ([(*source, 0)] if source is not None else [])
        fresh = shard.fresh(pieces)
        keep = None  # rows to apply when some pieces of the message were applied before
        if not all(fresh):
            self.metrics.duplicates.inc()
            if not any(fresh):
                shard.last_offset = offset
                return False
            keep = np.repeat(np.array(fresh), [n for *_x, n in pieces])
        shard.mark_applied(pieces, fresh)
        try:
            if shuffle.is_flow_batch(value):
                hit = self.reuse.take(shard, source, value) if keep is None else None
                if hit is not None:  # enriched by prepare in this worker: no decode, no second enrichment
                    self.metrics.reused.inc()
                    enriched, unknown = hit
                    outs = core.process_enriched(core.adopt_enriched(enriched, unknown))
                    self.metrics.detect_records.inc(len(enriched))
                else:
                    flows = shuffle.decode_flows(value)
                    if keep is not None:
                        if len(keep) != len(flows):
                            raise codec.CodecError(f"seg header counts {len(keep)} rows, the batch has {len(flows)}")
                        flows = flows.compress(keep)
                    _enriched, outs = core.process_raw(flows)
                    self.metrics.detect_records.inc(len(flows))
            elif value[:8] == shuffle.COUNTERS_MAGIC or codec.schema_of(value) == "counter_batch":
                outs = self._counters(shard, [self._decode_counters(v) for v in shuffle.counter_pieces(value)],
                                      fresh, state_only)
            elif codec.schema_of(value) == "discard_batch":
                core.process_discards(codec.decode_batch(value, expect="discard_batch"))  # one piece: never partly applied
                outs = []
            else:
                raise codec.CodecError(f"a {codec.schema_of(value)} message is not a shuffle batch")
        except codec.CodecError as e:
            self.metrics.undecodable.labels(self.shuffle_topic).inc()
            log.warning("undecodable shuffle message p%d@%d: %s", partition, offset, e)
            outs = []
        self.emit(outs)
        self.publisher.poll()
        shard.last_offset = offset
        self.metrics.shuffle_messages.inc()
        return True

    def _decode_counters(self, value: bytes) -> np.ndarray:
        """The rows of a counter message, decoded once per worker: every shard gets the same bytes."""
        cache = self._counter_rows
        rows = cache.get(value)
        if rows is None:
            rows = codec.decode_batch(value, expect="counter_batch")
            rows.flags.writeable = False  # shared by the shards
            if len(cache) >= 32:
                del cache[next(iter(cache))]
            cache[value] = rows
        return rows

    def _counters(self, shard: Shard, batches: list[np.ndarray], fresh: list[bool], state_only: bool | list[bool]) -> list:
        """The counter batches of a message (its pieces) in turn: other shards' ones to the port state at once,
        the shard's own ones to its link-health queue (counted)."""
        roles = state_only if isinstance(state_only, list) else [bool(state_only)] * len(batches)
        if len(roles) != len(batches) or len(fresh) not in (len(batches), 0):
            raise codec.CodecError(f"seg/role headers do not match a shuffle message of {len(batches)} counter batches")
        fresh = fresh or [True] * len(batches)
        # Consecutive batches of other shards update the port state in one step: numbered by batch, that equals
        # applying them one after the other. The shard's own batches go to its queue in between, in order.
        outs: list = []
        group: list[np.ndarray] = []  # state-only batches not applied yet
        for rows, st, new in zip(batches, roles, fresh):
            if new and st:
                group.append(rows)
            elif new:
                self._port_state(shard, group)
                group = []
                self.metrics.counters.inc(len(rows))
                outs += self._add_counters(shard, rows)
        self._port_state(shard, group)
        return outs

    @staticmethod
    def _port_state(shard: Shard, group: list[np.ndarray]) -> None:
        """Other shards' counter batches to this shard's port state, in one step."""
        if len(group) == 1:
            shard.core.process_counters(group[0], emit=False)
        elif group:
            number = np.repeat(np.arange(len(group)), [len(g) for g in group])
            shard.core.process_counters(concat_rows(group), number, emit=False)

    def _add_counters(self, shard: Shard, counters: np.ndarray) -> list:
        """Queue a shard's counter samples; apply the queue once it holds ``counter_batch_rows`` samples
        (and at every tick). The queue is part of the shard's snapshot."""
        if shard.queue_counters(counters) < self.settings.processors.counter_batch_rows:
            return []
        return self._apply_counters(shard)

    def _apply_counters(self, shard: Shard) -> list:
        """Link health over the shard's waiting counter samples, as if applied message by message."""
        waiting = shard.take_counters()
        if not waiting:
            return []
        try:
            number = np.repeat(np.arange(len(waiting)), [len(c) for c in waiting]) if len(waiting) > 1 else None
            return shard.core.process_counters(concat_rows(waiting), number)
        except Exception as e:  # like a failed shuffle message: skipped and counted
            self.metrics.failed("detect", e)
            return []

    def apply_waiting_counters(self) -> None:
        """Apply every shard's waiting counter samples (timer), in the order they started waiting."""
        waiting = sorted((s for s in self.shards if s.counters_waiting), key=lambda s: s.counters_since)
        for shard in waiting:
            self.emit(self._apply_counters(shard))

    def emit(self, outs) -> None:
        self.metrics.count_outputs(outs)
        self.publisher.outputs(outs)

    def tick(self, now_ms: int) -> None:
        """Timer: apply waiting counters, close the windows of idle shards, update the gauges."""
        self.apply_waiting_counters()
        late_main = late_incast = 0
        for shard in self.shards.detecting():
            core = shard.core
            outs = core.tick(now_ms)
            if any(o.kind != "alert" for o in outs):  # the timer closes windows only when the stream is idle
                log.info("shard %d: no newer event time for processors.idle_close_s: closed its open windows (%d outputs)",
                         shard.partition, len(outs))
            self.emit(outs)
            st = core.engine.stats
            late_main += st["too_late_main"]
            late_incast += st["too_late_incast"]
        if late_main + late_incast > self._late_logged:
            log.warning("%d flow records arrived after their window had closed (counted, not applied; %d in all): "
                        "see processors.allowed_lateness_s and idle_close_s", late_main + late_incast - self._late_logged,
                        late_main + late_incast)
        self._late_logged = late_main + late_incast
        self.metrics.too_late.labels("main").set(late_main)
        self.metrics.too_late.labels("incast").set(late_incast)
        self.metrics.shards.set(len(self.shards.detecting()))
        self.metrics.unsnapshotted.set(sum(len(s.pending) for s in self.shards))
        self.publisher.poll()
