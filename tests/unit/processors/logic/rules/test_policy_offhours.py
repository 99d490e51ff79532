"""Off-hours bulk transfers with a time-zone schedule (DST-safe via zoneinfo)."""

from datetime import datetime, timezone

import numpy as np
import pytest
from tests.support.policy import CLUSTER, GB, MIN, assert_valid_alerts, by_state, flow, make_batch

from processors.logic.rules.policy import PolicyEngine, Schedule
from processors.logic.rules import off_hours_mask


def utc_ms(*a) -> int:
    return int(datetime(*a, tzinfo=timezone.utc).timestamp() * 1000)


NY = Schedule(timezone="America/New_York", days=["mon", "tue", "wed", "thu", "fri"], start="08:00", end="18:00")


@pytest.mark.parametrize(
    "t,off",
    [
        (utc_ms(2024, 3, 4, 12, 30), True),    # Mon 07:30 EST (UTC-5)
        (utc_ms(2024, 3, 4, 13, 30), False),   # Mon 08:30 EST
        (utc_ms(2024, 3, 11, 11, 30), True),   # Mon 07:30 EDT (UTC-4): DST began Sun 2024-03-10
        (utc_ms(2024, 3, 11, 12, 30), False),  # Mon 08:30 EDT: a fixed UTC-5 offset would say 07:30
        (utc_ms(2024, 3, 11, 21, 59), False),  # Mon 17:59 EDT
        (utc_ms(2024, 3, 11, 22, 0), True),    # Mon 18:00 EDT: end is exclusive
        (utc_ms(2024, 11, 4, 12, 30), True),   # Mon 07:30 EST after fall back (Nov 3)
        (utc_ms(2024, 11, 4, 13, 0), False),   # Mon 08:00 EST
        (utc_ms(2024, 3, 9, 15, 0), True),     # Saturday
        (utc_ms(2024, 3, 10, 15, 0), True),    # Sunday of the change
    ],
)
def test_off_hours_mask_new_york(t, off):
    assert off_hours_mask(np.array([t]), NY).tolist() == [off]


def test_off_hours_mask_vectorised_and_holiday():
    s = Schedule(timezone="Europe/Berlin", start="07:00", end="20:00", holidays=["2024-12-25"])
    ts = np.array([
        utc_ms(2024, 3, 29, 5, 30),   # Fri 06:30 CET -> off
        utc_ms(2024, 4, 1, 5, 30),    # Mon 07:30 CEST (DST since Sun 2024-03-31) -> working
        utc_ms(2024, 12, 25, 10, 0),  # holiday (Wednesday) -> off
        utc_ms(2024, 12, 24, 10, 0),  # Tue -> working
        utc_ms(2024, 4, 1, 5, 30),    # repeated minute
    ])
    assert off_hours_mask(ts, s).tolist() == [True, False, True, False, False]
    assert off_hours_mask(np.array([], dtype=np.int64), s).tolist() == []


CFG = {
    "exfiltration": {"enabled": False}, "external_dependency": {"enabled": False}, "checkpoint": {"enabled": False},
    "off_hours_transfer": {"enabled": True, "source_groups": ["model-store"], "min_bytes": "10GB",
                           "exclude_dst_groups": ["external-authorized"],
                           "schedule": {"timezone": "America/New_York", "start": "08:00", "end": "18:00"}},
}


def bulk(start, dst="10.0.2.1", total=12 * GB, n=6):
    return [flow("10.0.4.1", dst, 40000, 443, nbytes=total // n, t=start + (i + 1) * 30_000, dur=30_000)
            for i in range(n)]


def test_bulk_transfer_off_hours_alerts():
    e = PolicyEngine(CFG, CLUSTER)
    start = utc_ms(2024, 3, 11, 10, 0)  # Mon 06:00 EDT
    out = e.process(make_batch(bulk(start)), start + 4 * MIN)
    assert_valid_alerts(out)
    assert by_state(out) == [("off_hours_transfer", "firing")]
    a = out[0]
    assert a["dedup_key"] == "off_hours_transfer|model-store|ms-01|storage"
    assert a["entities"]["src_node"] == "ms-01" and a["entities"]["timezone"] == "America/New_York"
    assert a["bytes_est"] == 12 * GB


def test_bulk_transfer_in_business_hours_is_fine():
    e = PolicyEngine(CFG, CLUSTER)
    start = utc_ms(2024, 3, 11, 12, 30)  # Mon 08:30 EDT (would be 07:30 with a fixed EST offset)
    assert e.process(make_batch(bulk(start)), start + 4 * MIN) == []


def test_small_or_excluded_transfers_are_fine():
    start = utc_ms(2024, 3, 9, 3, 0)  # Saturday night
    e = PolicyEngine(CFG, CLUSTER)
    assert e.process(make_batch(bulk(start, total=5 * GB)), start + 4 * MIN) == []
    e = PolicyEngine(CFG, CLUSTER)
    assert e.process(make_batch(bulk(start, dst="198.51.100.7")), start + 4 * MIN) == []
    e = PolicyEngine(CFG, CLUSTER)  # other source groups are not watched
    flows_ = [{**f, "src": "10.0.1.1"} for f in bulk(start)]
    assert e.process(make_batch(flows_), start + 4 * MIN) == []
