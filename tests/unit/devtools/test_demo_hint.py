"""The replay command the demo prints must be one the replay CLI accepts (it needs --from/--to)."""

from devtools.demo import _iso
from query.timerange import parse_time


def test_demo_replay_range_is_read_back_as_the_same_utc_second():
    t = 1_796_280_000.75  # 2026-12-03T06:40:00.75Z
    assert _iso(t) == "2026-12-03T06:40:00"
    assert parse_time(_iso(t)) == 1_796_280_000_000  # no zone = UTC, whole seconds
