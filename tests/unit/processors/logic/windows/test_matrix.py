"""Traffic matrix cells: sampling-scaled sums, node and group levels, late data."""

from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.roce import ROCE_OP_COLUMNS
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows
from tests.support.matrix import matrix_cells


def engine():
    return Engine(EngineConfig(window=WindowConfig(size_ms=10_000, lateness_ms=5_000), enabled=("matrix",)))


def cells(outs):
    return matrix_cells(outs)


NO_SIGNALS = dict(syn_packets_est=0, rst_packets_est=0, ecn_ce_packets_est=0, cnp_packets_est=0,
                  **{c: 0 for c in ROCE_OP_COLUMNS})


def test_matrix_cells_scaled_by_sampling_rate():
    e = engine()
    batch = flows([
        dict(src="a", dst="b", t=1_000, bytes=1_500, packets=1, rate=1024, src_rack="r1", dst_rack="r2"),
        dict(src="a", dst="b", t=2_000, bytes=500, packets=2, rate=1024, src_rack="r1", dst_rack="r2"),
        dict(src="a", dst="s1", t=3_000, bytes=9_000, packets=6, rate=1, category="storage", dst_group="storage",
             src_rack="r1", dst_rack="r3"),
        dict(src="", dst="b", t=4_000, bytes=100, packets=1, rate=10, category="other", dst_rack="r2"),
        dict(src="a", dst="b", t=10_500, bytes=1, packets=1),  # next window
    ])
    assert e.process_flows(batch) == []
    out = cells(e.process_flows(flows([dict(src="x", dst="y", t=15_000)])))
    base = {"window_start_ms": 0, "window_end_ms": 10_000}
    ab = dict(category="collective", bytes_est=2_048_000, packets_est=3_072, flow_records=2, samples=3) | NO_SIGNALS
    a_s1 = dict(category="storage", bytes_est=9_000, packets_est=6, flow_records=1, samples=6) | NO_SIGNALS
    unk_b = dict(category="other", bytes_est=1_000, packets_est=10, flow_records=1, samples=1) | NO_SIGNALS
    assert out == [
        base | dict(level="group", src="gpu", dst="gpu") | ab,
        base | dict(level="group", src="gpu", dst="storage") | a_s1,
        base | dict(level="group", src="unknown", dst="gpu") | unk_b,
        base | dict(level="node", src="a", dst="b") | ab,
        base | dict(level="node", src="a", dst="s1") | a_s1,
        base | dict(level="node", src="unknown", dst="b") | unk_b,
        base | dict(level="rack", src="r1", dst="r2") | ab,
        base | dict(level="rack", src="r1", dst="r3") | a_s1,
        base | dict(level="rack", src="unknown", dst="r2") | unk_b,  # no rack: "unknown", like a node
    ]


def test_signal_columns_exact():
    """SYN/RST: TCP records with the flag, each counted as its sampling rate; ECN CE and CNP: packets_est."""
    e = engine()
    tcp = dict(src="a", dst="b", ip_protocol=6, dst_port=443, category="other")
    batch = flows([
        tcp | dict(t=1_000, packets=1, rate=1000, tcp_flags=0x02),  # sFlow-like SYN sample: 1000
        tcp | dict(t=1_100, packets=5, rate=10, tcp_flags=0x12, proto=3),  # NetFlow SYN|ACK over 5 packets: 10
        tcp | dict(t=1_200, packets=3, rate=1, tcp_flags=0x14),  # RST|ACK unsampled record: 1
        tcp | dict(t=1_300, packets=2, rate=100, tcp_flags=0x10),  # ACK only: nothing
        dict(src="a", dst="b", t=1_400, packets=4, rate=7, ip_protocol=17, tcp_flags=0x06),  # not TCP: no SYN/RST
        dict(src="a", dst="b", t=1_500, packets=2, rate=50, tos=0xB8 | 3),  # DSCP 46 + ECN CE: 100
        dict(src="a", dst="b", t=1_600, packets=2, rate=50, tos=0x02),  # ECT(0), not CE
        dict(src="a", dst="b", t=1_700, packets=1, rate=20, roce_opcode=0x81),  # CNP: 20
        dict(src="a", dst="b", t=1_800, packets=1, rate=20, roce_opcode=0x0A),  # RDMA WRITE only: a write
    ])
    e.process_flows(batch)
    out = [c for c in cells(e.flush()) if c["level"] == "node"]
    got = {c["category"]: {k: c[k] for k in NO_SIGNALS} for c in out}
    assert got == {
        "other": NO_SIGNALS | dict(syn_packets_est=1_010, rst_packets_est=1),
        "collective": NO_SIGNALS | dict(ecn_ce_packets_est=100, cnp_packets_est=20, roce_write_packets_est=20),
    }


def test_roce_operations_per_cell():
    """Every RoCEv2 operation class from its BTH opcode, scaled like packets; other transports' opcodes too."""
    e = engine()
    ops = {0x04: "send", 0x64: "send", 0x06: "write", 0x2A: "write", 0x0C: "read_request", 0x10: "read_response",
           0x11: "ack", 0x13: "atomic", 0xA4: "send"}  # RC, UD, RC, UC, RC x4, XRC
    batch = flows([dict(src="a", dst="b", t=1_000 + i, packets=1, rate=10, roce_opcode=opc)
                   for i, opc in enumerate([*ops, 0x15, 0x64 + 0x06])])  # reserved; UD has no WRITE: neither counts
    e.process_flows(batch)
    (cell,) = [c for c in cells(e.flush()) if c["level"] == "node"]
    want = {c: 0 for c in ROCE_OP_COLUMNS}
    for op in ops.values():
        want[f"roce_{op}_packets_est"] += 10
    assert {c: cell[c] for c in ROCE_OP_COLUMNS} == want and cell["packets_est"] == 110


def test_snapshot_without_rack_and_signal_columns_restores():
    """A window state written before the rack/signal columns loads with rack "" (unknown) and zero signals."""
    from processors.logic.windows.matrix import CellAggregator
    from processors.logic.windows.snapshots import dump_columns
    import numpy as np

    old = dump_columns({k: np.array([3], np.int32) for k in ("sn", "dn", "sg", "dg", "sj", "dj", "cat")}
                       | {v: np.array([5], np.int64) for v in ("bytes_est", "packets_est", "flow_records", "samples")})
    agg = CellAggregator()
    res = agg.result(agg.load(old), 0, 10_000)
    assert res["sr"].tolist() == [0] and res["dr"].tolist() == [0] and res["bytes_est"].tolist() == [5]
    assert res["syn_packets_est"].tolist() == [0] and res["cnp_packets_est"].tolist() == [0]


def test_late_record_updates_open_window_and_too_late_is_dropped():
    e = engine()
    e.process_flows(flows([dict(src="a", dst="b", t=12_000, bytes=10)]))
    e.process_flows(flows([dict(src="a", dst="b", t=9_000, bytes=5)]))  # late, window [0,10s) open
    out = cells(e.process_flows(flows([dict(src="a", dst="b", t=15_000, bytes=1)])))
    assert [(c["window_start_ms"], c["level"], c["bytes_est"]) for c in out] == [
        (0, "group", 5), (0, "node", 5), (0, "rack", 5)]
    e.process_flows(flows([dict(src="a", dst="b", t=9_999, bytes=1_000)]))  # too late
    assert e.stats["too_late_main"] == 1
    out = cells(e.flush())
    assert [(c["window_start_ms"], c["level"], c["bytes_est"]) for c in out] == [
        (10_000, "group", 11), (10_000, "node", 11), (10_000, "rack", 11)]


def test_idle_close_by_timer_emits_last_window():
    e = engine()
    e.process_flows(flows([dict(src="a", dst="b", t=1_000, bytes=7)]))
    assert e.tick(50_000) == []
    assert e.tick(79_999) == []
    out = cells(e.tick(80_000))
    assert [(c["level"], c["src"], c["dst"], c["bytes_est"]) for c in out] == [
        ("group", "gpu", "gpu", 7), ("node", "a", "b", 7), ("rack", "unknown", "unknown", 7)]
