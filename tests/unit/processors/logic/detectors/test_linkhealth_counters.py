"""Link health from counter samples: rates, wraps, resets, speed, oper, bursts, sustained load."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.logic.detectors.linkhealth import LinkHealthConfig, LinkHealthDetector

from tests.support.flows import counters

G25 = 25_000_000_000


def run(samples, **cfg):
    det = LinkHealthDetector(LinkHealthConfig(**cfg), switch_name=lambda e: {"192.0.2.10": "tor-1"}.get(e, e))
    return det, det.process(counters(samples))


def kinds(out):
    return [(d["time_ms"], d["kind"]) for d in out]


def test_sample_rates_exact():
    _, out = run([
        dict(t=0, uptime=1_000),
        dict(t=30_000, uptime=31_000, in_octets=G25 * 30 // 8 // 4, out_octets=G25 * 30 // 8,
             in_errors=240, out_errors=30, in_discards=60, out_discards=90),
    ])
    assert out == [{
        "time_ms": 30_000, "interval_ms": 30_000, "kind": "sample", "exporter": "192.0.2.10", "switch": "tor-1",
        "if_index": 1, "if_speed": G25, "previous_if_speed": G25, "util_in": 0.25, "util_out": 1.0,
        "in_errors_per_s": 8.0, "out_errors_per_s": 1.0, "in_discards_per_s": 2.0, "out_discards_per_s": 3.0,
        "oper_up": True, "detail": "", "node": "", "job": "", "diagnosis": None,
    }]


def test_32bit_counter_wrap():
    _, out = run([dict(t=0, in_octets=2**32 - 1_000), dict(t=10_000, in_octets=9_000, speed=10_000_000)],
                 error_burst_per_s=1e9)
    # speed changes 25G -> 10M on the second sample: rates use the current speed
    sample = [d for d in out if d["kind"] == "sample"][0]
    assert sample["util_in"] == 10_000 * 8 / (10.0 * 10_000_000)


def test_64bit_counter_wrap_of_signed_storage():
    _, out = run([dict(t=0, in_octets=2**64 - 500, out_octets=2**63 - 100),
                  dict(t=10_000, in_octets=1_500, out_octets=2**63 + 900)])
    assert kinds(out) == [(10_000, "sample")]
    assert out[0]["util_in"] == 2_000 * 8 / (10.0 * G25)
    assert out[0]["util_out"] == 1_000 * 8 / (10.0 * G25)


def test_counter_reset_by_uptime_and_by_implausible_step():
    _, out = run([
        dict(t=0, uptime=500_000, in_octets=10**12),
        dict(t=30_000, uptime=1_000, in_octets=5_000),  # agent restarted
        dict(t=60_000, uptime=31_000, in_octets=G25 * 30 // 8 // 2 + 5_000),
        dict(t=90_000, uptime=61_000, in_octets=10**15),  # jump beyond line rate
    ])
    assert kinds(out) == [(30_000, "counter_reset"), (60_000, "sample"), (90_000, "counter_reset")]
    assert out[0]["detail"] == "agent uptime went backwards" and out[0]["util_in"] == 0.0
    assert out[1]["util_in"] == 0.5
    # backwards far from any wrap (64-bit counter cleared) is a reset too
    _, out = run([dict(t=0, in_octets=2**40), dict(t=30_000, in_octets=1_000)])
    assert kinds(out) == [(30_000, "counter_reset")]


def test_speed_downgrade_and_upgrade():
    _, out = run([dict(t=0), dict(t=30_000, speed=1_000_000_000), dict(t=60_000, speed=G25)], emit_samples=False)
    assert kinds(out) == [(30_000, "link_downgrade"), (60_000, "speed_change")]
    assert (out[0]["previous_if_speed"], out[0]["if_speed"]) == (G25, 1_000_000_000)
    assert out[0]["detail"] == "if_speed 25000000000 -> 1000000000 bps"


def test_oper_status_changes():
    _, out = run([dict(t=0), dict(t=30_000, oper=False), dict(t=60_000, oper=False), dict(t=90_000)],
                 emit_samples=False)
    assert kinds(out) == [(30_000, "oper_down"), (90_000, "oper_up")]
    assert out[0]["oper_up"] is False


def test_error_burst_once_per_burst():
    samples = [dict(t=0)] + [dict(t=10_000 * i, in_errors=e) for i, e in ((1, 50), (2, 200), (3, 200), (4, 900))]
    _, out = run(samples, emit_samples=False)
    # 5/s (below 10/s), 15/s (burst starts), 0/s (burst over), 70/s (new burst)
    assert kinds(out) == [(20_000, "error_burst"), (40_000, "error_burst")]
    assert out[0]["in_errors_per_s"] == 15.0 and out[0]["detail"] == "15.0 errors/s"


def test_sustained_utilisation_once_per_episode():
    per30 = G25 * 30 // 8 * 8 // 10  # 80 % for 30 s
    samples = [dict(t=30_000 * i, uptime=30_000 * i + 1, in_octets=per30 * i) for i in range(25)]
    det, out = run(samples, emit_samples=False)
    assert kinds(out) == [(600_000, "sustained_utilisation")]
    assert out[0]["util_in"] == 0.8
    # drop below, then high again: a new episode needs another 10 minutes
    last = 24 * per30
    more = [dict(t=750_000, uptime=750_001, in_octets=last)]
    more += [dict(t=750_000 + 30_000 * i, uptime=750_001 + 30_000 * i, in_octets=last + per30 * i) for i in range(1, 22)]
    out2 = det.process(counters(more))
    assert kinds(out2) == [(750_000 + 600_000, "sustained_utilisation")]


def test_batches_with_several_samples_per_port_and_stale_samples():
    det = LinkHealthDetector(LinkHealthConfig())
    batch = counters([dict(t=60_000, in_octets=2_000, if_index=2), dict(t=0, if_index=2),
                      dict(t=30_000, in_octets=1_000, if_index=2), dict(t=0, if_index=3)])
    out = det.process(batch)
    assert [(d["time_ms"], d["if_index"]) for d in out] == [(30_000, 2), (60_000, 2)]
    assert det.process(counters([dict(t=10_000, if_index=2)])) == []
    assert det.stale == 1


def test_snapshot_restore():
    det, _ = run([dict(t=0, in_octets=5)])
    det2 = LinkHealthDetector(LinkHealthConfig(), switch_name=det.switch_name)
    det2.restore(det.snapshot())
    nxt = counters([dict(t=30_000, in_octets=3_000_005)])
    assert det.process(nxt) == det2.process(nxt)


_SAMPLE = st.fixed_dictionaries({
    "exporter": st.sampled_from(["192.0.2.10", "192.0.2.11", "2001:db8::1"]),
    "if_index": st.integers(1, 3),
    "t": st.integers(0, 12).map(lambda k: k * 10_000),
    "seq": st.integers(1, 4),
    "uptime": st.integers(0, 130_000),
    "speed": st.sampled_from([G25, 1_000_000_000, 0]),
    "oper": st.booleans(),
    "in_octets": st.integers(0, 2**64 - 1),
    "out_octets": st.integers(0, 2**33),
    "in_errors": st.integers(0, 5_000),
    "out_discards": st.integers(0, 2**32 + 5),
})


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(st.lists(_SAMPLE, min_size=0, max_size=6), min_size=1, max_size=6),
       burst=st.sampled_from([1.0, 1e9]), sustained_s=st.sampled_from([0.0, 20.0]))
def test_messages_processed_together_equal_one_after_the_other(messages, burst, sustained_s):
    """process(concatenated messages, message numbers) == process of each message in turn: outputs, their order,
    stale samples and the per-port state (late samples in a later message stay stale)."""
    cfg = dict(error_burst_per_s=burst, util_threshold=0.01, sustained_s=sustained_s)
    together = LinkHealthDetector(LinkHealthConfig(**cfg))
    rows = [s for m in messages for s in m]
    number = np.repeat(np.arange(len(messages)), [len(m) for m in messages])
    batch = counters(rows)
    batch["sample_sequence"] = [s["seq"] for s in rows]  # counters() numbers rows of one message
    by_one = LinkHealthDetector(LinkHealthConfig(**cfg))
    each = []
    for m in messages:
        if m:
            b = counters(m)
            b["sample_sequence"] = [s["seq"] for s in m]
            each += by_one.process(b)
    assert together.process(batch, number) == each
    assert together.stale == by_one.stale

    def state(det):
        snap = det.snapshot()
        return {tuple(k): {f: v[i] for f, v in snap["state"].items()} for i, k in enumerate(snap["keys"])}

    assert state(together) == state(by_one)


def test_port_slots_cached_across_intervals_and_reset_by_restore():
    """The same ports in the same order every interval reuse their slots; a restore with another slot layout
    drops them, and the records stay those of a detector that never cached."""
    a = [dict(exporter="192.0.2.10", if_index=i) for i in (1, 2)]
    b = [dict(exporter="192.0.2.11", if_index=i) for i in (1, 2)]

    def at(rows, t):
        return counters([dict(r, t=t, in_octets=t * r["if_index"] * 1000) for r in rows])

    other = LinkHealthDetector()
    other.process(at(b, 10_000))  # slots: .11 ports first
    other.process(at(a, 10_000))
    d = LinkHealthDetector()
    d.process(at(a, 10_000))  # slots: .10 ports first, cached
    assert d.process(at(a, 20_000)) and len(d._slot_cache) == 1
    d.restore(other.snapshot())
    ref = LinkHealthDetector()
    ref.restore(other.snapshot())
    ref._slot_cache = {}
    assert d.process(at(a, 20_000)) == ref.process(at(a, 20_000))
    assert d.snapshot() == ref.snapshot()
