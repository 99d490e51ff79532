"""Incast: exact rates and bounds, hysteresis (one burst = one event), negatives."""

import math

from processors.logic.engine import Engine, EngineConfig
from processors.logic.detectors.incast import IncastConfig

from tests.support.flows import flows

T0 = 1_000_000  # window starts are multiples of 1 s


def engine(**kw):
    return Engine(EngineConfig(incast=IncastConfig(**kw), enabled=("incast",)), capacity_bps={"d": 100e9})


def burst(w, fraction_each, srcs=("s1", "s2", "s3", "s4"), category="collective", dst="d", rate=1000):
    """Records of window w: each source sends fraction_each of 100 Gb/s for 1 s (sampled 1:rate)."""
    bytes_sampled = int(fraction_each * 100e9 / 8 / rate)
    return [dict(src=s, dst=dst, t=T0 + w * 1000 + 10 * i, bytes=bytes_sampled, packets=2000, rate=rate,
                 category=category) for i, s in enumerate(srcs)]


def events(outs):
    return [o.value for o in outs if o.kind == "incast"]


def test_one_burst_is_one_event_with_open_update_close():
    e = engine()
    recs = burst(0, 0.2) + burst(1, 0.15) + burst(2, 0.075) + burst(3, 0.225)
    # later traffic elsewhere: its window at +10 s closes (watermark +11 s) and ends the burst
    recs += [dict(src="x", dst="y", t=T0 + t, bytes=1, category="other") for t in (10_500, 13_000)]
    out = events(e.process_flows(flows(recs)))
    assert [(ev["state"], ev["window_start_ms"]) for ev in out] == [
        ("open", T0), ("update", T0 + 1000), ("update", T0 + 3000), ("close", T0 + 6000)]
    assert {ev["event_id"] for ev in out} == {f"d@{T0}"}
    first = out[0]
    c = 8000  # sampled packets behind the estimate
    se = 0.8 * math.sqrt(1 / c)
    assert first == {
        "event_id": f"d@{T0}", "state": "open", "window_start_ms": T0, "window_end_ms": T0 + 1000,
        "destination": "d", "destination_group": "gpu", "sources": ["s1", "s2", "s3", "s4"],
        "source_rates_bps": [20e9] * 4, "aggregate_bps": 80e9, "capacity_bps": 100e9,
        "fraction": 0.8, "fraction_low": 0.8 - 1.96 * se, "fraction_high": 0.8 + 1.96 * se,
        "samples": 8000, "sampling_rate": 1000, "dst_port": "", "dst_out_discards_per_s": -1.0, "diagnosis": None,
    }
    assert out[1]["fraction"] == 0.6
    assert out[3]["sources"] == [] and out[3]["fraction"] == 0.0


def test_below_threshold_windows_close_after_k():
    e = engine(close_after_windows=2)
    recs = burst(0, 0.25) + burst(1, 0.1) + burst(2, 0.1) + burst(3, 0.25)
    recs += [dict(src="x", dst="y", t=T0 + 9_000, bytes=1, category="other")]
    out = events(e.process_flows(flows(recs)))
    assert [(ev["state"], ev["event_id"], ev["window_start_ms"]) for ev in out] == [
        ("open", f"d@{T0}", T0), ("close", f"d@{T0}", T0 + 2000), ("open", f"d@{T0 + 3000}", T0 + 3000)]


def test_storage_checkpoint_burst_is_not_incast_by_default():
    recs = burst(0, 0.25, category="storage") + [dict(src="x", dst="y", t=T0 + 9_000, bytes=1, category="other")]
    assert events(engine().process_flows(flows(recs))) == []
    # ... unless storage is configured as a compute-fabric category
    out = events(engine(categories=("storage",)).process_flows(flows(recs)))
    assert [ev["state"] for ev in out] == ["open"]


def test_too_few_sources_or_below_fraction_is_not_incast():
    recs = burst(0, 0.3, srcs=("s1", "s2", "s3")) + burst(2, 0.19)
    recs += [dict(src="x", dst="y", t=T0 + 9_000, bytes=1, category="other")]
    assert events(engine().process_flows(flows(recs))) == []


def test_unsampled_records_have_exact_bounds_and_unknown_destination_uses_ip():
    e = Engine(EngineConfig(enabled=("incast",)))  # default capacity 100 Gb/s
    recs = [dict(src=f"s{i}", dst="", dst_ip="10.9.9.9", t=T0 + i, bytes=int(2.5e9), packets=10, rate=1)
            for i in range(4)]
    recs += [dict(src="x", dst="y", t=T0 + 9_000, bytes=1)]
    out = events(e.process_flows(flows(recs)))
    assert len(out) == 1
    ev = out[0]
    assert (ev["destination"], ev["destination_group"], ev["fraction"]) == ("10.9.9.9", "unknown", 0.8)
    assert ev["fraction_low"] == ev["fraction_high"] == 0.8


def test_long_netflow_record_counts_its_average_rate():
    e = engine()
    # 4 sources, each a 10 s NetFlow record of 25 GB: average 20 Gb/s each
    recs = [dict(src=f"s{i}", dst="d", t=T0 + 10_000, t_start=T0, bytes=25_000_000_000, packets=1, rate=1)
            for i in range(4)]
    recs += [dict(src="x", dst="y", t=T0 + 19_000, bytes=1, category="other")]
    out = events(e.process_flows(flows(recs)))
    assert out[0]["state"] == "open" and out[0]["aggregate_bps"] == 80e9


def test_idle_tick_closes_open_event():
    e = engine()
    out = events(e.process_flows(flows(burst(0, 0.25) + [dict(src="x", dst="y", t=T0 + 3_500, bytes=1,
                                                               category="other")])))
    assert [ev["state"] for ev in out] == ["open"]
    assert e.tick(0) == []
    out = events(e.tick(30_000))
    assert [(ev["state"], ev["window_start_ms"]) for ev in out] == [("close", T0 + 3000)]
    assert e.incast.open_events == {}
