"""Keeping an inventory current with its file: reload on change, keep the old one on a bad file."""

from __future__ import annotations

import math
import os
from pathlib import Path

from .models import InventoryError
from .tables import Inventory

__all__ = ["InventoryWatcher"]


class InventoryWatcher:
    """Keeps an :class:`Inventory` current with its file.

    ``maybe_reload(now_s)`` checks the file (at most every ``check_interval_s``)
    and reloads it when its modification time, size or inode changed. A new
    file that fails validation leaves the previous inventory in place; the
    problem is in ``last_error`` and counted in ``errors_total``. The first
    load (in the constructor) raises :class:`InventoryError` instead.
    """

    def __init__(self, path: str | os.PathLike, check_interval_s: float = 0.0):
        self.path = Path(path)
        self.check_interval_s = check_interval_s
        sig = self._signature()
        self.inventory = Inventory.load(self.path)
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
        """Reload when the file changed; True when a new inventory is now in use."""
        if now_s < self._next_check:
            return False
        self._next_check = now_s + self.check_interval_s
        sig = self._signature()
        if sig == self._sig:
            return False
        self._sig = sig
        try:
            inv = Inventory.load(self.path)
        except InventoryError as exc:
            self.last_error = str(exc)
            self.errors_total += 1
            return False
        self.inventory = inv
        self.last_error = None
        self.reloads_total += 1
        return True
