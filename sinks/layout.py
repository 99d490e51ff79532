"""Archive layout: datasets, Hive partition paths and data-derived object keys.

    <root>/<dataset>/dt=YYYY-MM-DD/hour=HH/part-p{partition:03d}-o{first:020d}-{last:020d}.parquet

Hours are UTC and come from each dataset's event-time column. A key names
the Kafka partition and the first and last Kafka offset of the records in
the file, so writing the same records again writes the same key (a retry
overwrites, never duplicates). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class DatasetSpec:
    """One archived dataset: its Avro schema name and its event-time column (unix ms)."""

    name: str
    avsc: str
    time_column: str


DATASETS: dict[str, DatasetSpec] = {
    d.name: d
    for d in (
        DatasetSpec("flows_raw", "flow_record", "time_end_ms"),
        DatasetSpec("flows_enriched", "flow_enriched", "time_end_ms"),
        DatasetSpec("counters_raw", "counter_sample", "time_received_ms"),
        DatasetSpec("matrix_windows", "matrix_cell", "window_start_ms"),
        DatasetSpec("incast_events", "incast_event", "window_start_ms"),
        DatasetSpec("straggler_scores", "straggler_score", "window_start_ms"),
        DatasetSpec("link_health", "link_health", "time_ms"),
        DatasetSpec("alerts", "alert", "window_start_ms"),
        DatasetSpec("patterns", "pattern", "window_start_ms"),
        DatasetSpec("summaries_hourly", "summary_hourly", "hour_start_ms"),
    )
}

_KEY_RE = re.compile(r"part-p(\d{3,})-o(\d{20})-(\d{20})\.parquet$")
_DIR_RE = re.compile(r"dt=(\d{4}-\d{2}-\d{2})/hour=(\d{2})")


def spec(dataset: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``dataset`` (KeyError naming the known ones)."""
    try:
        return DATASETS[dataset]
    except KeyError:
        raise KeyError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}") from None


def hour_index(ms) -> np.ndarray | int:
    """Hours since the epoch (UTC) of unix-ms timestamps (scalar or vectorised)."""
    if isinstance(ms, (int, np.integer)):
        return int(ms) // HOUR_MS
    return np.floor_divide(np.asarray(ms, dtype=np.int64), HOUR_MS)


def hour_dir(hour: int) -> str:
    """``dt=YYYY-MM-DD/hour=HH`` of an hour index."""
    d = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(hours=int(hour))
    return f"dt={d:%Y-%m-%d}/hour={d:%H}"


def day_dir(day: int) -> str:
    """``dt=YYYY-MM-DD`` of a day index (days since the epoch)."""
    d = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=int(day))
    return f"dt={d:%Y-%m-%d}"


def parse_hour_dir(path: str) -> int | None:
    """Hour index from a path containing ``dt=.../hour=..``, else None."""
    m = _DIR_RE.search(path)
    if not m:
        return None
    d = datetime.strptime(m.group(1), "%Y-%m-%d").replace(tzinfo=UTC)
    return int(d.timestamp()) // 3600 + int(m.group(2))


def parse_day_dir(name: str) -> int | None:
    """Day index from ``dt=YYYY-MM-DD`` (the last path component), else None."""
    m = re.search(r"dt=(\d{4}-\d{2}-\d{2})/?$", name)
    if not m:
        return None
    return int(datetime.strptime(m.group(1), "%Y-%m-%d").replace(tzinfo=UTC).timestamp()) // 86400


def file_name(partition: int, first_offset: int, last_offset: int) -> str:
    """Object name from the data: Kafka partition and first/last offset."""
    if partition < 0 or first_offset < 0 or last_offset < first_offset:
        raise ValueError(f"bad key parts p={partition} o={first_offset}-{last_offset}")
    return f"part-p{partition:03d}-o{first_offset:020d}-{last_offset:020d}.parquet"


@dataclass(frozen=True)
class KeyInfo:
    """What an object key says: dataset, hour index, partition, offsets."""

    dataset: str
    hour: int
    partition: int
    first_offset: int
    last_offset: int


def object_key(root: str, dataset: str, hour: int, partition: int, first_offset: int, last_offset: int) -> str:
    """Full object key (``root`` without a trailing slash, no protocol)."""
    return f"{root.rstrip('/')}/{dataset}/{hour_dir(hour)}/{file_name(partition, first_offset, last_offset)}"


def parse_key(path: str) -> KeyInfo | None:
    """Inverse of :func:`object_key` (None for anything that is not a data file)."""
    m = _KEY_RE.search(path)
    hour = parse_hour_dir(path)
    if not m or hour is None:
        return None
    parts = path.rstrip("/").split("/")
    dataset = parts[-4] if len(parts) >= 4 else ""
    return KeyInfo(dataset, hour, int(m.group(1)), int(m.group(2)), int(m.group(3)))


def hours_in_range(frm_ms: int, to_ms: int) -> range:
    """Hour indices overlapping the half-open interval [frm_ms, to_ms)."""
    if to_ms <= frm_ms:
        return range(0)
    return range(frm_ms // HOUR_MS, (to_ms - 1) // HOUR_MS + 1)


def hour_start_ms(hour: int) -> int:
    return int(hour) * HOUR_MS
