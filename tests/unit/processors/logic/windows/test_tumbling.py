"""Event-time tumbling windows: lateness, too-late, idle close, snapshot."""

import numpy as np

from processors.logic.windows.groupby import group_reduce
from processors.logic.windows.tumbling import WindowConfig, WindowManager
from tests.support.windows import PlainStateAgg


class SumAgg(PlainStateAgg):
    """Sums column "v" per window (test aggregator in the Quix shape)."""

    def initialize(self):
        return 0

    def agg(self, state, rows, window_start):
        return state + int(rows["v"].sum())


def feed(wm, times, values):
    return wm.process(np.array(times, dtype=np.int64), {"v": np.array(values, dtype=np.int64)})


def test_window_closes_when_watermark_passes_end():
    wm = WindowManager(WindowConfig(size_ms=10_000, lateness_ms=5_000, idle_close_s=30), SumAgg())
    assert feed(wm, [1_000, 9_999], [1, 2]) == []
    assert feed(wm, [14_999], [4]) == []  # watermark 9_999 < 10_000
    assert feed(wm, [15_000], [8]) == [(0, 10_000, 3)]
    assert wm.too_late == 0


def test_late_data_within_lateness_updates_open_window():
    wm = WindowManager(WindowConfig(size_ms=10_000, lateness_ms=5_000), SumAgg())
    feed(wm, [12_000], [10])
    feed(wm, [3_000], [1])  # late by 9 s but window [0,10s) still open (watermark 7 s)
    assert feed(wm, [16_000], [100]) == [(0, 10_000, 1)]
    assert wm.too_late == 0
    assert feed(wm, [30_000], [0]) == [(10_000, 20_000, 110)]


def test_too_late_data_is_counted_and_dropped():
    wm = WindowManager(WindowConfig(size_ms=10_000, lateness_ms=5_000), SumAgg())
    feed(wm, [5_000], [1])
    assert feed(wm, [15_000], [2]) == [(0, 10_000, 1)]
    assert feed(wm, [9_000, 15_500], [50, 3]) == []  # window 0 already closed
    assert wm.too_late == 1
    assert wm.flush() == [(10_000, 20_000, 5)]


def test_idle_stream_closes_on_timer():
    wm = WindowManager(WindowConfig(size_ms=10_000, lateness_ms=5_000, idle_close_s=30), SumAgg())
    feed(wm, [1_000, 12_000], [1, 2])
    assert wm.tick(100_000) == []  # first tick sees this watermark
    assert wm.tick(129_999) == []
    assert wm.tick(130_000) == [(0, 10_000, 1), (10_000, 20_000, 2)]
    assert wm.open == {}
    feed(wm, [12_500], [7])  # its window was closed by the timer
    assert wm.too_late == 1


def test_progress_resets_idle_timer():
    wm = WindowManager(WindowConfig(size_ms=10_000, lateness_ms=5_000, idle_close_s=30), SumAgg())
    feed(wm, [1_000], [1])
    wm.tick(0)
    feed(wm, [2_000], [1])
    assert wm.tick(29_000) == []  # watermark moved: timer restarts here
    assert wm.tick(58_999) == []
    assert wm.tick(59_000) == [(0, 10_000, 2)]


def test_snapshot_restore_continues_identically():
    cfg = WindowConfig(size_ms=1_000, lateness_ms=500)
    a = WindowManager(cfg, SumAgg())
    feed(a, [100, 900, 1_200], [1, 2, 3])
    b = WindowManager(cfg, SumAgg())
    b.restore(a.snapshot())
    assert feed(a, [2_600, 50], [4, 5]) == feed(b, [2_600, 50], [4, 5]) == [(0, 1_000, 8), (1_000, 2_000, 3)]
    assert a.snapshot() == b.snapshot()


def test_restored_windows_do_not_count_downtime_as_idle():
    """A worker restarted after idle_close_s of downtime must not close the restored windows at its first tick
    (before the backlog of the stream is delivered): idle time counts from the restore."""
    cfg = WindowConfig(size_ms=10_000, lateness_ms=5_000, idle_close_s=30)
    a = WindowManager(cfg, SumAgg())
    feed(a, [1_000, 12_000], [1, 2])
    assert a.tick(100_000) == []  # the idle clock starts in the first worker
    b = WindowManager(cfg, SumAgg())
    b.restore(a.snapshot())
    assert b.tick(500_000) == []  # restarted long after: not idle yet
    assert feed(b, [9_000], [4]) == []  # the backlog still lands in its window
    assert b.tick(529_999) == []
    assert b.tick(530_000) == [(0, 10_000, 5), (10_000, 20_000, 2)]


def test_group_reduce_sorted_sums_and_max():
    keys, sums, maxes = group_reduce(
        [np.array([2, 1, 2, 1]), np.array([0, 5, 0, 4])], [np.array([1, 2, 3, 4])], [np.array([7, 1, 9, 2])]
    )
    assert [k.tolist() for k in keys] == [[1, 1, 2], [4, 5, 0]]
    assert sums[0].tolist() == [4, 2, 4]
    assert maxes[0].tolist() == [2, 1, 9]


def test_columns_dump_and_load_exactly():
    """Window states go into snapshots as base64 columns; the list form of earlier snapshots still loads."""
    import json

    from processors.logic.windows.snapshots import dump_columns, load_columns

    cols = {
        "i32": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32),
        "i64": np.array([-(2**63), 1, 2**63 - 1], dtype=np.int64),
        "u64": np.array([0, 2**64 - 1, 5], dtype=np.uint64),
        "f64": np.array([0.1, -np.inf, 1e300]),
        "b": np.array([True, False, True]),
        "empty": np.zeros(0, dtype=np.int64),
    }
    back = load_columns(json.loads(json.dumps(dump_columns(cols))))
    assert set(back) == set(cols)
    for k, v in cols.items():
        assert back[k].dtype == v.dtype and back[k].tobytes() == v.tobytes()
    old = {k: [str(v.dtype), v.tolist()] for k, v in cols.items()}  # written by earlier versions
    for k, v in load_columns(old).items():
        assert v.dtype == cols[k].dtype and v.tobytes() == cols[k].tobytes()
