"""Compaction of an hour's small files into one (sinks/archive/compaction.py, and the archive sink's schedule for it):
no answer changes, only committed offsets are merged, a crash counts each row once."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sinks.archive import layout
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.index import FsWrittenIndex
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.layout import HOUR_MS
from query.reports import ArchiveQuery
from tests.support.archive import T0
from tests.support.rollups import Crash, MIN, REPORTS, random_flows, rollup_names, write_archive


def answers(root, frm=T0, to=T0 + 3 * HOUR_MS):
    out = {}
    for name, fn in REPORTS.items():
        for src in ("raw", "1m", "1h"):
            out[(name, src)] = fn(ArchiveQuery(None, root), frm, to, src)
    return out


def test_compaction_merges_an_hours_files_and_changes_no_answer(tmp_path):
    from sinks.archive.compaction import compact

    root = str(tmp_path)
    write_archive(root, np.random.default_rng(11))
    before = answers(root)
    n_before = len(rollup_names(root, "traffic_1h"))
    done = compact(None, root, {("flows_enriched", 0): 10**9, ("flows_enriched", 1): 10**9}, before_hour=10**9)
    assert done and all(m.inputs >= 2 and m.rows_out <= m.rows_in for m in done)
    for d in ("traffic_1m", "traffic_1h"):
        names = rollup_names(root, d)
        assert len(names) == 3 * 2 and all(os.path.basename(n).startswith("merged-") for n in names)
    assert n_before > 6
    after = answers(root)
    assert all(after[k].equals(before[k]) for k in before)
    # the raw files' rollups count as present: a restart repairs nothing
    idx = FsWrittenIndex(None, root, "flows_enriched", 0)
    idx.intervals(layout.hour_index(T0))
    assert idx.repaired == []
    # nothing left to do
    assert compact(None, root, {("flows_enriched", 0): 10**9}, before_hour=10**9) == []


def test_compaction_only_merges_files_below_the_committed_offset(tmp_path):
    from sinks.archive.compaction import compact_hour

    root = str(tmp_path)
    write_archive(root, np.random.default_rng(12), hours=(0,), partitions=1)
    hour = layout.hour_index(T0)
    keys = [layout.parse_key(f"{root}/traffic_1h/{n}") for n in rollup_names(root, "traffic_1h")]
    keys.sort(key=lambda k: k.first_offset)
    cut = keys[2].last_offset + 1  # committed: the first three files are below it
    before = answers(root, T0, T0 + HOUR_MS)
    m = compact_hour(None, root, "traffic_1h", hour, 0, cut)
    assert m.inputs == 3
    left = {os.path.basename(n) for n in rollup_names(root, "traffic_1h")}
    assert len(left) == len(keys) - 3 + 1
    after = answers(root, T0, T0 + HOUR_MS)
    assert all(after[k].equals(before[k]) for k in before)


def test_a_crash_between_the_merged_file_and_the_deletes_counts_each_row_once(tmp_path, monkeypatch):
    from fsspec.implementations.local import LocalFileSystem

    from sinks.archive.compaction import compact_hour

    root = str(tmp_path)
    write_archive(root, np.random.default_rng(13), hours=(0,), partitions=1)
    hour = layout.hour_index(T0)
    before = answers(root, T0, T0 + HOUR_MS)

    def crash(self, path, *a, **kw):
        raise Crash()

    monkeypatch.setattr(LocalFileSystem, "rm", crash)
    with pytest.raises(Crash):
        compact_hour(None, root, "traffic_1h", hour, 0, 10**9)
    monkeypatch.undo()
    assert any(os.path.basename(n).startswith("merged-") for n in rollup_names(root, "traffic_1h"))
    after = answers(root, T0, T0 + HOUR_MS)  # once: inside the all() it ran every report again per key
    assert all(after[k].equals(before[k]) for k in before)  # merged + inputs: once
    # a late file arrives for the hour, then the compaction runs again: merged + late -> one file
    w = ParquetWriter(None, root)
    b = HourlyBuffer("flows_enriched", 0)
    late = table_from_columns(random_flows(np.random.default_rng(1), [T0 + 5, T0 + 6]), "flow_enriched")
    b.add(late, 10**6)
    w.write_plan(b.flush_plan(force=True))
    m = compact_hour(None, root, "traffic_1h", hour, 0, 10**9)
    assert m.inputs == 2 and len(rollup_names(root, "traffic_1h")) == 1
    q = ArchiveQuery(None, root)
    n = q.sql("SELECT sum(flow_records) AS n FROM traffic_1h").column("n")[0].as_py()
    assert n == q.sql("SELECT count(*) AS n FROM flows_enriched").column("n")[0].as_py() == 602


def _sink_with_compaction(root, now_ms):
    import fsspec

    from fabricflow.settings import load_settings
    from sinks.archive.service import ArchiveService

    s = load_settings(None, archive={"url": f"file://{root}", "metrics_port": 0, "compaction_interval_s": 0.05})
    svc = ArchiveService(s, fs=fsspec.filesystem("file"), root=root, metrics_port=0, summaries=False,
                         clock=lambda: now_ms / 1000)
    svc.compaction.first_after_s = 0.01
    return svc


def test_the_archive_sink_compacts_on_a_schedule_below_its_committed_offsets(tmp_path, caplog):
    """The sink's own CompactionSchedule merges closed hours of the partitions it is assigned, below the offsets it
    committed (files at or past them stay: they may still be written again), counts runs and merged files, and
    changes no answer."""
    import logging
    import time

    root = str(tmp_path)
    write_archive(root, np.random.default_rng(21), hours=(0, 1, 2), partitions=2)
    before = answers(root)
    svc = _sink_with_compaction(root, T0 + 3 * HOUR_MS + 6 * MIN)  # hours 0-2 closed (grace 5 min)
    topic = svc.by_dataset["flows_enriched"].topic
    keys = sorted((layout.parse_key(f"{root}/traffic_1h/{n}") for n in rollup_names(root, "traffic_1h")),
                  key=lambda k: (k.partition, k.first_offset))
    p0 = [k for k in keys if k.partition == 0]
    cut = sorted(k.last_offset for k in p0)[len(p0) // 2] + 1  # partition 0 committed half way
    svc._assigned.update({(topic, 0), (topic, 1)})
    svc.ledger.committed.update({(topic, 0): cut, (topic, 1): 10**9, ("some.other.topic", 0): 10**9})
    svc._assigned.discard((topic, 1))  # partition 1 was revoked: this sink does not compact it
    reg = svc.metrics.registry
    with caplog.at_level(logging.INFO):
        svc.compaction.start()
        deadline = time.monotonic() + 20
        while (reg.get_sample_value("fabricflow_sink_compaction_runs_total") or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        svc.compaction.stop()
    assert reg.get_sample_value("fabricflow_sink_compaction_runs_total") >= 2
    assert reg.get_sample_value("fabricflow_sink_compaction_errors_total") == 0
    left = [layout.parse_key(f"{root}/traffic_1h/{n}") for n in rollup_names(root, "traffic_1h")]
    merged = [k for k in left if k.merged]
    assert merged and all(k.partition == 0 and k.last_offset < cut for k in merged)
    assert {(k.partition, k.first_offset) for k in left if k.partition == 1} == \
        {(k.partition, k.first_offset) for k in keys if k.partition == 1}  # untouched
    below: dict[int, int] = {}  # hour -> partition 0's files below the cut (merged when 2 or more)
    for k in p0:
        if k.last_offset < cut:
            below[k.hour] = below.get(k.hour, 0) + 1
    want = sum(n for n in below.values() if n >= 2)
    assert want >= 2 and len(merged) == sum(1 for n in below.values() if n >= 2)
    assert reg.get_sample_value("fabricflow_sink_compaction_files_total") == 2 * want  # traffic_1m and _1h alike
    assert len(left) == len(keys) - want + len(merged)
    assert "archive compaction: merged" in caplog.text
    after = answers(root)
    assert all(after[k].equals(before[k]) for k in before)


def test_a_failed_compaction_is_logged_counted_and_retried_next_run(tmp_path, caplog, monkeypatch):
    import logging

    from sinks.archive import compaction

    root = str(tmp_path)
    write_archive(root, np.random.default_rng(22), hours=(0, 1), partitions=1)
    before = answers(root, T0, T0 + 2 * HOUR_MS)
    svc = _sink_with_compaction(root, T0 + 2 * HOUR_MS + 6 * MIN)
    topic = svc.by_dataset["flows_enriched"].topic
    svc._assigned.add((topic, 0))
    svc.ledger.committed[(topic, 0)] = 10**9
    real = compaction.compact_hour
    bad_hour = layout.hour_index(T0)

    def flaky(fs, root, dataset, hour, *a, **kw):
        if hour == bad_hour and dataset == "traffic_1h":
            raise OSError("object store hiccup")
        return real(fs, root, dataset, hour, *a, **kw)

    monkeypatch.setattr(compaction, "compact_hour", flaky)
    reg = svc.metrics.registry
    with caplog.at_level(logging.INFO):
        done = svc.compaction.run_once()
    assert len(done) == 3  # the other hour of traffic_1h and both of traffic_1m
    assert reg.get_sample_value("fabricflow_sink_compaction_errors_total") == 1
    failed = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(failed) == 1 and "1 hour(s) failed" in failed[0].getMessage() and "OSError" in failed[0].getMessage()
    monkeypatch.setattr(compaction, "compact_hour", real)
    assert len(svc.compaction.run_once()) == 1  # retried: the failed hour now
    assert reg.get_sample_value("fabricflow_sink_compaction_runs_total") == 2
    assert all(os.path.basename(n).startswith("merged-") for n in rollup_names(root, "traffic_1h"))
    after = answers(root, T0, T0 + 2 * HOUR_MS)
    assert all(after[k].equals(before[k]) for k in before)
    # a pass that fails as a whole (the filesystem cannot be had) is one error and one line too
    svc.compaction.fs_factory = lambda: (_ for _ in ()).throw(OSError("down"))
    assert svc.compaction.run_once() is None
    assert reg.get_sample_value("fabricflow_sink_compaction_errors_total") == 2


def test_live_files_skip_only_what_a_merged_file_covers():
    d = "/r/traffic_1h/dt=2026-01-01/hour=00/"

    def f(kind, p, a, b):
        return d + f"{kind}-p{p:03d}-o{a:020d}-{b:020d}.parquet"

    plain_nested = [f("part", 0, 250, 700), f("part", 0, 400, 500)]  # a restart re-chunked: both count
    assert layout.live_files(plain_nested) == plain_nested
    files = [f("merged", 0, 100, 500), f("part", 0, 100, 200), f("part", 0, 300, 500), f("part", 0, 450, 900),
             f("part", 1, 150, 160), f("merged", 0, 100, 300)]
    assert layout.live_files(files) == [f("merged", 0, 100, 500), f("part", 0, 450, 900), f("part", 1, 150, 160)]
