"""What dropped-packet notifications say in a link event's diagnosis: evidence per reason, forwarding drops."""

from __future__ import annotations

from processors.logic.detectors.drops import PortDrops
from processors.logic.diagnosis.drops import TOP_REASONS, buffer_share, drop_items, forwarding_verdict
from tests.support.flows import EXPORTER, discards


def summary(rows):
    pd = PortDrops()
    pd.add(discards([dict(t=1_000, **r) for r in rows]))
    return pd.summary((EXPORTER, 1), 0, 2_000)


def test_a_majority_of_one_forwarding_group_names_the_verdict_else_none():
    routing = summary([dict(reason=257)] * 3 + [dict(reason=279)] * 2 + [dict(reason=259)] * 4)
    dg = forwarding_verdict(routing, "leaf-1/if1", [], 10_000)
    assert dg["verdict"] == "forwarding_drop" and "5 of 9" in dg["summary"] and "ttl_exceeded 3, unresolved_neigh 2" in dg["summary"]
    assert "routing loop" in dg["next_step"] and "lower bound" in dg["cannot_tell"]
    assert forwarding_verdict(summary([dict(reason=258)] * 2 + [dict(reason=259)] * 2), "x", [], 0) is None  # a tie
    assert forwarding_verdict(summary([dict(reason=256)] * 5), "x", [], 0) is None  # "unknown": no group to act on
    assert forwarding_verdict(None, "x", [], 0) is None
    assert buffer_share(summary([dict(reason=260)] * 3 + [dict(reason=258)])) == 0.75


def test_evidence_gives_the_top_reasons_and_sums_the_rest_with_the_lost_count():
    s = summary([dict(reason=263 + i, drops=i) for i in range(TOP_REASONS + 2)])
    s["lost"] = 4
    items = drop_items(s, "leaf-1/if1", 30_000)
    assert len(items) == TOP_REASONS + 1 and items[-1]["signal"] == "drop_reason:other_reasons" and items[-1]["value"] == 2
    assert all(i["source"] == "notifications" and i["low"] == i["high"] == i["value"] for i in items)
    assert "over the counter interval (30 s)" in items[0]["note"] and "could not send 4 more" in items[0]["note"]
    assert drop_items(summary([]), "x", 0) == []
