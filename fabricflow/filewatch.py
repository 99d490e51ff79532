"""Keeping what a file says current: reload on change, keep the last good version on a bad one.

One watcher for every file a service re-reads while it runs (inventory, policy, app-category rules):
:class:`FileWatcher` takes the loader; :class:`~processors.config_files.InventoryWatcher` and
:class:`~processors.config_files.ConfigFileWatcher` are it with their loaders. File metadata
reads (``os.stat``) and the loader's read are the only I/O; time comes in as an argument.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["FileWatcher"]

T = TypeVar("T")


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


class FileWatcher(Generic[T]):
    """Keeps ``value``, what ``loader(path)`` gives, current with the file.

    ``maybe_reload(now_s)`` looks at the file at most every ``check_interval_s`` and reloads it when its
    modification time, size or inode changed. A version that does not load (``loader`` raises one of
    ``errors``) leaves the last good one in ``value``; the problem is in ``last_error`` (``describe`` of the
    exception: its first line unless told otherwise) and counted in ``errors_total``, once per version of
    the file. The first load (in the constructor, unless ``initial`` is what the caller just loaded) raises
    instead: a service must not start on a bad file.
    """

    def __init__(self, path: str | os.PathLike, loader: Callable[[Path], T], check_interval_s: float = 0.0,
                 initial: T | None = None, errors: tuple[type[Exception], ...] = (ValueError,),
                 describe: Callable[[Exception], str] = _first_line):
        self.path = Path(path)
        self.loader = loader
        self.check_interval_s = check_interval_s
        self.errors = errors
        self.describe = describe
        sig = self._signature()  # before the load: a change while it loads is seen at the next check
        self.value: T = initial if initial is not None else loader(self.path)
        self._sig = sig
        self._next_check = -math.inf
        self.last_error: str | None = None
        self.reloads_total = 0
        self.errors_total = 0

    def _signature(self) -> tuple:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            return ("unreadable", exc.errno)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def maybe_reload(self, now_s: float) -> bool:
        """Reload when the file changed; True when a new value is now in use."""
        if now_s < self._next_check:
            return False
        self._next_check = now_s + self.check_interval_s
        sig = self._signature()
        if sig == self._sig:
            return False
        self._sig = sig
        try:
            value = self.loader(self.path)
        except self.errors as exc:
            self.last_error = self.describe(exc)
            self.errors_total += 1
            return False
        self.value = value
        self.last_error = None
        self.reloads_total += 1
        return True
