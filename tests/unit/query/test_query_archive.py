"""ArchiveQuery on a generated fixture archive: known answers, time pruning, errors, rendering."""

from __future__ import annotations

import json
from collections import defaultdict

import fsspec
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

from sinks.archive.buffer import HourlyBuffer

from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from sinks.archive.layout import HOUR_MS
from query.errors import ArchiveError, DatasetMissing, EmptyRange
from query.render import render
from query.reports import ArchiveQuery
from query.timerange import parse_time
from tests.support.archive import T0, enriched

NODES = {"g1": ("gpu", "jobA"), "g2": ("gpu", "jobA"), "g3": ("gpu", "jobB"), "s1": ("storage", "")}
HOURS = [0, 1, 2, 25, 26]  # 2026-01-01 00-02, 2026-01-02 01-02


def fixture_rows():
    rows = []
    pairs = [("g1", "g2", "collective"), ("g2", "g1", "collective"), ("g1", "s1", "storage"),
             ("g3", "s1", "storage"), ("", "g3", "other")]
    for h in HOURS:
        for i, (s, d, c) in enumerate(pairs):
            b = (h + 1) * (i + 1) * 1000
            rows.append({
                "time_end_ms": T0 + h * HOUR_MS + 60_000 * i, "src_node": s, "dst_node": d, "category": c,
                "bytes_est": b,
                "packets_est": b // 1000, "src_group": NODES[s][0] if s else "unknown", "dst_group": NODES[d][0],
                "src_job": NODES[s][1] if s else "", "dst_job": NODES[d][1],
                "src_addr": f"10.0.0.{i + 1}" if s else "198.51.100.7", "dst_addr": f"10.0.1.{i + 1}"})
    return rows


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("archive"))
    rows = fixture_rows()
    w = ParquetWriter(None, root)
    for p in (0, 1):  # two Kafka partitions, one message per row
        b = HourlyBuffer("flows_enriched", p)
        for o, r in enumerate(rows[p::2]):
            b.add(table_from_columns(enriched([r]), "flow_enriched"), o)
        w.write_plan(b.flush_plan(force=True))
    cells = [{"window_start_ms": T0 + 60_000, "window_end_ms": T0 + 120_000, "level": "group", "src": "gpu",
              "dst": "storage", "category": "storage", "bytes_est": 5, "packets_est": 1, "flow_records": 1,
              "samples": 1}]
    b = HourlyBuffer("matrix_windows", 0)
    b.add(table_from_dicts(cells, "matrix_cell"), 0)
    w.write_plan(b.flush_plan(force=True))
    return root, rows


def expect(rows, frm, to, key, pred=lambda r: True):
    acc = defaultdict(int)
    for r in rows:
        if frm <= r["time_end_ms"] < to and pred(r):
            acc[key(r)] += r["bytes_est"]
    return dict(acc)


FRM, TO = T0, T0 + 3 * HOUR_MS  # day 1 only


def test_top_talkers_known_answer(archive):
    root, rows = archive
    q = ArchiveQuery(fsspec.filesystem("file"), root)
    t = q.top_talkers(FRM, TO, n=3)
    exp = expect(rows, FRM, TO, lambda r: (r["src_node"] or r["src_addr"], r["dst_node"]))
    best = sorted(exp.items(), key=lambda kv: -kv[1])[:3]
    assert [((r["src"], r["dst"]), r["bytes_est"]) for r in t.to_pylist()] == best
    # an unknown source shows as its IP
    t_all = q.top_talkers(FRM, TO, n=100)
    assert "198.51.100.7" in t_all["src"].to_pylist()


def test_matrix_segmentation_node_job(archive):
    root, rows = archive
    q = ArchiveQuery(None, root)
    m = q.matrix(FRM, TO, level="node", source="flows")
    exp = expect(rows, FRM, TO, lambda r: (r["src_node"] or "unknown", r["dst_node"] or "unknown", r["category"]))
    assert {(r["src"], r["dst"], r["category"]): r["bytes_est"] for r in m.to_pylist()} == exp
    g = q.matrix(FRM, TO, level="group", source="matrix")
    assert g.to_pylist() == [{"src": "gpu", "dst": "storage", "category": "storage", "bytes_est": 5, "packets_est": 1,
                                  "flow_records": 1}]
    g = q.matrix(FRM, TO, level="group")  # auto, whole hours: the hourly rollup
    assert q.answered_by == "traffic_1h"
    exp = expect(rows, FRM, TO, lambda r: (r["src_group"], r["dst_group"], r["category"]))
    assert {(r["src"], r["dst"], r["category"]): r["bytes_est"] for r in g.to_pylist()} == exp
    seg = q.segmentation(FRM, TO)
    exp = expect(rows, FRM, TO, lambda r: (r["src_group"], r["dst_group"], r["category"]))
    assert {(r["src_group"], r["dst_group"], r["category"]): r["bytes_est"] for r in seg.to_pylist()} == exp
    node = q.node("g1", FRM, TO)
    sent = expect(rows, FRM, TO, lambda r: r["dst_node"], lambda r: r["src_node"] == "g1")
    assert {r["peer"]: r["bytes_est"] for r in node.to_pylist() if r["direction"] == "sent"} == sent
    job = q.job("jobA", FRM, TO)
    sent = expect(rows, FRM, TO, lambda r: (r["src_node"], r["category"]), lambda r: r["src_job"] == "jobA")
    recv = expect(rows, FRM, TO, lambda r: (r["dst_node"], r["category"]), lambda r: r["dst_job"] == "jobA")
    got = {(r["node"], r["category"]): (r["sent_bytes_est"], r["recv_bytes_est"]) for r in job.to_pylist()}
    assert got == {k: (sent.get(k, 0), recv.get(k, 0)) for k in set(sent) | set(recv)}


def test_range_filters_rows_within_an_hour(archive):
    root, rows = archive
    q = ArchiveQuery(None, root)
    frm, to = T0 + 60_000, T0 + 3 * 60_000  # rows 1 and 2 of hour 0 only
    t = q.sql("SELECT count(*) AS n, sum(bytes_est) AS b FROM flows_enriched", frm, to)
    exp = [r for r in rows if frm <= r["time_end_ms"] < to]
    assert t.to_pylist() == [{"n": len(exp), "b": sum(r["bytes_est"] for r in exp)}]
    whole = q.sql("SELECT count(*) AS n FROM flows_enriched")
    assert whole["n"][0].as_py() == len(rows)
    hive = q.sql("SELECT DISTINCT dt, hour FROM flows_enriched ORDER BY ALL")
    assert hive.to_pylist()[0] == {"dt": "2026-01-01", "hour": 0}


class CountingFS(LocalFileSystem):
    cachable = False

    def __init__(self):
        super().__init__()
        self.opened, self.listed = [], []

    def _open(self, path, *a, **kw):
        self.opened.append(path)
        return super()._open(path, *a, **kw)

    def ls(self, path, *a, **kw):
        self.listed.append(path)
        return super().ls(path, *a, **kw)

    def find(self, path, *a, **kw):
        self.listed.append(path)
        return super().find(path, *a, **kw)


def test_partition_pruning_reads_only_hours_in_range(archive):
    root, rows = archive
    fs = CountingFS()
    q = ArchiveQuery(fs, root)
    frm, to = T0 + 25 * HOUR_MS, T0 + 26 * HOUR_MS  # 2026-01-02 hour 01
    t = q.top_talkers(frm, to, n=100, source="raw")
    assert sum(t["bytes_est"].to_pylist()) == sum(expect(rows, frm, to, lambda r: 1).values())
    read = set(q.files_used["flows_enriched"])  # DuckDB's Parquet reader reads exactly these
    assert read and all("/dt=2026-01-02/hour=01/" in p for p in read)
    assert not any("dt=2026-01-01" in p for p in fs.listed)  # the other day is never listed


def test_errors_are_clear(archive, tmp_path):
    root, _ = archive
    q = ArchiveQuery(None, root)
    with pytest.raises(EmptyRange, match=r"no flows_enriched data between 2027.*archive has 2026-01-01 .. 2026-01-02"):
        q.top_talkers("2027-01-01", "2027-01-02", source="raw")
    with pytest.raises(DatasetMissing, match="alerts.*present: flows_enriched, matrix_windows"):
        q.files("alerts")
    with pytest.raises(ArchiveError, match="empty time range"):
        q.segmentation(TO, FRM)
    with pytest.raises(ArchiveError, match="no archive"):
        ArchiveQuery(None, str(tmp_path / "nothing"))
    with pytest.raises(ArchiveError):
        q.sql("SELECT * FROM alerts")
    with pytest.raises(ValueError, match="level"):
        q.matrix(FRM, TO, level="switch")


def test_memory_filesystem_end_to_end():
    fs = fsspec.filesystem("memory")
    root = "memory://qtest/archive"
    rows = fixture_rows()
    b = HourlyBuffer("flows_enriched", 0)
    b.add(table_from_columns(enriched(rows), "flow_enriched"), 0)
    ParquetWriter(fs, root).write_plan(b.flush_plan(force=True))
    try:
        q = ArchiveQuery(fs, root)
        t = q.sql("SELECT sum(bytes_est) AS b FROM flows_enriched", FRM, TO)
        assert t["b"][0].as_py() == sum(expect(rows, FRM, TO, lambda r: 1).values())
        with pytest.raises(DatasetMissing):
            q.matrix(FRM, TO, source="matrix")
    finally:
        fs.rm("/qtest", recursive=True)


def test_parse_time():
    assert parse_time("2026-01-01") == T0
    assert parse_time("2026-01-01T01:00:00Z") == T0 + HOUR_MS
    assert parse_time(str(T0)) == T0
    with pytest.raises(ValueError):
        parse_time("yesterday-ish")


def test_render_formats(archive, tmp_path):
    root, _ = archive
    t = ArchiveQuery(None, root).segmentation(FRM, TO)
    txt = render(t, "table", title="segmentation")
    assert "src_group" in txt and "storage" in txt
    csv = render(t, "csv")
    assert csv.splitlines()[0] == '"src_group","dst_group","category","bytes_est","packets_est","flow_records"'
    assert json.loads(render(t, "json")) == t.to_pylist()
    out = render(t, "parquet", str(tmp_path / "seg.parquet"))
    assert pq.read_table(out).equals(t)
    with pytest.raises(ValueError):
        render(t, "xml")
    raw = ArchiveQuery(None, root).sql("SELECT src_addr FROM flows_enriched LIMIT 1")
    assert json.loads(render(raw, "json"))[0]["src_addr"].count(".") == 3


def test_reports_count_each_packet_once_and_one_exporters_view_on_request(tmp_path):
    """Two exporters saw the same g1 -> g2 traffic; the second copy is not counted (observation policy)."""
    root = str(tmp_path)
    base = {"time_end_ms": T0 + 1000, "src_node": "g1", "dst_node": "g2", "category": "collective",
            "src_group": "gpu", "dst_group": "gpu", "src_job": "jobA", "dst_job": "jobA",
            "src_addr": "10.0.0.1", "dst_addr": "10.0.0.2", "src_rack": "r1", "dst_rack": "r2"}
    rows = [{**base, "bytes_est": 5000, "packets_est": 5, "exporter_addr": "10.0.255.1", "duplicate": False},
            {**base, "bytes_est": 4900, "packets_est": 5, "exporter_addr": "10.0.255.10", "duplicate": True},
            {**base, "bytes_est": 700, "packets_est": 1, "exporter_addr": "10.0.255.1", "duplicate": False,
             "dst_node": "g3", "dst_addr": "10.0.0.3"}]
    b = HourlyBuffer("flows_enriched", 0)
    b.add(table_from_columns(enriched(rows), "flow_enriched"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))
    q = ArchiveQuery(fsspec.filesystem("file"), root)
    top = {(r["src"], r["dst"]): r["bytes_est"] for r in q.top_talkers(None, None).to_pylist()}
    assert top == {("g1", "g2"): 5000, ("g1", "g3"): 700}
    core = {(r["src"], r["dst"]): r["bytes_est"] for r in q.top_talkers(None, None, exporter="10.0.255.10").to_pylist()}
    assert core == {("g1", "g2"): 4900}
    sent = {r["peer"]: r["bytes_est"] for r in q.node("g1", None, None).to_pylist()}
    assert sent == {"g2": 5000, "g3": 700}
    m = q.matrix(None, None, source="flows").to_pylist()
    assert sum(r["bytes_est"] for r in m) == 5700
    racks = {(r["src"], r["dst"]): r["bytes_est"] for r in q.matrix(None, None, level="rack", source="flows").to_pylist()}
    assert racks == {("r1", "r2"): 5700}
    with pytest.raises(ValueError, match="one exporter's view comes from the flow records"):
        q.matrix(None, None, source="matrix", exporter="10.0.255.10")
