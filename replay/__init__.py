"""Replay: re-run a past range of raw flows and counters through the processors' logic, deterministically.

``core`` (the loop: shard, process, flush; event-time slices), ``config`` (the cores' settings),
``archive_source`` and ``kafka_source`` (a range as batches in one canonical order), ``outputs`` (report
file, ``replay.*`` topics). The names below are the public API; docs/replay.md shows them together.
"""

from .archive_source import ArchiveSource, archive_source, open_archive, columns_from_table
from .config import core_factory_from, parse_set
from .core import DEFAULT_SLICE_MS, ReplayError, ShardedCores, counter_shard_of, iso_utc, replay_batches, slice_batches
from .kafka_source import KafkaSource, find_offset_for_time, kafka_source, parse_offsets, partition_end
from .outputs import canonical, encode_output, output_records, publish, replay_topic_names, write_report

__all__ = [
    "ReplayError",
    "DEFAULT_SLICE_MS",
    "replay_batches",
    "ShardedCores",
    "counter_shard_of",
    "slice_batches",
    "iso_utc",
    "columns_from_table",
    "parse_set",
    "core_factory_from",
    "ArchiveSource",
    "open_archive",
    "archive_source",
    "KafkaSource",
    "kafka_source",
    "parse_offsets",
    "find_offset_for_time",
    "partition_end",
    "output_records",
    "canonical",
    "write_report",
    "replay_topic_names",
    "encode_output",
    "publish",
]
