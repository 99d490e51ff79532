"""Layout: hour directories, data-derived keys, ranges."""

from sinks.archive import layout
from tests.support.archive import T0


def test_key_roundtrip():
    h = layout.hour_index(T0 + 13 * layout.HOUR_MS + 5)
    k = layout.object_key("/a/b/", "flows_raw", h, 7, 12, 345)
    assert k == "/a/b/flows_raw/dt=2026-01-01/hour=13/part-p007-o00000000000000000012-00000000000000000345.parquet"
    assert layout.parse_key(k) == layout.KeyInfo("flows_raw", h, 7, 12, 345)
    assert layout.parse_key("/a/flows_raw/dt=2026-01-01/hour=13/.part-p007-x.tmp") is None


def test_hour_and_day_dirs():
    assert layout.hour_dir(layout.hour_index(T0 - 1)) == "dt=2025-12-31/hour=23"
    assert layout.parse_hour_dir("x/dt=2025-12-31/hour=23/y") == layout.hour_index(T0 - 1)
    assert layout.parse_day_dir("root/ds/dt=2026-01-01") == T0 // layout.DAY_MS
    assert layout.day_dir(T0 // layout.DAY_MS) == "dt=2026-01-01"


def test_hours_in_range_half_open():
    h0 = T0 // layout.HOUR_MS
    assert list(layout.hours_in_range(T0, T0 + layout.HOUR_MS)) == [h0]
    assert list(layout.hours_in_range(T0 + 1, T0 + layout.HOUR_MS + 1)) == [h0, h0 + 1]
    assert list(layout.hours_in_range(T0, T0)) == []


def test_bad_key_parts_rejected():
    import pytest

    with pytest.raises(ValueError):
        layout.file_name(0, 5, 4)
    with pytest.raises(KeyError, match="known"):
        layout.spec("nope")
