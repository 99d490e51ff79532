"""Traffic matrix cells: sampling-scaled sums, node and group levels, late data."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows import WindowConfig

from .helpers import flows


def engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=5_000), enabled=("matrix",)))


def cells(outs):
    return [o.value for o in outs if o.kind == "matrix"]


def test_matrix_cells_scaled_by_sampling_rate():
    e = engine()
    batch = flows([
        dict(src="a", dst="b", t=1_000, bytes=1_500, packets=1, rate=1024),
        dict(src="a", dst="b", t=2_000, bytes=500, packets=2, rate=1024),
        dict(src="a", dst="s1", t=3_000, bytes=9_000, packets=6, rate=1, category="storage", dst_group="storage"),
        dict(src="", dst="b", t=4_000, bytes=100, packets=1, rate=10, category="other"),
        dict(src="a", dst="b", t=10_500, bytes=1, packets=1),  # next window
    ])
    assert e.process_flows(batch) == []
    out = cells(e.process_flows(flows([dict(src="x", dst="y", t=15_000)])))
    base = {"window_start_ms": 0, "window_end_ms": 10_000}
    assert out == [
        base | dict(level="group", src="gpu", dst="gpu", category="collective", bytes_est=2_048_000,
                    packets_est=3_072, flow_records=2, samples=3),
        base | dict(level="group", src="gpu", dst="storage", category="storage", bytes_est=9_000, packets_est=6,
                    flow_records=1, samples=6),
        base | dict(level="group", src="unknown", dst="gpu", category="other", bytes_est=1_000, packets_est=10,
                    flow_records=1, samples=1),
        base | dict(level="node", src="a", dst="b", category="collective", bytes_est=2_048_000, packets_est=3_072,
                    flow_records=2, samples=3),
        base | dict(level="node", src="a", dst="s1", category="storage", bytes_est=9_000, packets_est=6,
                    flow_records=1, samples=6),
        base | dict(level="node", src="unknown", dst="b", category="other", bytes_est=1_000, packets_est=10,
                    flow_records=1, samples=1),
    ]


def test_late_record_updates_open_window_and_too_late_is_dropped():
    e = engine()
    e.process_flows(flows([dict(src="a", dst="b", t=12_000, bytes=10)]))
    e.process_flows(flows([dict(src="a", dst="b", t=9_000, bytes=5)]))  # late, window [0,10s) open
    out = cells(e.process_flows(flows([dict(src="a", dst="b", t=15_000, bytes=1)])))
    assert [(c["window_start_ms"], c["level"], c["bytes_est"]) for c in out] == [(0, "group", 5), (0, "node", 5)]
    e.process_flows(flows([dict(src="a", dst="b", t=9_999, bytes=1_000)]))  # too late
    assert e.stats["too_late_main"] == 1
    out = cells(e.flush())
    assert [(c["window_start_ms"], c["level"], c["bytes_est"]) for c in out] == [
        (10_000, "group", 11), (10_000, "node", 11)]


def test_idle_close_by_timer_emits_last_window():
    e = engine()
    e.process_flows(flows([dict(src="a", dst="b", t=1_000, bytes=7)]))
    assert e.tick(50_000) == []
    assert e.tick(79_999) == []
    out = cells(e.tick(80_000))
    assert [(c["level"], c["src"], c["dst"], c["bytes_est"]) for c in out] == [
        ("group", "gpu", "gpu", 7), ("node", "a", "b", 7)]
