"""A change marker written straight into the archive (``fabricflow mark --archive``), for an archive filled by
``fabricflow backfill`` without a broker, or the console without Kafka.

The file is one row of the ``changes`` dataset in the hour of the change, keyed like a sink's file: partition 0,
offsets from the marker's id in a range of their own (:data:`DIRECT_BASE` + id mod 10^17), far above a live
sink's offsets, so recording the same change twice writes the same key (overwrites) and never collides with the
files the archive sink writes from ``changes.v1``.
"""

from __future__ import annotations

import os

from sinks.archive import layout
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_dicts

__all__ = ["DIRECT_BASE", "write_change"]

DIRECT_BASE = 9 * 10**18  # above every live and backfill offset (those stay below 9 * 10^18)


def _offset(mark_id: str) -> int:
    return DIRECT_BASE + int(mark_id, 16) % 10**17


def write_change(archive_settings, rec: dict) -> str:
    """Write one ``change_mark`` record to the archive of ``archive_settings``; returns the object key."""
    from sinks.archive.fs import archive_filesystem

    url = archive_settings.url
    if url.startswith("file://"):
        os.makedirs(os.path.abspath(url[len("file://"):] or "."), exist_ok=True)
    fs, root = archive_filesystem(archive_settings)
    writer = ParquetWriter(fs, root)
    off = _offset(rec["mark_id"])
    hour = layout.hour_index(int(rec["time_ms"]))
    key = layout.object_key(writer.root, "changes", hour, 0, off, off)
    table = table_from_dicts([rec], layout.spec("changes").avsc)
    meta = {b"fabricflow.dataset": b"changes", b"fabricflow.partition": b"0",
            b"fabricflow.offsets": f"{off}-{off}".encode(), b"fabricflow.source": b"direct"}
    writer.write_table(key, table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}))
    return key
