"""Reloading the inventory file without restart."""

from __future__ import annotations

import os

import pytest

from processors.config_files import InventoryWatcher
from processors.logic.enrich.inventory import InventoryError
from schemas.columns import addr16_column

V1 = "nodes:\n  - {name: gpu-1, addresses: [10.0.0.1], group: gpu}\n"
V2 = "nodes:\n  - {name: gpu-1, addresses: [10.0.0.1], group: storage}\n"
BAD = "nodes:\n  - {name: gpu-1, addresses: [10.0.0.999], group: gpu}\n"


def rewrite(path, text: str, mtime_s: int) -> None:
    path.write_text(text)
    os.utime(path, (mtime_s, mtime_s))  # explicit mtimes: no dependence on clock granularity


def group_of(w: InventoryWatcher) -> str:
    inv = w.inventory
    return inv.entry_group[inv.lookup(addr16_column(["10.0.0.1"])) + 1][0]


def test_reload_on_change_and_keep_old_on_invalid(tmp_path):
    p = tmp_path / "inv.yaml"
    rewrite(p, V1, 1_000_000)
    w = InventoryWatcher(p)
    assert group_of(w) == "gpu"
    assert w.maybe_reload(10.0) is False  # unchanged

    rewrite(p, V2, 1_000_010)
    assert w.maybe_reload(11.0) is True
    assert group_of(w) == "storage" and w.reloads_total == 1 and w.last_error is None

    rewrite(p, BAD, 1_000_020)
    assert w.maybe_reload(12.0) is False
    assert group_of(w) == "storage"
    assert w.errors_total == 1
    assert w.last_error == f"{p}: nodes[0] (gpu-1).addresses[0]: '10.0.0.999' is not an IP address or CIDR"
    assert w.maybe_reload(13.0) is False and w.errors_total == 1  # same bad file: reported once

    rewrite(p, V1, 1_000_030)
    assert w.maybe_reload(14.0) is True
    assert group_of(w) == "gpu" and w.last_error is None and w.reloads_total == 2


def test_missing_file_keeps_inventory_until_it_returns(tmp_path):
    p = tmp_path / "inv.yaml"
    rewrite(p, V1, 1_000_000)
    w = InventoryWatcher(p)
    p.unlink()
    assert w.maybe_reload(1.0) is False
    assert w.errors_total == 1 and "cannot read file" in w.last_error
    assert group_of(w) == "gpu"
    rewrite(p, V2, 1_000_050)
    assert w.maybe_reload(2.0) is True and group_of(w) == "storage"


def test_check_interval_limits_stat_calls(tmp_path):
    p = tmp_path / "inv.yaml"
    rewrite(p, V1, 1_000_000)
    w = InventoryWatcher(p, check_interval_s=30.0)
    assert w.maybe_reload(100.0) is False  # first check
    rewrite(p, V2, 1_000_010)
    assert w.maybe_reload(110.0) is False  # too soon
    assert group_of(w) == "gpu"
    assert w.maybe_reload(130.0) is True
    assert group_of(w) == "storage"


def test_invalid_file_at_start_raises(tmp_path):
    p = tmp_path / "inv.yaml"
    rewrite(p, BAD, 1_000_000)
    with pytest.raises(InventoryError):
        InventoryWatcher(p)
