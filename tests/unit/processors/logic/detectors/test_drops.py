"""Drop reasons per port from sFlow dropped-packet notifications: attribution, time ranges, lost notifications."""

from __future__ import annotations

from processors.logic.detectors.drops import PortDrops
from tests.support.flows import EXPORTER, discards


def test_a_notification_counts_on_its_egress_port_else_its_input_port_per_reason():
    pd = PortDrops()
    n = pd.add(discards([dict(t=1_000, out_if=3, in_if=7, reason=258), dict(t=1_500, out_if=0, in_if=7, reason=258),
                         dict(t=2_000, out_if=3, reason=258), dict(t=2_000, out_if=3, reason=259),
                         dict(t=2_100, out_if=0, in_if=0), dict(t=2_100, out_if=0, in_if=(1 << 30) | 5)]))
    assert n == 4 and pd.unattributed == 2 and pd.notifications == 6
    s = pd.summary((EXPORTER, 3), 0, 10_000)
    assert s["total"] == 3 and s["reasons"] == [("acl", "acl", 2), ("no_buffer_space", "buffer", 1)]
    assert s["groups"] == {"acl": 2, "buffer": 1} and s.top_group == "acl" and s.text() == "acl 2, no_buffer_space 1"
    assert pd.summary((EXPORTER, 7), 0, 10_000)["reasons"] == [("acl", "acl", 1)]


def test_the_range_is_to_the_second_after_lo_up_to_hi_and_batches_add_up():
    pd = PortDrops()
    pd.add(discards([dict(t=10_000), dict(t=10_999), dict(t=11_000, reason=257)]))
    pd.add(discards([dict(t=10_500), dict(t=30_000, reason=5000)]))  # the same second again; a code not listed
    assert pd.summary((EXPORTER, 1), 9_999, 10_999)["total"] == 3
    assert pd.summary((EXPORTER, 1), 10_000, 11_000)["reasons"] == [("ttl_exceeded", "routing", 1)]
    assert pd.summary((EXPORTER, 1), 11_000, 40_000)["reasons"] == [("other", "other", 1)]
    assert pd.summary((EXPORTER, 2), 0, 40_000)["total"] == 0


def test_lost_is_the_rise_of_the_agents_counter_over_the_range_and_state_survives_a_snapshot():
    pd = PortDrops(horizon_s=60)
    pd.add(discards([dict(t=1_000, drops=5), dict(t=20_000, drops=9), dict(t=25_000, drops=12)]))
    assert pd.summary((EXPORTER, 1), 10_000, 30_000)["lost"] == 7
    assert pd.summary((EXPORTER, 1), 0, 30_000)["lost"] == 0  # nothing earlier to compare with
    pd.add(discards([dict(t=2_000, out_if=2)]))
    pd.add(discards([dict(t=200_000)]))  # past the horizon: the old seconds go, and port 2 with nothing newer
    assert (EXPORTER, 2) not in pd.ports
    pd.add(discards([dict(t=200_500)]))  # the same second in the next batch: one entry
    again = PortDrops(horizon_s=60)
    again.restore(pd.snapshot())
    assert again.ports == pd.ports and again.ports[(EXPORTER, 1)] == [[200, 259, 2, 0, ""]]
    assert again.notifications == 6


def test_the_jobs_of_the_dropped_packets_are_counted_beside_the_reasons():
    from processors.logic.detectors.drops import dropped_jobs
    from processors.logic.enrich.inventory import Inventory

    inv = Inventory.from_dict({"nodes": [{"name": "a", "group": "gpu", "rack": "r1", "switch": "s", "ips": ["10.0.0.1"]},
                                         {"name": "b", "group": "gpu", "rack": "r1", "switch": "s", "ips": ["10.0.0.2"]}],
                               "jobs": [{"name": "train-a", "nodes": ["a"]}]})
    arr = discards([dict(t=1_000, dst="10.0.0.1"), dict(t=1_000, src="10.0.0.1", dst="10.0.0.2"),
                    dict(t=1_000, src="10.0.0.2", dst="10.9.9.9")])
    jobs = dropped_jobs(inv, arr)
    assert jobs.tolist() == ["train-a", "train-a", ""]  # the destination's job, else the source's
    pd = PortDrops()
    pd.add(arr, jobs)
    assert pd.summary((EXPORTER, 1), 0, 2_000)["jobs"] == [("train-a", 2)]
