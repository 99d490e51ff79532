"""HourlyBuffer / ParquetWriter: hour split, closing, late data, commits, exactly-once under crashes."""

from __future__ import annotations

import os

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sinks.archive import layout
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.index import FsWrittenIndex, WrittenIndex
from sinks.archive.parquet import ParquetWriter
from tests.support.archive import FakeLog, flow_table, hour_ms

GRACE = 5 * 60_000


def idents(plan):
    return sorted((f.hour - layout.hour_index(hour_ms(0)), f.first_offset, f.last_offset) for f in plan.files)


def test_rows_split_by_event_hour_vectorised():
    b = HourlyBuffer("flows_raw", 0)
    b.add(flow_table([hour_ms(0) + 1, hour_ms(1) + 1, hour_ms(0) + 2, hour_ms(2) + 1]), 7)
    plan = b.flush_plan(force=True)
    assert idents(plan) == [(0, 7, 7), (1, 7, 7), (2, 7, 7)]
    rows = {f.hour - layout.hour_index(hour_ms(0)): f.table.num_rows for f in plan.files}
    assert rows == {0: 2, 1: 1, 2: 1}
    h0 = next(f for f in plan.files if f.table.num_rows == 2)
    assert h0.table["in_if"].to_pylist() == [0, 2]  # order kept within an hour


def test_hour_closes_only_after_grace():
    b = HourlyBuffer("flows_raw", 3, grace_ms=GRACE)
    b.add(flow_table([hour_ms(0) + 10]), 0)
    b.add(flow_table([hour_ms(1) + GRACE - 1]), 1)
    assert b.flush_plan(0).files == []
    assert b.flush_plan(0).safe_offsets == {("flows_raw", 3): -1}
    b.add(flow_table([hour_ms(1) + GRACE]), 2)
    plan = b.flush_plan(0)
    assert idents(plan) == [(0, 0, 0)]
    assert plan.safe_offsets == {("flows_raw", 3): 0}  # offset 1 is still buffered (hour 1)
    assert plan.commit_offsets == {("flows_raw", 3): 1}


def test_safe_offset_never_passes_an_unwritten_row():
    b = HourlyBuffer("flows_raw", 0)
    b.add(flow_table([hour_ms(1)]), 10)  # hour 1 stays open
    b.add(flow_table([hour_ms(0)]), 11)  # hour 0 ...
    b.add(flow_table([hour_ms(2) + GRACE]), 12)  # ... closes here, hour 1 too
    plan = b.flush_plan(0)
    assert idents(plan) == [(0, 11, 11), (1, 10, 10)]
    assert plan.safe_offsets[("flows_raw", 0)] == 11
    b.confirm(plan)
    assert b.flush_plan(0).files == []  # confirmed files are not planned again
    b.advance(20)  # empty messages
    assert b.flush_plan(force=True).safe_offsets[("flows_raw", 0)] == 20


def test_future_outlier_does_not_close_hours():
    b = HourlyBuffer("flows_raw", 0)
    t = [hour_ms(0) + i for i in range(100)] + [hour_ms(30)]
    b.add(flow_table(t), 0)
    assert b.flush_plan(0).files == []
    assert b.watermark < hour_ms(1)


def test_late_rows_go_to_a_new_file_in_their_hour(tmp_path):
    fs = fsspec.filesystem("file")
    w = ParquetWriter(fs, str(tmp_path))
    b = HourlyBuffer("flows_raw", 1, index=FsWrittenIndex(fs, str(tmp_path), "flows_raw", 1), late_flush_ms=1000)
    b.add(flow_table([hour_ms(0) + 1, hour_ms(0) + 2], ids=[0, 1]), 0)
    b.add(flow_table([hour_ms(1) + GRACE + 1], ids=[2]), 1)
    p = b.flush_plan(0)
    first_key = w.write_plan(p)[0]
    b.confirm(p)
    before = os.stat(first_key).st_mtime_ns
    b.add(flow_table([hour_ms(0) + 3], ids=[3]), 2)  # late for hour 0
    assert b.flush_plan(500).files == []  # late rows wait late_flush_ms
    p = b.flush_plan(1500)
    assert [(f.late, f.first_offset, f.last_offset) for f in p.files] == [(True, 2, 2)]
    (key,) = w.write_plan(p)
    assert os.path.dirname(key) == os.path.dirname(first_key)  # same hour directory
    assert key.endswith("part-p001-o00000000000000000002-00000000000000000002.parquet")
    assert os.stat(first_key).st_mtime_ns == before  # never rewritten
    assert pq.read_table(key)["in_if"].to_pylist() == [3]
    assert b.rows_late == 1


def test_idle_timer_and_size_limit_flush():
    b = HourlyBuffer("flows_raw", 0, idle_ms=10_000, max_rows=3)
    b.add(flow_table([hour_ms(0)]), 0)
    assert b.flush_plan(0).files == []
    assert b.flush_plan(9_999).files == []
    assert idents(b.flush_plan(10_000)) == [(0, 0, 0)]
    b2 = HourlyBuffer("flows_raw", 0, max_rows=3)
    b2.add(flow_table([hour_ms(0)] * 2), 0)
    assert b2.flush_plan(0).files == []
    b2.add(flow_table([hour_ms(0)]), 1)
    assert idents(b2.flush_plan(0)) == [(0, 0, 1)]


def test_offsets_must_increase_between_calls():
    b = HourlyBuffer("flows_raw", 0)
    b.add(flow_table([hour_ms(0)]), 5)
    with pytest.raises(ValueError, match="one Kafka message in one call"):
        b.add(flow_table([hour_ms(0)]), 5)
    with pytest.raises(ValueError):
        b.add(flow_table([hour_ms(0)] * 2), [7, 6])


def test_unconfirmed_plan_is_retried_with_the_same_keys(tmp_path):
    b = HourlyBuffer("flows_raw", 0)
    b.add(flow_table([hour_ms(0)]), 0)
    p1 = b.flush_plan(force=True)
    p2 = b.flush_plan(0)  # write failed, no confirm: planned again
    assert [f.key("r") for f in p1.files] == [f.key("r") for f in p2.files]


def test_written_index_coverage():
    ix = WrittenIndex()
    ix.add(5, 10, 20)
    ix.add(5, 21, 25)
    ix.add(5, 40, 40)
    got = ix.covered(5, np.array([9, 10, 15, 25, 26, 39, 40, 41]))
    assert got.tolist() == [False, True, True, True, False, False, True, False]
    assert not ix.covered(6, np.array([10])).any()


def test_writer_is_atomic_and_writes_zstd_row_groups(tmp_path):
    w = ParquetWriter(None, str(tmp_path), row_group_size=1000)
    b = HourlyBuffer("flows_raw", 2)
    b.add(flow_table([hour_ms(0)] * 2500), 0)
    (key,) = w.write_plan(b.flush_plan(force=True))
    assert sorted(os.listdir(os.path.dirname(key))) == [os.path.basename(key)]  # no temp file left
    md = pq.ParquetFile(key).metadata
    assert md.num_rows == 2500 and md.num_row_groups == 3
    assert md.row_group(0).column(0).compression == "ZSTD"
    assert md.metadata[b"fabricflow.offsets"] == b"0-0"


def test_writer_on_memory_filesystem():
    fs = fsspec.filesystem("memory")
    w = ParquetWriter(fs, "memory://bucket/archive")
    b = HourlyBuffer("flows_raw", 0)
    b.add(flow_table([hour_ms(0)]), 0)
    (key,) = w.write_plan(b.flush_plan(force=True))
    assert key.startswith("/bucket/archive/flows_raw/dt=2026-01-01/hour=00/part-p000-")
    with fs.open(key, "rb") as fh:
        assert pq.read_table(fh).num_rows == 1
    fs.rm("/bucket", recursive=True)


# ----------------------------------------------------------------------------- exactly-once


class Crash(Exception):
    pass


def run_sink(fs, root, log: FakeLog, *, crash_at: set[int], batch: int = 3, step0: int = 0, trace=None, stats=None,
             **kw):
    """The consumer loop: read from log.committed, add, plan, write, commit, confirm.

    Each step (write of one file, commit) has a number; a step in ``crash_at`` raises
    Crash *before* it runs. Returns the step counter reached. ``now`` is simulated.
    """
    part = 0
    buf = HourlyBuffer("flows_raw", part, index=FsWrittenIndex(fs, root, "flows_raw", part),
                       start_offset=log.committed, **kw)
    w = ParquetWriter(fs, root)
    step = step0

    def do(kind, action):
        nonlocal step
        step += 1
        if trace is not None:
            trace.append(kind)
        if stats is not None:
            stats["duplicates"] = stats.get("duplicates", 0) + buf.rows_duplicate - stats.get("_seen", 0)
            stats["_seen"] = buf.rows_duplicate
        if step in crash_at:
            raise Crash(step)
        action()

    off = log.committed
    now = 0
    while True:
        end = min(off + batch, len(log.messages))
        for o in range(off, end):
            buf.add(log.messages[o], o)
        off = end
        now += 1000
        final = off >= len(log.messages)
        plan = buf.flush_plan(now, force=final)
        for f in plan.files:
            do("write", lambda f=f: w.write(f))
        c = plan.commit_offsets.get(("flows_raw", part))
        if c is not None:
            do("commit", lambda c=c: log.commit(c))
        buf.confirm(plan)
        if final:
            return step


def run_until_done(fs, root, log, crash_at, stats=None, **kw):
    step = 0
    for _ in range(len(crash_at) + 2):
        try:
            if stats is not None:
                stats["_seen"] = 0
            run_sink(fs, root, log, crash_at=crash_at, step0=step, stats=stats, **kw)
            return
        except Crash as c:
            step = c.args[0]  # restart from the committed offset with a fresh buffer
    raise AssertionError("did not finish")


def archive_rows(root) -> list[tuple[str, int]]:
    out = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            assert not n.startswith("."), "temp file left behind"
            k = layout.parse_key(os.path.join(dirpath, n))
            t = pq.read_table(os.path.join(dirpath, n))
            assert (layout.hour_index(t["time_end_ms"].to_numpy()) == k.hour).all(), "row in the wrong hour"
            out += [(n, i) for i in t["in_if"].to_pylist()]
    return out


def archive_keys(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns}


def make_log(times_per_msg) -> FakeLog:
    msgs, rid = [], 0
    for ts in times_per_msg:
        msgs.append(flow_table(ts, ids=list(range(rid, rid + len(ts)))))
        rid += len(ts)
    return FakeLog(msgs), rid


def scenario():
    # 3 hours, an out-of-order tail, a late row for hour 0 after hour 0 closed, rows of 2 hours per message.
    g = GRACE
    return [
        [hour_ms(0) + 1, hour_ms(0) + 2], [hour_ms(0) + 3], [hour_ms(1) + 1, hour_ms(0) + 4],
        [hour_ms(1) + 2], [hour_ms(1) + g + 1], [hour_ms(0) + 5],  # late for hour 0
        [hour_ms(1) + g + 2, hour_ms(2) + 1], [hour_ms(2) + g + 10], [hour_ms(2) + g + 11],
        [hour_ms(3) + g + 1], [hour_ms(1) + 7],  # late for hour 1
        [hour_ms(3) + g + 2],
    ]


@pytest.mark.parametrize("where", ["none", "before_write", "after_write_before_commit", "after_commit"])
def test_exactly_once_at_each_crash_point(tmp_path, where):
    fs = fsspec.filesystem("file")
    ref_root, root = str(tmp_path / "ref"), str(tmp_path / "crash")
    log, nrows = make_log(scenario())
    run_until_done(fs, ref_root, log, set())
    ref_keys = archive_keys(ref_root)
    assert sorted(i for _, i in archive_rows(ref_root)) == list(range(nrows))

    # the kinds of the reference run's steps; crash before a chosen one
    trace: list[str] = []
    run_sink(fs, str(tmp_path / "probe"), make_log(scenario())[0], crash_at=set(), trace=trace)
    kinds = list(enumerate(trace, start=1))
    first_write = next(i for i, k in kinds if k == "write")
    # a commit right after a write: crashing there = file durable, offsets not committed
    commit_after_write = next(i for i, k in kinds if k == "commit" and trace[i - 2] == "write")
    # the step after a commit: crashing there = everything up to the commit done
    after_commit = next(i + 1 for i, k in kinds if k == "commit" and i < len(trace))
    crash = {"none": set(), "before_write": {first_write}, "after_write_before_commit": {commit_after_write},
             "after_commit": {after_commit}}[where]
    log3, _ = make_log(scenario())
    stats: dict = {}
    run_until_done(fs, root, log3, crash, stats=stats)
    rows = archive_rows(root)
    assert sorted(i for _, i in rows) == list(range(nrows)), "each row exactly once"
    if where in ("none", "after_commit", "before_write"):
        assert archive_keys(root) == ref_keys
    if where == "after_write_before_commit":
        assert stats["duplicates"] > 0  # the replayed rows were recognised as durable
    else:
        assert stats.get("duplicates", 0) == 0 or where != "none"


@settings(max_examples=25, deadline=None)
@given(crashes=st.sets(st.integers(1, 40), max_size=5), batch=st.integers(1, 4),
       max_rows=st.sampled_from([2, 3, 1_000_000]))
def test_exactly_once_property(tmp_path_factory, crashes, batch, max_rows):
    fs = fsspec.filesystem("file")
    root = str(tmp_path_factory.mktemp("eo"))
    log, nrows = make_log(scenario())
    run_until_done(fs, root, log, crashes, batch=batch, max_rows=max_rows, late_flush_ms=2000)
    assert sorted(i for _, i in archive_rows(root)) == list(range(nrows))
    assert log.committed == len(log.messages)


def test_replay_through_fresh_buffer_writes_nothing_new(tmp_path):
    fs = fsspec.filesystem("file")
    root = str(tmp_path)
    log, nrows = make_log(scenario())
    run_until_done(fs, root, log, set())
    keys = archive_keys(root)
    mtimes = {k: os.stat(os.path.join(root, k)).st_mtime_ns for k in keys}
    log.committed = 0  # e.g. a consumer group reset to the beginning
    buf = HourlyBuffer("flows_raw", 0, index=FsWrittenIndex(fs, root, "flows_raw", 0))
    for o, m in enumerate(log.messages):
        buf.add(m, o)
    plan = buf.flush_plan(force=True)
    assert plan.files == []
    assert buf.rows_duplicate == nrows
    assert plan.safe_offsets[("flows_raw", 0)] == len(log.messages) - 1
    assert archive_keys(root) == keys
    assert {k: os.stat(os.path.join(root, k)).st_mtime_ns for k in keys} == mtimes


def test_rewriting_a_plan_gives_identical_files(tmp_path):
    fs = fsspec.filesystem("file")
    log, _ = make_log(scenario())
    out = []
    for r in ("a", "b"):
        buf = HourlyBuffer("flows_raw", 0)
        for o, m in enumerate(log.messages):
            buf.add(m, o)
        plan = buf.flush_plan(force=True)
        ParquetWriter(fs, str(tmp_path / r)).write_plan(plan)
        out.append({k: pq.read_table(tmp_path / r / k) for k in archive_keys(str(tmp_path / r))})
    assert out[0].keys() == out[1].keys()
    for k in out[0]:
        assert out[0][k].equals(out[1][k])


def test_table_conforms_to_dataset_schema():
    b = HourlyBuffer("flows_raw", 0)
    t = flow_table([hour_ms(0)]).drop_columns(["src_ip", "dst_ip", "exporter"])
    b.add(t, 0)
    (f,) = b.flush_plan(force=True).files
    assert f.table.column("src_ip").to_pylist() == ["10.0.0.1"]
    with pytest.raises(KeyError):
        b.add(pa.table({"time_end_ms": [hour_ms(0)]}), 1)
