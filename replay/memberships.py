"""The live job membership of a replayed range, from the archive's ``job_memberships`` rows.

A worker with ``processors.jobs.source`` kubernetes or slurm publishes membership versions (changes and an
hourly snapshot, ``inventory.jobs.v1``) that the archive keeps as ``job_memberships``. A replay of
[from, to) reads the rows published from one snapshot period (plus the allowed lateness) before ``from`` up
to ``to`` plus the allowed lateness, keeps the latest version of each pod / job, and puts the resulting job
intervals into the inventory: flows are then attributed to the job that held their node at their time, as
live attributed them.
"""

from __future__ import annotations

from typing import Any

from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import book_from_rows

from .core import HOUR_MS, ReplayError

__all__ = ["archived_membership_rows", "inventory_with_archived_jobs", "kafka_membership_rows"]

#: How far before a range the rows are read: the snapshot period (every holding is published at least hourly).
SNAPSHOT_MS = HOUR_MS


def archived_membership_rows(fs, root: str, frm_ms: int, to_ms: int, lateness_ms: int = 0) -> list[dict[str, Any]]:
    """The ``job_memberships`` rows published in [frm_ms - 1 h - lateness, to_ms + lateness), oldest first."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from query.errors import ArchiveError, DatasetMissing
    from query.reports import ArchiveQuery

    lo, hi = frm_ms - SNAPSHOT_MS - lateness_ms, to_ms + lateness_ms
    try:
        q = ArchiveQuery(fs, root)
        files = q.files("job_memberships", lo, hi) if "job_memberships" in q.datasets else []
    except DatasetMissing:
        files = []
    except ArchiveError as e:
        raise ReplayError(f"archive missing: {e}") from None
    rows: list[dict[str, Any]] = []
    for f in sorted(files):
        with q.fs.open(f, "rb") as fh:
            t = pq.read_table(fh)
        tc = t.column("version_ms")
        t = t.filter(pc.and_(pc.greater_equal(tc, lo), pc.less(tc, hi)))
        rows.extend(t.to_pylist())
    rows.sort(key=lambda r: r["version_ms"])
    return rows


def kafka_membership_rows(kafka_settings, frm_ms: int, to_ms: int, lateness_ms: int = 0, *, timeout_s: float = 5.0,
                          consumer=None) -> list[dict[str, Any]]:
    """The ``inventory.jobs.v1`` rows published in [frm_ms - 1 h - lateness, to_ms + lateness), oldest first: a
    Kafka replay's membership, as the archive's rows are an archive replay's (record timestamps located by
    binary search, then ``version_ms`` filtered; an absent topic gives no rows)."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas import codec

    from .kafka_source import SLOW_FETCH_WAIT_MS, read_range, replay_consumer_config, find_offset_for_time, \
        partition_end

    lo, hi = frm_ms - SNAPSHOT_MS - lateness_ms, to_ms + lateness_ms
    topic = kafka_settings.topics.jobs
    own = consumer is None
    if own:
        consumer = Consumer(replay_consumer_config(kafka_settings, SLOW_FETCH_WAIT_MS))
    rows: list[dict[str, Any]] = []
    try:
        tm = consumer.list_topics(timeout=timeout_s).topics.get(topic)
        for p in sorted(tm.partitions) if tm is not None and tm.error is None else []:
            tp = TopicPartition(topic, p)
            low, end = partition_end(consumer, tp, timeout_s=timeout_s)
            a = find_offset_for_time(consumer, tp, lo, low, end, timeout_s=timeout_s)
            b = find_offset_for_time(consumer, tp, hi, a, end, timeout_s=timeout_s)
            for m in read_range(consumer, tp, a, b, timeout_s):
                try:
                    r = codec.decode_record(m.value(), expect="job_membership")
                except codec.CodecError as e:
                    raise ReplayError(f"{topic}[{p}] offset {m.offset()}: {e}") from None
                if lo <= int(r["version_ms"]) < hi:
                    rows.append(r)
    finally:
        if own:
            consumer.close()
    rows.sort(key=lambda r: r["version_ms"])
    return rows


def inventory_with_archived_jobs(base: Inventory, rows: list[dict[str, Any]], pod_addresses: bool = True
                                 ) -> Inventory:
    """``base`` with its ``jobs:`` replaced by the membership the rows describe (pod IPs of the range's pods
    become addresses of their nodes with ``pod_addresses``)."""
    book = book_from_rows(rows, keep_ended_ms=2**62)
    with_addresses = pod_addresses and any(r["source"] == "kubernetes" for r in rows)
    try:
        inv, _unknown = book.apply_to(base, with_addresses=with_addresses, ended_addresses=True)
    except ValueError as e:
        raise ReplayError(f"archived job memberships: {str(e).splitlines()[0]}") from None
    return inv
