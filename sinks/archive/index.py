"""Which Kafka offsets of an event hour are already in a written file, per (dataset, partition).

The buffer drops re-read rows that are (:meth:`WrittenIndex.covered`), so a restart or a replay never
writes a row twice. :class:`FsWrittenIndex` learns the intervals from the archive listing (file names
carry their offsets) and rebuilds the rollups of a file written without them (a crash in between).
"""

from __future__ import annotations

import posixpath

import numpy as np

from sinks.archive import layout
from sinks.archive.fs import filesystem, root_path
from sinks.archive.parquet import ParquetWriter


def _merge(intervals: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    iv = sorted(intervals)
    starts: list[int] = []
    ends: list[int] = []
    for a, b in iv:
        if starts and a <= ends[-1] + 1:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


class WrittenIndex:
    """Offset intervals already durable per event hour, for one (dataset, partition). In memory."""

    def __init__(self) -> None:
        self._iv: dict[int, list[tuple[int, int]]] = {}
        self._merged: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _load(self, hour: int) -> list[tuple[int, int]]:
        return []

    def intervals(self, hour: int) -> list[tuple[int, int]]:
        if hour not in self._iv:
            self._iv[hour] = list(self._load(hour))
        return self._iv[hour]

    def add(self, hour: int, first: int, last: int) -> None:
        self.intervals(hour).append((first, last))
        self._merged.pop(hour, None)

    def covered(self, hour: int, offsets: np.ndarray) -> np.ndarray:
        """Boolean mask: which offsets (rows of ``hour``) are already in a written file."""
        iv = self.intervals(hour)
        if not iv:
            return np.zeros(len(offsets), dtype=bool)
        if hour not in self._merged:
            self._merged[hour] = _merge(iv)
        starts, ends = self._merged[hour]
        i = np.searchsorted(starts, offsets, side="right") - 1
        ok = i >= 0
        res = np.zeros(len(offsets), dtype=bool)
        res[ok] = offsets[ok] <= ends[i[ok]]
        return res


class FsWrittenIndex(WrittenIndex):
    """:class:`WrittenIndex` loaded lazily from the archive listing (one listing per hour seen)."""

    def __init__(self, fs, root: str, dataset: str, partition: int, *, repair: bool = True) -> None:
        super().__init__()
        self.fs = filesystem(fs)
        self.root = root_path(self.fs, root)
        self.dataset = dataset
        self.partition = partition
        self.listings = 0
        self.derived = [d.name for d in layout.derived_of(dataset)] if repair else []
        self.repaired: list[str] = []  # files of this partition whose rollups were rebuilt

    def _names(self, dataset: str, hour: int) -> list[str]:
        d = f"{self.root}/{dataset}/{layout.hour_dir(hour)}"
        self.listings += 1
        try:
            self.fs.invalidate_cache(d)
            names = self.fs.ls(d, detail=False)
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            base = posixpath.basename(n)
            k = layout.parse_key(n)
            if k is not None and k.partition == self.partition and not base.startswith("."):
                out.append(base)
        return out

    def _has_rollup(self, names: set[str], merged: list[tuple[int, int]], name: str) -> bool:
        if name in names:
            return True
        k = layout.parse_key(f"{layout.hour_dir(0)}/{name}")
        return any(a <= k.first_offset and k.last_offset <= b for a, b in merged)

    def _load(self, hour: int) -> list[tuple[int, int]]:
        names = self._names(self.dataset, hour)
        if names and self.derived:
            # A file written without all of its rollups (crash between the two): rebuild them now, before
            # the re-read rows it holds are dropped and committed past (nothing would re-read them later).
            # A file whose rollups were merged (sinks.archive.compaction) has them.
            have = []
            for d in self.derived:
                rn = self._names(d, hour)
                ks = [layout.parse_key(f"{layout.hour_dir(hour)}/{n}") for n in rn]
                have.append((set(rn), [(k.first_offset, k.last_offset) for k in ks if k.merged]))
            missing = [n for n in names if not all(self._has_rollup(h, m, n) for h, m in have)]
            if missing:
                w = ParquetWriter(self.fs, self.root)
                for n in missing:
                    w.repair_rollups(self.dataset, hour, n)
                    self.repaired.append(n)
        d = f"{self.root}/{self.dataset}/{layout.hour_dir(hour)}/"
        return [(k.first_offset, k.last_offset) for k in (layout.parse_key(d + n) for n in names)]
