"""`query sql` names that cannot be misread: ``flows`` / ``flows_1m`` / ``flows_1h`` count each packet once,
``flow_observations`` (and the datasets as stored) every exporter's record; and every SQL example we print or
document counts each packet once (it gives the same answer on an archive without the duplicate records)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from devtools.demo import closing_lines
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from sinks.archive.layout import HOUR_MS
from query.errors import ArchiveError
from query.render import render
from query.reports import ArchiveQuery
from query.views import EXAMPLE_SQL, VIEWS, observation_note
from tests.support.archive import T0
from tests.support.rollups import random_flows

ROOT = Path(__file__).resolve().parents[3]
HOURS = (0, 1, 10, 11)  # 2026-01-01; the plain DuckDB example in docs/archive.md reads hours 10-11
CATS = np.array(["collective", "rocev2", "storage", "external", "other"], dtype=object)


def _flows(rng, hours=HOURS, per_hour=400):
    times = np.concatenate([T0 + h * HOUR_MS + rng.integers(0, HOUR_MS, per_hour) for h in hours])
    f = random_flows(rng, times)
    f["category"] = CATS[rng.integers(0, len(CATS), len(f))]
    return f


def _write(root: str, f: np.ndarray) -> None:
    """Through the sink's buffer and writer (rollups written with each file), two partitions."""
    w = ParquetWriter(None, root)
    for p in (0, 1):
        b = HourlyBuffer("flows_enriched", p, max_rows=300)
        mine = f[p::2]
        for o, i in enumerate(range(0, len(mine), 50)):
            b.add(table_from_columns(mine[i:i + 50], "flow_enriched"), o)
        plan = b.flush_plan(force=True)
        w.write_plan(plan)
        b.confirm(plan)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """The same traffic twice: with the duplicate observations (25 % of records) and without them."""
    f = _flows(np.random.default_rng(11))
    assert f["duplicate"].any() and not f["duplicate"].all()
    both = str(tmp_path_factory.mktemp("with_duplicates"))
    once = str(tmp_path_factory.mktemp("counted_once"))
    _write(both, f)
    _write(once, f[~f["duplicate"].astype(bool)])
    return both, once, f


def _by_category(q: ArchiveQuery, name: str, frm=None, to=None) -> dict:
    t = q.sql(f"SELECT category, sum(bytes_est)::BIGINT AS b, sum(packets_est)::BIGINT AS p FROM {name} GROUP BY 1",
              frm, to)
    return {r["category"]: (r["b"], r["p"]) for r in t.to_pylist()}


def _expect(f, frm=None, to=None, counted_only=True) -> dict:
    keep = np.ones(len(f), bool)
    if counted_only:
        keep &= ~f["duplicate"].astype(bool)
    if frm is not None:
        keep &= (f["time_end_ms"] >= frm) & (f["time_end_ms"] < to)
    out = {}
    for c in set(f["category"][keep]):
        m = keep & (f["category"] == c)
        out[c] = (int(f["bytes_est"][m].sum()), int(f["packets_est"][m].sum()))
    return out


@pytest.mark.parametrize("rng", [(None, None), (T0 + 600_000, T0 + HOUR_MS + 1_234_567)])
def test_flows_counts_each_packet_once_and_flow_observations_every_record(archives, rng):
    both, _, f = archives
    q = ArchiveQuery(None, both)
    once, every = _expect(f, *rng), _expect(f, *rng, counted_only=False)
    assert _by_category(q, "flows", *rng) == once
    assert _by_category(q, "flow_observations", *rng) == every
    assert _by_category(q, "flows_enriched", *rng) == every  # the dataset as stored: unchanged meaning
    for c in once:
        assert every[c][0] > once[c][0]
    # the named reports count as flows does
    assert sum(r["bytes_est"] for r in q.top_talkers(*rng, n=10**6).to_pylist()) == sum(b for b, _ in once.values())


def test_hourly_and_minute_views_count_each_packet_once(archives):
    both, _, f = archives
    q = ArchiveQuery(None, both)
    once, every = _expect(f), _expect(f, counted_only=False)
    assert _by_category(q, "flows_1h") == _by_category(q, "flows_1m") == once
    assert _by_category(q, "traffic_1h") == _by_category(q, "traffic_1m") == every
    n = q.sql("SELECT sum(flow_records) AS n FROM flows_1h").column("n")[0].as_py()
    assert n == q.sql("SELECT count(*) AS n FROM flows").column("n")[0].as_py() == int((~f["duplicate"]).sum())


def test_flows_keeps_the_columns_so_old_queries_give_the_same_answer(archives):
    both, _, _ = archives
    q = ArchiveQuery(None, both)
    columns = q.sql("SELECT * FROM flows_enriched LIMIT 0").column_names
    assert q.sql("SELECT * FROM flows LIMIT 0").column_names == columns
    a = q.sql("SELECT sum(bytes_est) AS b FROM flows_enriched WHERE NOT duplicate")
    assert a.equals(q.sql("SELECT sum(bytes_est) AS b FROM flows WHERE NOT duplicate"))
    assert a.equals(q.sql("SELECT sum(bytes_est) AS b FROM flows"))


def _write_alert(root: str, t: int, flows: int) -> None:
    b = HourlyBuffer("alerts", 0)
    b.add(table_from_dicts([{"dedup_key": "k", "rule": "incast", "severity": "critical", "state": "firing",
                             "summary": "s", "entities": {}, "window_start_ms": t, "window_end_ms": t + 1,
                             "first_seen_ms": t, "last_seen_ms": t, "bytes_est": 1, "flows": flows,
                             "sample_flows": []}], "alert"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))


def test_a_view_over_a_missing_dataset_is_not_defined(tmp_path):
    """An archive without flows_enriched: a query that only says 'flows' as a word still runs; reading the view
    is the usual one-line error, naming the datasets and views there are."""
    _write_alert(str(tmp_path), T0, flows=1)
    q = ArchiveQuery(None, str(tmp_path))
    assert q.sql("SELECT sum(flows) AS flows FROM alerts").column("flows")[0].as_py() == 1
    with pytest.raises(ArchiveError, match=r"datasets present: alerts\)"):
        q.sql("SELECT * FROM flows")


def test_flows_with_nothing_in_range_fails_only_a_query_that_reads_it(archives, tmp_path):
    """``flows`` is a word of other queries too (a column of ``alerts``): an empty range of flows_enriched fails
    a query that reads the view, with the usual message, and leaves the others alone; no view outlives its range."""
    both, _, _ = archives
    late = T0 + 30 * 86_400_000  # a day with alerts and no flows
    root = str(tmp_path / "a")
    shutil.copytree(both, root)
    _write_alert(root, late, flows=7)
    q = ArchiveQuery(None, root)
    assert q.sql("SELECT count(*) AS n FROM flows").column("n")[0].as_py() > 0  # the whole archive
    day = (late, late + 86_400_000)
    assert q.sql("SELECT sum(flows) AS flows FROM alerts", *day).column("flows")[0].as_py() == 7
    with pytest.raises(ArchiveError, match="no flows_enriched data between"):
        q.sql("SELECT count(*) FROM flows", *day)


def _documented_sql() -> list[str]:
    """Every `query sql` / `q.sql(...)` example of the README, docs/, the demo's closing lines and --help."""
    texts = [(ROOT / "README.md").read_text()] + [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    texts += closing_lines([], None, Path("archive"), Path("pipeline.yaml"), 0, 1)
    help_text = " ".join(CliRunner().invoke(_app(), ["query", "sql", "--help"], env={"COLUMNS": "400"}).output.split())
    texts += [f'query sql "{x}"' for x in re.findall(r'e\.g\. "([^"]+)"', help_text)]
    found = []
    for t in texts:
        found += re.findall(r'query sql "([^"]+)"', t) + re.findall(r'q\.sql\("([^"]+)"', t)
    return found


def _app():
    from cli.main import app

    return app


def test_every_documented_and_printed_query_counts_each_packet_once(archives):
    """Each example gives the same answer on the archive with duplicate records as on the one without: a sum
    over every exporter's record would not. Examples that mean every record say so (flow_observations)."""
    both, once, _ = archives
    queries = _documented_sql()
    assert queries.count(EXAMPLE_SQL) >= 5  # README, docs/archive.md (twice), the demo, --help
    assert any("flows_1h" in x for x in queries)
    checked = 0
    for sql in dict.fromkeys(queries):
        if "flow_observations" in sql:
            continue
        assert observation_note(sql) is None, sql
        a = ArchiveQuery(None, both).sql(sql).sort_by([(c, "ascending") for c in ArchiveQuery(None, both).sql(sql)
                                                       .column_names])
        b = ArchiveQuery(None, once).sql(sql).sort_by([(c, "ascending") for c in a.column_names])
        assert a.num_rows > 0 and a.equals(b), sql
        checked += 1
    assert checked >= 2
    # the old example did not: the check can fail
    old = "SELECT category, sum(bytes_est) FROM flows_enriched GROUP BY 1 ORDER BY 1"
    assert not ArchiveQuery(None, both).sql(old).equals(ArchiveQuery(None, once).sql(old))


def test_the_plain_duckdb_example_counts_each_packet_once(archives):
    both, once, _ = archives
    doc = (ROOT / "docs" / "archive.md").read_text()
    sql = next(b for b in re.findall(r"```sql\n(.*?)```", doc, re.S) if "read_parquet" in b and "flows_enriched" in b)
    run = {r: duckdb.sql(sql.replace("/var/lib/fabricflow/archive", r)).fetchall() for r in (both, once)}
    assert run[both] and run[both] == run[once]


def test_the_cli_notes_a_sum_over_every_observation(archives, monkeypatch):
    both, _, _ = archives
    monkeypatch.setenv("FABRICFLOW_ARCHIVE__URL", f"file://{both}")
    r = CliRunner().invoke(_app(), ["query", "sql", "SELECT category, sum(bytes_est) FROM flows_enriched GROUP BY 1"])
    assert r.exit_code == 0
    assert "note: flows_enriched has a row for every exporter that saw a packet" in r.stderr
    assert "query flows or add WHERE NOT duplicate" in r.stderr
    r = CliRunner().invoke(_app(), ["query", "sql", EXAMPLE_SQL])
    assert r.exit_code == 0 and "note:" not in r.stderr
    assert re.search(r"│ \w+ +│ +\d{1,3}(,\d{3})+ │", r.stdout)  # sums read with thousands separators


def test_observation_note():
    assert "query flows_1h or add WHERE NOT duplicate" in observation_note("SELECT sum(bytes_est) FROM traffic_1h")
    assert "query flows (" in observation_note("SELECT count(*) FROM flows_raw")  # no duplicate column there
    for sql in ("SELECT sum(bytes_est) FROM flows", "SELECT * FROM flow_observations", "SELECT 1 FROM flows_1m",
                "SELECT sum(bytes_est) FROM flows_enriched WHERE NOT duplicate",
                "SELECT sum(bytes_est) FROM flows_enriched WHERE exporter = '10.0.255.10'",
                "SELECT * FROM matrix_windows"):
        assert observation_note(sql) is None, sql
    assert set(VIEWS) == {"flows", "flow_observations", "flows_1m", "flows_1h"}


def test_render_groups_the_digits_of_a_sum(archives):
    both, _, _ = archives
    t = ArchiveQuery(None, both).sql("SELECT sum(bytes_est) AS b, sum(bytes_est) / 2 AS half FROM flows")
    assert pa.types.is_decimal(t.schema.field("b").type)  # DuckDB's sum of BIGINT
    b, half = t.to_pylist()[0].values()
    text = render(t, "table")
    assert f"{int(b):,}" in text and str(half) in text
