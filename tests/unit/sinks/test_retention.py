"""Retention deletes whole expired dt=/hour= partitions and nothing else."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import fsspec
import pytest

from sinks.archive import HourlyBuffer, ParquetWriter
from sinks.layout import DAY_MS, HOUR_MS
from sinks.retention import DEFAULT_POLICY, apply_retention
from tests.unit.sinks.helpers import T0, flow_table


def build(root, hours):
    w = ParquetWriter(None, root)
    for i, h in enumerate(hours):
        b = HourlyBuffer("flows_raw", 0)
        b.add(flow_table([T0 + h * HOUR_MS]), i)
        w.write_plan(b.flush_plan(force=True))


def present(root):
    base = os.path.join(root, "flows_raw")
    return sorted(f"{d}/{h}" for d in os.listdir(base) for h in os.listdir(os.path.join(base, d)))


def test_deletes_days_and_hours_past_the_limit(tmp_path):
    root = str(tmp_path)
    build(root, [0, 1, 23, 24, 25, 47])  # 2026-01-01 00,01,23 / 2026-01-02 00,01,23
    now = T0 + 2 * DAY_MS + HOUR_MS + 10  # keep 1 day: cutoff = 2026-01-02T01:00:00.010
    dry = apply_retention(fsspec.filesystem("file"), root, now, {"flows_raw": 1}, dry_run=True)
    assert [(d.dt, d.hour) for d in dry] == [("2026-01-01", None), ("2026-01-02", 0)]
    assert len(present(root)) == 6  # dry run deletes nothing
    done = apply_retention(fsspec.filesystem("file"), root, now, {"flows_raw": 1})
    assert done == dry
    assert present(root) == ["dt=2026-01-02/hour=01", "dt=2026-01-02/hour=23"]


def test_none_keeps_forever_and_default_policy(tmp_path):
    root = str(tmp_path)
    build(root, [0])
    far = datetime(2030, 1, 1, tzinfo=UTC)
    assert apply_retention(None, root, far, {"flows_raw": None}) == []
    assert DEFAULT_POLICY["flows_raw"] >= 7
    assert len(apply_retention(None, root, far)) == 1
    assert apply_retention(None, root, far) == []
    with pytest.raises(ValueError):
        apply_retention(None, root, datetime(2030, 1, 1))  # naive datetime


def test_partition_kept_until_its_end_passes_the_limit(tmp_path):
    root = str(tmp_path)
    build(root, [0])
    limit = T0 + HOUR_MS + 7 * DAY_MS
    assert apply_retention(None, root, limit - 1, {"flows_raw": 7}) == []
    assert len(apply_retention(None, root, limit, {"flows_raw": 7})) == 1
