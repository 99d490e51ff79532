"""Rollups: answers from traffic_1m/traffic_1h equal the raw flows' answers exactly; written exactly once
(retry, replay, a crash between a file and its rollups); the query's choice of dataset."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fabricflow import streams
from schemas.columns import addr16, dtype_for
from sinks.archive import layout, rollups
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.index import FsWrittenIndex
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from sinks.archive.layout import HOUR_MS
from query.errors import ArchiveError
from query.plan import plan_sources
from query.reports import ArchiveQuery
from sinks.archive.retention import DEFAULT_POLICY
from tests.support.archive import T0
from tests.support.rollups import Crash, MIN, REPORTS, random_flows, rollup_names, write_archive, write_through


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("rollups"))
    write_archive(root, np.random.default_rng(7))
    return root


RANGES = {
    "three hours": (T0, T0 + 3 * HOUR_MS),
    "one hour": (T0 + HOUR_MS, T0 + 2 * HOUR_MS),
    "minutes": (T0 + 7 * MIN, T0 + 2 * HOUR_MS + 13 * MIN),
    "unaligned": (T0 + 7 * MIN + 1234, T0 + 2 * HOUR_MS + 13 * MIN + 56_789),
    "open": (None, None),
    "open end": (T0 + 30 * MIN + 5, None),
}


@pytest.mark.parametrize("rng_name", list(RANGES))
@pytest.mark.parametrize("report", list(REPORTS))
def test_rollup_answers_equal_raw_answers(archive, report, rng_name):
    frm, to = RANGES[rng_name]
    fn = REPORTS[report]
    q = ArchiveQuery(None, archive)
    raw = fn(q, frm, to, "raw")
    assert q.answered_by == "flows_enriched" and raw.num_rows > 0
    auto = fn(ArchiveQuery(None, archive), frm, to, "auto")
    assert auto.equals(raw), (report, rng_name)
    for src, bucket in (("1m", MIN), ("1h", HOUR_MS)):
        if all(x is None or x % bucket == 0 for x in (frm, to)):
            q = ArchiveQuery(None, archive)
            assert fn(q, frm, to, src).equals(raw), (report, rng_name, src)
            assert q.answered_by == f"traffic_{src}"


def test_auto_reads_the_coarsest_dataset_per_piece(archive):
    q = ArchiveQuery(None, archive)
    q.top_talkers(*RANGES["three hours"])
    assert q.answered_by == "traffic_1h"
    q.top_talkers(*RANGES["unaligned"])
    assert [d for d, *_ in q.answered] == ["flows_enriched", "traffic_1m", "traffic_1h", "traffic_1m",
                                           "flows_enriched"]
    q.top_talkers(*RANGES["three hours"], exporter="192.0.2.1")  # one exporter's view: raw only
    assert q.answered_by == "flows_enriched"
    q.node("10.0.0.1", *RANGES["three hours"])  # a node by address: raw only
    assert q.answered_by == "flows_enriched"
    with pytest.raises(ArchiveError, match="needs the raw flows"):
        q.node("10.0.0.1", *RANGES["three hours"], source="1h")
    with pytest.raises(ArchiveError, match="whole hours"):
        q.top_talkers(*RANGES["minutes"], source="1h")
    # SQL sees the rollups as views too
    n = q.sql("SELECT sum(flow_records) AS n FROM traffic_1h").column("n")[0].as_py()
    assert n == q.sql("SELECT count(*) AS n FROM flows_enriched").column("n")[0].as_py() == 3 * 600


@pytest.mark.parametrize("rng_name", ["three hours", "one hour", "minutes", "unaligned"])
@pytest.mark.parametrize("level", ["node", "group"])
def test_console_matrix_cells_read_the_smallest_datasets_and_equal_the_raw_matrix(archive, level, rng_name):
    """The console's matrix (ArchiveQuery.matrix_cells) tiles a range like the flow reports: a week or whole hours
    from traffic_1h, whole minutes from traffic_1m, the seconds at the edges from the finest dataset; the cells
    equal the matrix of the raw flows, each packet once."""
    frm, to = RANGES[rng_name]
    raw = ArchiveQuery(None, archive).matrix(frm, to, level=level, source="raw")
    q = ArchiveQuery(None, archive)
    got = q.matrix_cells(frm, to, level)
    assert set(got.column("level").to_pylist()) == {level}
    want = {(r["src"], r["dst"], r["category"]): (r["bytes_est"], r["packets_est"], r["flow_records"])
            for r in raw.to_pylist()}
    have = {(r["src"], r["dst"], r["category"]): (r["bytes_est"], r["packets_est"], r["flow_records"])
            for r in got.to_pylist()}
    assert have == want and want
    expect = {"three hours": ["traffic_1h"], "one hour": ["traffic_1h"],
              "minutes": ["traffic_1m", "traffic_1h", "traffic_1m"],
              "unaligned": ["flows_enriched", "traffic_1m", "traffic_1h", "traffic_1m", "flows_enriched"]}[rng_name]
    assert [d for d, *_ in q.answered] == expect  # no matrix_windows in this archive: the raw flows at the edges
    # samples: the sampled packets (what a matrix cell's samples are)
    assert sum(got.column("samples").to_pylist()) == ArchiveQuery(None, archive).sql(
        "SELECT sum(packets) FROM flows_enriched WHERE NOT duplicate AND time_end_ms >= $a AND time_end_ms < $b",
        frm, to, params={"a": frm, "b": to}).column(0)[0].as_py()


def test_console_matrix_cells_count_only_the_detector_protocols(archive):
    frm, to = RANGES["minutes"]
    q = ArchiveQuery(None, archive)
    all_ = sum(q.matrix_cells(frm, to, "group").column("bytes_est").to_pylist())
    only = sum(q.matrix_cells(frm, to, "group", protocols=[1]).column("bytes_est").to_pylist())
    want = q.sql("SELECT sum(bytes_est) FROM flows_enriched WHERE NOT duplicate AND export_protocol = 1", frm, to
                 ).column(0)[0].as_py()
    assert 0 < only == want < all_


def test_series_source_picks_the_coarsest_rollup_with_enough_bins(archive, tmp_path):
    q = ArchiveQuery(None, archive)  # rollups for three hours from T0
    assert q.series_source(T0 - 3 * 86_400_000, T0 + 4 * 86_400_000) == ("traffic_1h", HOUR_MS)  # a week
    assert q.series_source(T0, T0 + 86_400_000) == ("traffic_1m", 2 * MIN)  # a day
    assert q.series_source(T0, T0 + 6 * HOUR_MS) == ("traffic_1m", MIN)
    assert q.series_source(T0, T0 + HOUR_MS) == ("flows_enriched", 6_000)  # too few minutes: raw
    assert q.series_source(T0 + 30 * 86_400_000, T0 + 37 * 86_400_000) == ("flows_enriched", 1_008_000)  # no files
    with pytest.raises(ArchiveError, match="empty time range"):
        q.series_source(T0, T0)


def test_plan_sources():
    present = {"flows_enriched", "traffic_1m", "traffic_1h"}
    h = HOUR_MS
    assert plan_sources(0, 24 * h, present) == [("traffic_1h", 0, 24 * h)]
    assert plan_sources(5 * MIN, 24 * h, present) == [("traffic_1m", 5 * MIN, h), ("traffic_1h", h, 24 * h)]
    assert plan_sources(5, 3 * MIN, present) == [("flows_enriched", 5, MIN), ("traffic_1m", MIN, 3 * MIN)]
    assert plan_sources(5, 50, present) == [("flows_enriched", 5, 50)]
    assert plan_sources(None, 2 * h + 7, present) == [("traffic_1h", None, 2 * h), ("flows_enriched", 2 * h, 2 * h + 7)]
    assert plan_sources(None, None, present) == [("traffic_1h", None, None)]
    assert plan_sources(0, 24 * h, {"flows_enriched"}) == [("flows_enriched", 0, 24 * h)]  # no rollups yet
    assert plan_sources(0, 24 * h, {"flows_enriched", "traffic_1m"}) == [("traffic_1m", 0, 24 * h)]
    assert plan_sources(0, 24 * h, present, "raw") == [("flows_enriched", 0, 24 * h)]
    assert plan_sources(0, 24 * h, present, "1m") == [("traffic_1m", 0, 24 * h)]
    assert plan_sources(0, h, present, needs_raw="x") == [("flows_enriched", 0, h)]
    with pytest.raises(ArchiveError, match="whole minutes"):
        plan_sources(0, MIN + 1, present, "1m")
    with pytest.raises(ValueError, match="source"):
        plan_sources(0, h, present, "5m")


def test_matrix_auto_without_rollups_keeps_reading_matrix_windows(tmp_path):
    root = str(tmp_path)
    write_archive(root, np.random.default_rng(3), hours=(0,), per_hour=50)
    cells = [{"window_start_ms": T0 + MIN, "window_end_ms": T0 + 2 * MIN, "level": "group", "src": "gpu",
              "dst": "storage", "category": "storage", "bytes_est": 5, "packets_est": 1, "flow_records": 1,
              "samples": 1}]
    b = HourlyBuffer("matrix_windows", 0)
    b.add(table_from_dicts(cells, "matrix_cell"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))
    q = ArchiveQuery(None, root)
    q.matrix(T0, T0 + HOUR_MS, level="group")
    assert q.answered_by == "traffic_1h"
    for d in ("traffic_1m", "traffic_1h"):
        os.system(f"rm -r {root}/{d}")
    q = ArchiveQuery(None, root)
    assert q.matrix(T0, T0 + HOUR_MS, level="group").num_rows == 1 and q.answered_by == "matrix_windows"


# --------------------------------------------------------------------------- the rollup files


def test_every_file_has_its_rollups_under_the_same_name(archive):
    raw = rollup_names(archive, "flows_enriched")
    assert len(raw) > 10
    for d in ("traffic_1m", "traffic_1h"):
        assert rollup_names(archive, d) == raw
    for name in raw:
        t1h = pq.read_table(f"{archive}/traffic_1h/{name}")
        t1m = pq.read_table(f"{archive}/traffic_1m/{name}")
        r = pq.read_table(f"{archive}/flows_enriched/{name}")
        assert t1h.schema.equals(rollups.TRAFFIC_SCHEMA, check_metadata=False)
        for c in ("bytes_est", "packets_est", "bytes", "packets"):
            assert pa.compute.sum(t1h[c]).as_py() == pa.compute.sum(t1m[c]).as_py() == pa.compute.sum(r[c]).as_py()
        assert pa.compute.sum(t1h["flow_records"]).as_py() == r.num_rows
        assert set(t1h["bucket_ms"].to_pylist()) == {layout.parse_key(f"{archive}/flows_enriched/{name}").hour * HOUR_MS}
        assert t1h.num_rows <= t1m.num_rows <= r.num_rows


def test_src_ip_only_for_a_side_without_node():
    f = random_flows(np.random.default_rng(1), T0 + np.arange(300) * 1000)
    t = rollups.derive("flows_enriched", table_from_columns(f, "flow_enriched"))["traffic_1m"].to_pylist()
    assert all((r["src_ip"] == "") == (r["src_node"] != "") for r in t)
    assert {r["src_ip"] for r in t} == {"", "198.51.100.7", "198.51.100.8", "2001:db8::9"}


def test_ports_rollup_first_last_and_extremes():
    """Per (bucket, exporter, ifIndex): samples, first/last time and counters at them, speed extremes, down samples."""
    n = 6
    c = np.zeros(n, dtype=dtype_for("counter_sample"))
    c["exporter_addr"] = np.frombuffer(addr16("192.0.2.9"), dtype=np.uint8)
    c["if_index"] = [1, 1, 1, 2, 1, 1]
    c["time_received_ms"] = T0 + np.array([30_000, 10_000, 50_000, 20_000, 70_000, 65_000])  # out of order
    c["in_octets"] = [300, 100, 500, 7, 900, 800]
    c["in_errors"] = [1, 0, 4, 0, 9, 5]
    c["if_speed"] = [25_000_000_000, 25_000_000_000, 1_000_000_000, 10, 25_000_000_000, 25_000_000_000]
    c["if_oper_up"] = [True, True, False, True, True, True]
    out = rollups.derive("counters_raw", table_from_columns(c, "counter_sample"))
    m = {(r["bucket_ms"] - T0, r["if_index"]): r for r in out["ports_1m"].to_pylist()}
    assert set(m) == {(0, 1), (0, 2), (MIN, 1)}
    r = m[(0, 1)]
    assert r["exporter"] == "192.0.2.9" and r["samples"] == 3
    assert (r["first_time_ms"] - T0, r["last_time_ms"] - T0) == (10_000, 50_000)
    assert (r["first_in_octets"], r["last_in_octets"], r["first_in_errors"], r["last_in_errors"]) == (100, 500, 0, 4)
    assert (r["min_if_speed"], r["max_if_speed"], r["oper_down_samples"]) == (1_000_000_000, 25_000_000_000, 1)
    assert (m[(MIN, 1)]["first_in_octets"], m[(MIN, 1)]["last_in_octets"]) == (800, 900)
    h = {r["if_index"]: r for r in out["ports_1h"].to_pylist()}
    assert (h[1]["samples"], h[1]["first_in_octets"], h[1]["last_in_octets"]) == (5, 100, 900)
    assert out["ports_1h"].schema.equals(rollups.PORTS_SCHEMA, check_metadata=False)


def test_rewriting_a_file_gives_identical_rollups(tmp_path):
    rng = np.random.default_rng(5)
    t = table_from_columns(random_flows(rng, T0 + rng.integers(0, HOUR_MS, 500)), "flow_enriched")
    b = HourlyBuffer("flows_enriched", 3)
    b.add(t, 10)
    plan = b.flush_plan(force=True)
    w = ParquetWriter(None, str(tmp_path))
    w.write_plan(plan)
    first = {d: {n: open(f"{tmp_path}/{d}/{n}", "rb").read() for n in rollup_names(tmp_path, d)}
             for d in ("traffic_1m", "traffic_1h")}
    w.write_plan(plan)  # a retry: same keys, same bytes
    again = {d: {n: open(f"{tmp_path}/{d}/{n}", "rb").read() for n in rollup_names(tmp_path, d)}
             for d in ("traffic_1m", "traffic_1h")}
    assert first == again and all(len(v) == 1 for v in first.values())


def run(root, messages, *, crash_at: int | None, max_rows: int, counter: list):
    """A sink process: read from offset 0 (nothing was committed: the worst case), write every planned file
    and its rollups; step numbers count raw writes and rollup writes, ``crash_at`` raises before that step."""
    buf = HourlyBuffer("flows_enriched", 0, index=FsWrittenIndex(None, root, "flows_enriched", 0),
                       max_rows=max_rows)
    w = ParquetWriter(None, root)
    inner_write_table, inner_rollups = w.write_table, w.write_rollups

    def step():
        counter[0] += 1
        if counter[0] == crash_at:
            raise Crash()

    def write_table(key, table):
        if "/flows_enriched/" in key:
            step()
        inner_write_table(key, table)

    def write_rollups(*a, **kw):
        step()
        return inner_rollups(*a, **kw)

    w.write_table, w.write_rollups = write_table, write_rollups
    write_through(w, buf, messages)
    return buf


def totals(root, dataset) -> dict:
    q = ArchiveQuery(None, root)
    if dataset == "flows_enriched":
        t = q.sql("SELECT sum(bytes_est) AS b, count(*) AS n FROM flows_enriched")
    else:
        t = q.sql(f"SELECT sum(bytes_est) AS b, sum(flow_records) AS n FROM {dataset}")
    return t.to_pylist()[0]


@pytest.mark.parametrize("crash_at", range(1, 13))
def test_exactly_once_with_a_crash_between_a_file_and_its_rollups(tmp_path, crash_at):
    """Crash before any raw write or rollup write; the restart (from offset 0, chunked differently) leaves
    every raw row once and rollups whose sums equal the raw ones, whatever was on disk."""
    rng = np.random.default_rng(crash_at)
    times = T0 + np.sort(rng.integers(0, 2 * HOUR_MS, 400))
    messages = [table_from_columns(random_flows(rng, times[i:i + 10]), "flow_enriched") for i in range(0, 400, 10)]
    root = str(tmp_path)
    counter = [0]
    with pytest.raises(Crash):
        run(root, messages, crash_at=crash_at, max_rows=60, counter=counter)
    buf = run(root, messages, crash_at=None, max_rows=90, counter=[0])
    raw = totals(root, "flows_enriched")
    assert raw["n"] == 400
    assert totals(root, "traffic_1m") == totals(root, "traffic_1h") == raw
    names = rollup_names(root, "flows_enriched")
    assert rollup_names(root, "traffic_1m") == rollup_names(root, "traffic_1h") == names
    if crash_at % 2 == 0:  # the crash came after a file, before its rollups: the restart rebuilt them
        assert len(buf.index.repaired) == 1


def test_rollup_datasets_are_derived_with_their_own_retention():
    assert {d.name: d.derived_from for d in layout.DATASETS.values() if d.derived_from} == {
        "traffic_1m": "flows_enriched", "traffic_1h": "flows_enriched",
        "ports_1m": "counters_raw", "ports_1h": "counters_raw"}
    assert DEFAULT_POLICY["traffic_1m"] == 30 and DEFAULT_POLICY["traffic_1h"] == 365
    assert DEFAULT_POLICY["flows_enriched"] == streams.BY_NAME["flows_enriched"].archive_days
    assert layout.spec("traffic_1h").bucket_ms == HOUR_MS


def test_archive_older_than_its_rollups_is_answered_from_raw(tmp_path):
    """Hours written before rollups existed (no rollup file in range) are read from the raw flows."""
    root = str(tmp_path)
    write_archive(root, np.random.default_rng(4), hours=(0, 5), per_hour=40)
    for d in ("traffic_1m", "traffic_1h"):
        for sub in os.listdir(f"{root}/{d}/dt=2026-01-01"):
            if sub == "hour=00":
                os.system(f"rm -r {root}/{d}/dt=2026-01-01/{sub}")
    q = ArchiveQuery(None, root)
    t = q.top_talkers(T0, T0 + HOUR_MS)
    assert q.answered_by == "flows_enriched" and t.equals(q.top_talkers(T0, T0 + HOUR_MS, source="raw"))
    q.top_talkers(T0 + 5 * HOUR_MS, T0 + 6 * HOUR_MS)
    assert q.answered_by == "traffic_1h"


def test_counter_files_get_port_rollups_through_the_writer(tmp_path):
    n = 120
    c = np.zeros(n, dtype=dtype_for("counter_sample"))
    c["exporter_addr"] = np.frombuffer(addr16("192.0.2.9"), dtype=np.uint8)
    c["if_index"] = np.arange(n) % 4
    c["time_received_ms"] = T0 + np.arange(n) * 1000  # two minutes
    c["in_octets"] = np.arange(n) * 100
    c["if_oper_up"] = True
    b = HourlyBuffer("counters_raw", 0)
    b.add(table_from_columns(c, "counter_sample"), 3)
    ParquetWriter(None, str(tmp_path)).write_plan(b.flush_plan(force=True))
    assert rollup_names(tmp_path, "ports_1m") == rollup_names(tmp_path, "ports_1h") == rollup_names(tmp_path, "counters_raw")
    q = ArchiveQuery(None, str(tmp_path))
    t = q.sql("SELECT if_index, sum(samples) AS s, min(first_in_octets) AS a, max(last_in_octets) AS z "
              "FROM ports_1m GROUP BY 1 ORDER BY 1").to_pylist()
    assert [(r["s"], r["a"], r["z"]) for r in t] == [(30, i * 100, (116 + i) * 100) for i in range(4)]
    h = q.sql("SELECT count(*) AS n, sum(samples) AS s FROM ports_1h").to_pylist()[0]
    assert h == {"n": 4, "s": 120}
