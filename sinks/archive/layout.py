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

from fabricflow import streams

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class DatasetSpec:
    """One archived dataset: its Avro schema name and its event-time column (unix ms)."""

    name: str
    avsc: str  # "" for a derived dataset (its Arrow schema is in sinks.archive.rollups)
    time_column: str
    derived_from: str | None = None  # a rollup: one file per file of this dataset, same name
    bucket_ms: int = 0  # a rollup's time bucket


DATASETS: dict[str, DatasetSpec] = {
    **{name: DatasetSpec(name, s.row_schema, s.time_column) for name, s in streams.DATASETS.items()},
    # derived datasets (rollups): fabricflow.streams.DERIVED, written by the archive writer beside each
    # file of the dataset they derive from (sinks.archive.rollups)
    **{d.name: DatasetSpec(d.name, "", "bucket_ms", d.derived_from, d.bucket_ms) for d in streams.DERIVED},
}


def derived_of(dataset: str) -> list[DatasetSpec]:
    """The rollup datasets derived from ``dataset`` (empty for most)."""
    return [d for d in DATASETS.values() if d.derived_from == dataset]

_KEY_RE = re.compile(r"(?:^|/)(part|merged)-p(\d{3,})-o(\d{20})-(\d{20})\.parquet$")
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
    merged: bool = False  # a rollup file that merges the files it covers (sinks.archive.compaction)


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
    return KeyInfo(dataset, hour, int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(1) == "merged")


def merged_name(partition: int, first_offset: int, last_offset: int) -> str:
    """Name of a merged rollup file covering every file of its hour and partition within [first, last]."""
    return "merged-" + file_name(partition, first_offset, last_offset)[len("part-"):]


def live_files(paths: list[str]) -> list[str]:
    """The files of a rollup dataset a reader counts: all but those whose offsets lie within a merged
    file's range of the same hour and partition (merged into it; deleted by the compaction soon after).

    Only merged files cover others: two plain files' ranges may nest after a restart re-chunked an hour,
    and both count.
    """
    keys = [(p, parse_key(p)) for p in paths]
    merged: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for p, k in keys:
        if k is not None and k.merged:
            merged.setdefault((k.hour, k.partition), []).append((k.first_offset, k.last_offset, p))
    if not merged:
        return list(paths)
    out = []
    for p, k in keys:
        if k is None:
            continue
        cover = merged.get((k.hour, k.partition), ())
        if any(a <= k.first_offset and k.last_offset <= b and q != p for a, b, q in cover):
            continue
        out.append(p)
    return out


def hours_in_range(frm_ms: int, to_ms: int) -> range:
    """Hour indices overlapping the half-open interval [frm_ms, to_ms)."""
    if to_ms <= frm_ms:
        return range(0)
    return range(frm_ms // HOUR_MS, (to_ms - 1) // HOUR_MS + 1)


def hour_start_ms(hour: int) -> int:
    return int(hour) * HOUR_MS
