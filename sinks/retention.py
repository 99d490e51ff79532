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
from sinks import layout

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
    from sinks.archive import _fs, _root

    fs = _fs(fs)
    root = _root(fs, root)
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
