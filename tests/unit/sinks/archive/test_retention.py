"""Retention deletes whole expired dt=/hour= partitions and nothing else."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import fsspec
import pytest

from sinks.archive import layout
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.layout import DAY_MS, HOUR_MS
from sinks.archive.retention import DEFAULT_POLICY, apply_retention
from tests.support.archive import T0, flow_table


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


def test_defaults_live_in_one_place():
    """The defaults are the stream catalog's archive_days (and its rollups'); settings hold overrides only."""
    from fabricflow import streams
    from fabricflow.settings import load_settings
    from sinks.archive.retention import retention_policy

    assert load_settings(None).archive.retention_days == {}
    assert retention_policy(load_settings(None).archive.retention_days) == DEFAULT_POLICY
    assert DEFAULT_POLICY["flows_raw"] == streams.DATASETS["flows_raw"].archive_days
    assert DEFAULT_POLICY["ingest_quality"] == streams.DATASETS["ingest_quality"].archive_days
    assert set(DEFAULT_POLICY) == set(layout.DATASETS)
    over = retention_policy({"default": 5, "alerts": -1})
    assert over["alerts"] is None and over["matrix_windows"] == 5


def test_the_archive_sink_runs_retention_on_a_schedule(tmp_path, caplog):
    """The sink's RetentionSchedule deletes expired partitions by itself, counts and logs each pass."""
    import logging
    import time

    from fabricflow.settings import load_settings
    from sinks.archive.service import ArchiveService

    root = str(tmp_path)
    build(root, [0, 1, 47])
    s = load_settings(None, archive={"url": f"file://{root}", "retention_days": {"flows_raw": 1},
                                     "retention_interval_s": 0.05, "metrics_port": 0})
    svc = ArchiveService(s, fs=fsspec.filesystem("file"), root=root, metrics_port=0, summaries=False)
    sched = svc.retention
    sched.first_after_s = 0.01
    sched.clock = lambda: T0 + 2 * DAY_MS + HOUR_MS + 10
    with caplog.at_level(logging.INFO):
        sched.start()
        deadline = time.monotonic() + 10
        reg = svc.metrics.registry
        while (reg.get_sample_value("fabricflow_sink_retention_runs_total") or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        sched.stop()
    assert reg.get_sample_value("fabricflow_sink_retention_runs_total") >= 2
    assert reg.get_sample_value("fabricflow_sink_retention_deleted_partitions_total") == 1  # the whole first day
    assert present(root) == ["dt=2026-01-02/hour=23"]
    assert "archive retention: deleted 1 partition(s) of flows_raw" in caplog.text


def test_a_failing_retention_pass_is_counted_and_the_next_one_runs(tmp_path):
    from fabricflow.settings import load_settings
    from sinks.archive.metrics import SinkMetrics
    from sinks.archive.retention import RetentionSchedule
    import logging

    class Broken:
        def invalidate_cache(self, _p):
            raise OSError("object store down")

    m = SinkMetrics()
    sched = RetentionSchedule(lambda: Broken(), str(tmp_path), {"flows_raw": 1}, 60, logging.getLogger("t"), m)
    assert sched.run_once() is None
    assert m.registry.get_sample_value("fabricflow_sink_retention_errors_total") == 1
    assert load_settings(None).archive.retention_interval_s > 0
