"""Keeping an inventory current with its file: reload on change, keep the old one on a bad file."""

from __future__ import annotations

import os

from ..filewatch import FileWatcher
from .models import InventoryError
from .tables import Inventory

__all__ = ["InventoryWatcher"]


class InventoryWatcher(FileWatcher[Inventory]):
    """Keeps an :class:`Inventory` current with its file (:class:`~processors.logic.filewatch.FileWatcher`
    with :meth:`Inventory.load`).

    ``maybe_reload(now_s)`` checks the file (at most every ``check_interval_s``)
    and reloads it when its modification time, size or inode changed. A new
    file that fails validation leaves the previous inventory in place; the
    problem (every line of it) is in ``last_error`` and counted in
    ``errors_total``. The first load (in the constructor) raises
    :class:`InventoryError` instead.
    """

    def __init__(self, path: str | os.PathLike, check_interval_s: float = 0.0):
        super().__init__(path, Inventory.load, check_interval_s, errors=(InventoryError,), describe=str)

    @property
    def inventory(self) -> Inventory:
        return self.value
