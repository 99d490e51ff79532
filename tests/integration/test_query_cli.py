"""`fabricflow query ...` and `fabricflow sink retention` on a local fixture archive with known answers."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cli.main import app
from cli.pipeline import register
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns
from cli.options import parse_duration_ms
from sinks.archive.retention import retention_policy
from sinks.archive.layout import HOUR_MS
from tests.support.archive import T0, enriched
from tests.support.query_cli import HOURS, IP, PAIRS, ff, fixture_rows

register(app)


def build_archive(root: Path, rows) -> None:
    w = ParquetWriter(None, str(root))
    for p in (0, 1):
        b = HourlyBuffer("flows_enriched", p)
        for o, r in enumerate(rows[p::2]):
            b.add(table_from_columns(enriched([r]), "flow_enriched"), o)
        w.write_plan(b.flush_plan(force=True))


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("qarchive") / "archive"
    rows = fixture_rows()
    build_archive(root, rows)
    return root, rows


def in_range(rows, frm=None, to=None):
    return [r for r in rows if (frm is None or r["time_end_ms"] >= frm) and (to is None or r["time_end_ms"] < to)]


def test_top_talkers_whole_archive_by_default(archive):
    root, rows = archive
    r = ff(root, "query", "top-talkers", "--format", "json", "-n", "3")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    acc = defaultdict(int)
    for x in rows:
        acc[(x["src_node"] or IP[""], x["dst_node"])] += x["bytes_est"]
    want = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert [(g["src"], g["dst"], g["bytes_est"]) for g in got] == [(s, d, b) for (s, d), b in want]


def test_time_range_iso_and_unix_ms_agree(archive):
    root, rows = archive
    frm, to = T0 + HOUR_MS, T0 + 2 * HOUR_MS
    a = ff(root, "query", "sql", "SELECT sum(bytes_est)::BIGINT AS b, count(*) AS n FROM flows_enriched",
           "--from", "2026-01-01T01:00:00", "--to", "2026-01-01T02:00:00Z", "--format", "json")
    b = ff(root, "query", "sql", "SELECT sum(bytes_est)::BIGINT AS b, count(*) AS n FROM flows_enriched",
           "--from", str(frm), "--to", str(to), "--format", "json")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    sel = in_range(rows, frm, to)
    assert json.loads(a.stdout) == json.loads(b.stdout) == [{"b": sum(x["bytes_est"] for x in sel), "n": len(sel)}]


def test_matrix_by_group_csv(archive):
    root, rows = archive
    r = ff(root, "query", "matrix", "--level", "group", "--format", "csv", "--from", str(T0), "--to", str(T0 + 86_400_000))
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0] == '"src","dst","category","bytes_est","packets_est","flow_records"'
    acc = defaultdict(int)
    for x in in_range(rows, T0, T0 + 86_400_000):
        acc[(x["src_group"], x["dst_group"], x["category"])] += x["bytes_est"]
    got = {}
    for line in lines[1:]:
        s, d, c, b, _p, _n = [v.strip('"') for v in line.split(",")]
        got[(s, d, c)] = int(b)
    assert got == dict(acc)


def test_node_and_job_reports(archive):
    root, rows = archive
    r = ff(root, "query", "node", "s1", "--format", "json")
    assert r.exit_code == 0, r.output
    got = {(g["direction"], g["peer"], g["category"]): g["bytes_est"] for g in json.loads(r.stdout)}
    want = defaultdict(int)
    for x in rows:
        if x["src_node"] == "s1":
            want[("sent", x["dst_node"], x["category"])] += x["bytes_est"]
        if x["dst_node"] == "s1":
            want[("recv", x["src_node"], x["category"])] += x["bytes_est"]
    assert got == dict(want)
    r = ff(root, "query", "job", "jobA", "--format", "json")
    assert r.exit_code == 0, r.output
    got = {(g["node"], g["category"]): (g["sent_bytes_est"], g["recv_bytes_est"]) for g in json.loads(r.stdout)}
    want = defaultdict(lambda: [0, 0])
    for x in rows:
        if x["src_job"] == "jobA":
            want[(x["src_node"], x["category"])][0] += x["bytes_est"]
        if x["dst_job"] == "jobA":
            want[(x["dst_node"], x["category"])][1] += x["bytes_est"]
    assert got == {k: tuple(v) for k, v in want.items()}
    r = ff(root, "query", "node", "g1")  # rich table
    assert r.exit_code == 0 and "recv" in r.stdout and "sent" in r.stdout


POLICY = """
segmentation:
  enabled: true
  groups: [gpu, storage, mgmt]
  allow:
    - {name: gpu-mesh, src: gpu, dst: gpu, categories: [collective]}
    - {name: nfs, src: gpu, dst: storage, categories: [storage], ports: [2049]}
"""


def test_segmentation_with_policy_marks_violations(archive, tmp_path):
    root, rows = archive
    pol = tmp_path / "policy.yaml"
    pol.write_text(POLICY)
    r = ff(root, "query", "segmentation", "--policy", str(pol), "--format", "json")
    assert r.exit_code == 0, r.output
    got = {(g["src_group"], g["dst_group"], g["category"], g["status"], g["rule"]): g["bytes_est"]
           for g in json.loads(r.stdout)}

    def total(pred):
        return sum((h + 1) * (i + 1) * 1000 for h in HOURS for i, p in enumerate(PAIRS) if pred(i, p))

    assert got == {
        ("gpu", "gpu", "collective", "allowed", "gpu-mesh"): total(lambda i, p: p[2] == "collective"),
        ("gpu", "storage", "storage", "allowed", "nfs"): total(lambda i, p: p[2] == "storage" and p[4] == 2049),
        ("storage", "gpu", "storage", "allowed", "nfs (reply)"): total(lambda i, p: p[0] == "s1"),
        ("gpu", "storage", "storage", "violation", ""): total(lambda i, p: p[4] == 8080),
        ("gpu", "mgmt", "mgmt", "violation", ""): total(lambda i, p: p[2] == "mgmt"),
        ("unknown", "gpu", "other", "violation", ""): total(lambda i, p: p[0] == ""),
    }
    first = json.loads(r.stdout)[0]
    assert first["status"] == "violation"  # violations first
    # Without a policy: plain group x group totals.
    r = ff(root, "query", "segmentation", "--format", "json")
    assert r.exit_code == 0, r.output
    plain = {(g["src_group"], g["dst_group"], g["category"]): g["bytes_est"] for g in json.loads(r.stdout)}
    assert plain[("gpu", "storage", "storage")] == total(lambda i, p: p[0] in ("g1", "g3") and p[2] == "storage")


def test_parquet_output(archive, tmp_path):
    root, rows = archive
    out = tmp_path / "tt.parquet"
    r = ff(root, "query", "top-talkers", "--format", "parquet", "--output", str(out))
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.column_names == ["src", "dst", "bytes_est", "packets_est", "flow_records"] and t.num_rows == 7  # distinct pairs
    r = ff(root, "query", "top-talkers", "--format", "parquet")
    assert r.exit_code == 2 and "needs --output" in r.output


@pytest.mark.parametrize("args, message", [
    (["query", "top-talkers", "--from", "2030-01-01", "--to", "2030-01-02"], "no flows_enriched data between"),
    (["query", "top-talkers", "--from", "2026-01-02", "--to", "2026-01-01"], "empty time range"),
    (["query", "top-talkers", "--from", "yesterday"], "cannot read 'yesterday' as a time"),
    (["query", "top-talkers", "--last", "2h"], "no flows_enriched data between"),
    (["query", "top-talkers", "--last", "2 fortnights"], "cannot read '2 fortnights' as a duration"),
    (["query", "sql", "SELECT * FROM alerts"], "datasets present: flows_enriched"),
    (["query", "sql", "SELEKT 1"], "query failed"),
    (["query", "matrix", "--source", "matrix"], "dataset 'matrix_windows' is not in the archive"),
    (["query", "matrix", "--level", "pod"], "--level must be node, rack or group"),
    (["query", "segmentation", "--policy", "/nonexistent/policy.yaml"], "policy file not found"),
])
def test_errors_are_one_line_exit_2(archive, args, message):
    root, _ = archive
    r = ff(root, *args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_missing_archive_is_an_error(tmp_path):
    r = ff(tmp_path / "nothing-here", "query", "top-talkers")
    assert r.exit_code == 2 and "no archive at" in r.stderr


def test_retention_dry_run_then_delete(archive, tmp_path):
    root, _ = archive
    copy = tmp_path / "a"
    shutil.copytree(root, copy)
    env = {"FABRICFLOW_ARCHIVE__RETENTION_DAYS": json.dumps({"flows_enriched": 1, "default": 100000})}
    r = ff(copy, "sink", "retention", "--dry-run", **env)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["would delete flows_enriched dt=2026-01-01", "would delete flows_enriched dt=2026-01-02"]
    assert (copy / "flows_enriched" / "dt=2026-01-01").is_dir()
    r = ff(copy, "sink", "retention", **env)
    assert r.exit_code == 0 and not (copy / "flows_enriched" / "dt=2026-01-01").exists()
    r = ff(copy, "sink", "retention", **{"FABRICFLOW_ARCHIVE__RETENTION_DAYS": '{"flowz": 3}'})
    assert r.exit_code == 2 and "unknown dataset(s) flowz" in r.stderr


def test_policy_and_duration_helpers():
    assert parse_duration_ms("90m") == 5_400_000 and parse_duration_ms("2d") == 172_800_000
    pol = retention_policy({"flows_raw": 7, "alerts": -1, "default": 30})
    assert pol["flows_raw"] == 7 and pol["alerts"] is None and pol["summaries_hourly"] == 30


def test_query_names_the_dataset_that_answered_and_source_forces_one(archive):
    root, _ = archive
    r = ff(root, "query", "top-talkers", "--from", "2026-01-01T00:00", "--to", "2026-01-01T02:00", "--format", "json")
    assert r.exit_code == 0, r.output
    assert "answered from traffic_1h (" in r.stderr
    raw = ff(root, "query", "top-talkers", "--from", "2026-01-01T00:00", "--to", "2026-01-01T02:00", "--format", "json",
             "--source", "raw")
    assert "answered from flows_enriched (" in raw.stderr and json.loads(raw.stdout) == json.loads(r.stdout)
    r = ff(root, "query", "matrix", "--from", "2026-01-01T00:00:30", "--to", "2026-01-01T02:00", "--source", "1h")
    assert r.exit_code == 2 and "whole hours" in r.stderr
    r = ff(root, "query", "job", "jobA", "--source", "5m")
    assert r.exit_code == 2 and "--source must be one of auto, raw, 1m, 1h" in r.stderr


def test_sink_compact_merges_below_the_committed_offsets(tmp_path, monkeypatch):
    """`fabricflow sink compact` reads the archive group's committed offsets and merges what is below them."""
    import confluent_kafka

    root = tmp_path / "a"
    w = ParquetWriter(None, str(root))
    for first in (0, 10, 20):  # three files of hour 0, partition 0
        b = HourlyBuffer("flows_enriched", 0, start_offset=first)
        b.add(table_from_columns(enriched([{**fixture_rows()[0], "time_end_ms": T0 + first}]), "flow_enriched"), first)
        w.write_plan(b.flush_plan(force=True))

    class FakeConsumer:
        def __init__(self, conf):
            assert conf["group.id"] == "fabricflow-archive"

        def list_topics(self, topic, timeout=None):
            parts = {0: None} if "enriched" in topic else {}
            md = type("T", (), {"partitions": parts, "error": None})()
            return type("M", (), {"topics": {topic: md}})()

        def committed(self, tps, timeout=None):
            for tp in tps:
                tp.offset = 15  # the files at offsets 0 and 10 are below it, the one at 20 is not
            return tps

        def close(self):
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    r = ff(root, "sink", "compact")
    assert r.exit_code == 0, r.output
    assert "2 merged file(s) written" in r.stderr  # traffic_1m and traffic_1h
    names = sorted(p.name for p in (root / "traffic_1h").rglob("*.parquet"))
    assert len(names) == 2 and names[0].startswith("merged-p000-o00000000000000000000-00000000000000000010")
    top = json.loads(ff(root, "query", "top-talkers", "--format", "json").stdout)
    raw = json.loads(ff(root, "query", "top-talkers", "--format", "json", "--source", "raw").stdout)
    assert top == raw and sum(t["flow_records"] for t in top) == 3
