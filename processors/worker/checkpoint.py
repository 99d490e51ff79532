"""Snapshot and commit order, in one place: deliver the outputs, write the snapshots, then acknowledge.

A shard's shuffle events are acknowledged (their offsets may be committed) only once a snapshot covering
them is in the ``core-state`` table, and a snapshot is written only once the outputs produced so far are
delivered. Every offset commit waits for the same producer. docs/operations.md, "Detector state and
recovery", says why each step is needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .metrics import ProcessorMetrics
from .publish import OutputPublisher
from .shard import Shard, Shards

log = logging.getLogger("fabricflow.processors")

SNAPSHOT_FLUSH_S = 5.0  # longest wait for the output producer before snapshots (else they are postponed)


class Checkpoint:
    """Writes shard snapshots to the ``core-state`` table (``store``) and says which events they cover."""

    def __init__(self, publisher: OutputPublisher, metrics: ProcessorMetrics, every_messages: int, interval_s: float,
                 before_commit: Callable[[], None] = lambda: None):
        self.publisher = publisher
        self.metrics = metrics
        self.every_messages = every_messages
        self.interval_s = interval_s
        self.before_commit = before_commit  # e.g. prepare what acknowledged raw events still wait for
        self.store = None  # the Faust table (a dict in tests); None: nothing to restore from

    def load(self, partition: int) -> bytes | None:
        """The shard's last snapshot, if any."""
        return self.store.get(str(partition).encode()) if self.store is not None else None

    def due(self, shards: Shards, now: float, force: bool = False) -> list[Shard]:
        """Shards whose pending events reached ``every_messages`` or ``interval_s`` of age (any pending: ``force``)."""
        return [s for s in shards if s.pending and (force or len(s.pending) >= self.every_messages
                                                    or now - s.pending_since >= self.interval_s)]

    def commit(self, shards: list[Shard]) -> list:
        """Deliver the outputs, then write each shard's snapshot; return (and clear) the events now covered.

        A snapshot must not reach the changelog before the outputs of the messages it covers, or a crash in
        between would lose them (the next owner skips covered messages). While the outputs cannot be delivered
        (``SNAPSHOT_FLUSH_S``) nothing is written: returns [] and the events stay pending, unacknowledged.
        """
        if not shards:
            return []
        left = self.publisher.flush(SNAPSHOT_FLUSH_S)  # ~one broker round trip: librdkafka skips the linger
        if left:
            log.warning("shards %s: snapshots postponed, %d output messages not delivered within %.0f s",
                        [s.partition for s in shards], left, SNAPSHOT_FLUSH_S)
            return []
        covered: list = []
        for shard in shards:
            self._write(shard)
            covered += shard.pending
            shard.pending = []
        return covered

    def commit_due(self, shards: Shards, now: float, force: bool = False) -> list:
        """:meth:`commit` the shards that are :meth:`due`; return the events to acknowledge."""
        covered = self.commit(self.due(shards, now, force))
        self.metrics.unsnapshotted.set(sum(len(s.pending) for s in shards))
        return covered

    @staticmethod
    async def ack(stream, events) -> None:
        for ev in events:
            await stream.ack(ev)

    async def hand_over(self, dropped: list[Shard], changelog_producer, revoked: bool) -> None:
        """Partitions revoked (their shards already ``dropped`` by the caller, so nothing applies to them
        meanwhile): snapshot what this worker applied, so the next owner re-applies less (not acknowledged:
        re-delivered events up to its offset are skipped), then flush both producers before the rebalance
        completes."""
        for shard in dropped:
            if shard.pending:
                try:
                    self.commit([shard])
                except Exception:  # noqa: BLE001 (exactness does not depend on this snapshot)
                    log.warning("shard %d: snapshot on revocation failed (events are re-applied)", shard.partition,
                                exc_info=True)
        if revoked:
            await changelog_producer.flush()
        self.publisher.flush()

    def outputs_delivered(self, timeout_s: float = 10.0) -> bool:
        """Before every offset commit: wait (blocking, bounded) until the publisher has sent everything it
        holds; False (the commit is skipped, retried next interval) if some messages are not delivered.

        Blocking the event loop also keeps the agents from producing more meanwhile, so the flush ends as soon
        as what was queued is acknowledged (~linger + one round trip).
        """
        self.before_commit()
        t0 = time.monotonic()
        left = self.publisher.flush(timeout_s)
        waited = time.monotonic() - t0
        if waited > 1.0:
            log.warning("waited %.1f s for the output producer to deliver before committing offsets", waited)
        if left:
            log.warning("%d output messages not delivered within %.0f s: offsets not committed yet", left, timeout_s)
        return left == 0

    def _write(self, shard: Shard) -> None:
        data = shard.snapshot()
        key = str(shard.partition).encode()
        send = getattr(self.store, "send_changelog", None)
        if send is not None:
            # Same as ``table[key] = data`` inside the stream, also from the timer / rebalance callbacks:
            # changelog partition = shuffle partition (co-partitioned), then the local store.
            send(shard.partition, key, data)
            self.store.data[key] = data
        else:  # a plain dict (tests)
            self.store[key] = data
        self.metrics.snapshots.inc()
