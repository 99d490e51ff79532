"""Archive retention: delete whole ``dt=``/``hour=`` partitions older than each dataset's limit.

An hour partition is deleted once its END is at least ``days`` before ``now``
(so a 7-day policy keeps a full 7 days). A ``dt=`` day directory whose every
hour is due goes in one delete. ``None`` keeps a dataset forever. The clock
is an argument; the only I/O is listing and deleting through the given fsspec
filesystem.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime

from fabricflow import streams
from sinks.archive import layout
from sinks.archive.fs import filesystem, root_path

#: Default lifecycle in days per dataset: the stream catalog's ``archive_days`` (see docs/archive.md, "Retention").
DEFAULT_POLICY: dict[str, int | None] = {
    **{name: s.archive_days for name, s in streams.DATASETS.items()},
    **{d.name: d.archive_days for d in streams.DERIVED},
}


def retention_policy(retention_days: dict[str, int]) -> dict[str, int | None]:
    """``archive.retention_days`` (overrides by dataset, ``default`` for every dataset not named) on top of
    :data:`DEFAULT_POLICY`. A negative value keeps the dataset forever. Unknown dataset names raise ValueError."""
    unknown = sorted(k for k in retention_days if k != "default" and k not in DEFAULT_POLICY)
    if unknown:
        raise ValueError(f"archive.retention_days names unknown dataset(s) {', '.join(unknown)}; "
                         f"known: {', '.join(DEFAULT_POLICY)} or 'default'")
    out: dict[str, int | None] = {}
    for name, days in DEFAULT_POLICY.items():
        days = retention_days.get(name, retention_days.get("default", days))
        out[name] = None if days is None or days < 0 else int(days)
    return out


@dataclass(frozen=True)
class DeletedPartition:
    """One deleted (or, in a dry run, deletable) partition; ``hour`` is None for a whole day."""

    dataset: str
    dt: str
    hour: int | None
    path: str


def _ms(now) -> int:
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware (UTC)")
        return int(now.timestamp() * 1000)
    return int(now)


def _ls_dirs(fs, path: str) -> list[str]:
    try:
        fs.invalidate_cache(path)
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    return sorted(e["name"].rstrip("/") for e in entries if e.get("type") == "directory")


def apply_retention(fs, root: str, now, policy: dict[str, int | None] | None = None, dry_run: bool = False
                    ) -> list[DeletedPartition]:
    """Delete expired partitions of every dataset named in ``policy`` (default :data:`DEFAULT_POLICY`).

    Returns what was (or, with ``dry_run``, would be) deleted, oldest first per dataset.
    """
    fs = filesystem(fs)
    root = root_path(fs, root)
    now_ms = _ms(now)
    policy = DEFAULT_POLICY if policy is None else policy
    out: list[DeletedPartition] = []
    for dataset, days in policy.items():
        if days is None:
            continue
        if days < 0:
            raise ValueError(f"retention for {dataset} must be >= 0 days, got {days}")
        cutoff = now_ms - int(days) * layout.DAY_MS
        for ddir in _ls_dirs(fs, f"{root}/{dataset}"):
            day = layout.parse_day_dir(ddir)
            if day is None:
                continue
            dt = posixpath.basename(ddir)[3:]
            if (day + 1) * layout.DAY_MS <= cutoff:
                out.append(DeletedPartition(dataset, dt, None, ddir))
                if not dry_run:
                    fs.rm(ddir, recursive=True)
                continue
            if day * layout.DAY_MS >= cutoff:
                continue
            for hdir in _ls_dirs(fs, ddir):
                hour = layout.parse_hour_dir(hdir)
                if hour is not None and (hour + 1) * layout.HOUR_MS <= cutoff:
                    out.append(DeletedPartition(dataset, dt, hour % 24, hdir))
                    if not dry_run:
                        fs.rm(hdir, recursive=True)
    return out


class Schedule:
    """Runs :meth:`run_once` every ``interval_s`` in a daemon thread of the archive sink (``interval_s`` 0:
    never); the first run ``first_after_s`` after :meth:`start`. A subclass's ``run_once`` catches, logs and
    counts its own failures: the next interval retries, the sink goes on either way. Schedules given the same
    ``lock`` never run at once (retention does not delete an hour a compaction is merging)."""

    name = "archive-schedule"

    def __init__(self, interval_s: float, first_after_s: float = 60.0, lock=None):
        import threading

        self.interval_s, self.first_after_s = interval_s, first_after_s
        self.lock = lock or threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def start(self) -> None:
        if self.interval_s > 0:
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        wait = self.first_after_s
        while not self._stop.wait(wait):
            with self.lock:
                if not self._stop.is_set():
                    self.run_once()
            wait = self.interval_s

    def run_once(self):  # pragma: no cover - abstract
        raise NotImplementedError


class RetentionSchedule(Schedule):
    """Runs :func:`apply_retention` every ``interval_s`` in a daemon thread of the archive sink.

    The first run is ``first_after_s`` after :meth:`start`. Each run logs one line (partitions deleted, or
    the error) and counts it: ``runs`` / ``deleted`` / ``errors`` (Prometheus counters or anything with
    ``inc``). ``fs_factory`` gives the filesystem for each run (a fresh client: the sink's own is busy on
    its threads). A failed run is retried at the next interval; the sink goes on either way.
    """

    name = "archive-retention"

    def __init__(self, fs_factory, root: str, policy: dict[str, int | None], interval_s: float, log,
                 metrics=None, first_after_s: float = 60.0, clock=None, lock=None):
        import time

        super().__init__(interval_s, first_after_s, lock)
        self.fs_factory, self.root, self.policy = fs_factory, root, policy
        self.log, self.metrics = log, metrics
        self.clock = clock or (lambda: int(time.time() * 1000))

    def run_once(self) -> list[DeletedPartition] | None:
        """One retention pass; None when it failed (logged and counted)."""
        m = self.metrics
        try:
            deleted = apply_retention(self.fs_factory(), self.root, self.clock(), self.policy)
        except Exception as e:  # noqa: BLE001 - the sink must go on; the next run retries
            if m is not None:
                m.retention_errors.inc()
            self.log.warning("archive retention failed (retried in %.0f s): %s: %s", self.interval_s, type(e).__name__, e)
            return None
        if m is not None:
            m.retention_runs.inc()
            m.retention_deleted.inc(len(deleted))
        if deleted:
            by = sorted({d.dataset for d in deleted})
            self.log.info("archive retention: deleted %d partition(s) of %s", len(deleted), ", ".join(by))
        return deleted
