"""The directories a service writes: checked at start, so an unwritable one is one line, not a traceback.

Each service writes only under the directories its settings name (docs/operations.md, "What each service
writes"): the processors' ``processors.datadir``, the archive sink's ``file://`` archive, ingest's
``ingest.template_path`` folder, the embedded stack's ``stack.state_dir``. :func:`writable_dir` creates such
a directory when missing and proves this user may write there before anything connects.
"""

from __future__ import annotations

import os
from pathlib import Path


class StateDirError(ValueError):
    """A directory a service must write is missing and cannot be created, or is not writable (one line)."""


def _env_name(setting: str) -> str:
    return "FABRICFLOW_" + setting.upper().replace(".", "__")


def writable_dir(path: str | os.PathLike, setting: str, change: str | None = None) -> Path:
    """``path`` created (with its parents) if missing and writable by this process; :class:`StateDirError`
    naming ``setting`` (e.g. ``processors.datadir``) and the reason otherwise. ``change``: how to choose
    another directory (default: the setting and its environment variable)."""
    p = Path(path)
    shown = p if p.is_absolute() else f"{p} (= {Path.cwd() / p})"
    change = change or f"set {setting} ({_env_name(setting)})"
    hint = f"{change} to a directory that user id {os.getuid()} can write"
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StateDirError(f"{setting}: {shown} exists and is not a directory; {hint}") from None
    except OSError as e:
        raise StateDirError(f"{setting}: cannot create {shown}: {e.strerror or e}; {hint}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only_fs(p) else "permission denied"
        raise StateDirError(f"{setting}: {shown} is not writable ({why}); {hint}")
    return p


def _read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False
