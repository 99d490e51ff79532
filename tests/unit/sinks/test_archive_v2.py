"""flows.enriched.v1 and v2 archive the same: a v1-era and a v2-era archive of the same flows hold equal files
and answer every `fabricflow query` report, view and SQL the same, and the hourly summaries are equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from schemas import codec
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.layout import HOUR_MS
from sinks.archive.parquet import ParquetWriter
from sinks.archive.summaries import SummaryBook
from tests.integration.test_query_cli import ff, fixture_rows
from tests.support.archive import enriched

MESSAGE_ROWS = 3  # several messages per file, each with its own label table


def _messages(rows: np.ndarray, wire: str) -> list[bytes]:
    encode = codec.encode_coded if wire == "v2" else codec.encode_batch
    schema = "flow_enriched_batch_v2" if wire == "v2" else "flow_enriched_batch"
    return [encode(schema, rows[i:i + MESSAGE_ROWS]) for i in range(0, len(rows), MESSAGE_ROWS)]


def _decode(message: bytes, wire: str):
    """What the archive sink buffers for a message of each era."""
    return codec.decode_coded(message) if wire == "v2" else codec.decode_batch(message, expect="flow_enriched_batch")


def _build(root: Path, rows: np.ndarray, wire: str) -> None:
    w = ParquetWriter(None, str(root))
    for p in (0, 1):
        b = HourlyBuffer("flows_enriched", p)
        for o, m in enumerate(_messages(rows[p::2], wire)):
            b.add(_decode(m, wire), o)
        w.write_plan(b.flush_plan(force=True))


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    rows = enriched(fixture_rows())
    roots = {}
    for wire in ("v1", "v2"):
        roots[wire] = tmp_path_factory.mktemp(f"archive-{wire}") / "archive"
        _build(roots[wire], rows, wire)
    return roots, rows


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*.parquet"))}


def test_every_file_is_equal(archives):
    roots, _rows = archives
    v1, v2 = _files(roots["v1"]), _files(roots["v2"])
    assert set(v1) == set(v2) and any("traffic_1h" in k for k in v1)  # the rollups too
    for name in v1:
        a, b = pq.read_table(v1[name]), pq.read_table(v2[name])
        assert a.schema == b.schema, name
        assert a.equals(b), name


REPORTS = [
    ("query", "top-talkers", "-n", "50"),
    ("query", "matrix"), ("query", "matrix", "--level", "group"), ("query", "matrix", "--level", "rack"),
    ("query", "matrix", "--source", "1h"), ("query", "matrix", "--source", "1m"),
    ("query", "node", "g1"), ("query", "node", "s1"), ("query", "job", "jobA"), ("query", "job", "jobB"),
    ("query", "segmentation"), ("query", "top-talkers", "--exporter", "192.0.2.1"),
    ("query", "sql", "SELECT * FROM flows ORDER BY time_end_ms, src_ip, dst_ip"),
    ("query", "sql", "SELECT * FROM flows_1m ORDER BY ALL"), ("query", "sql", "SELECT * FROM flows_1h ORDER BY ALL"),
    ("query", "sql", "SELECT * FROM flow_observations ORDER BY time_end_ms, src_ip, dst_ip"),
    ("query", "sql", "SELECT * EXCLUDE (dt, hour) FROM flows_enriched ORDER BY time_end_ms, src_ip, dst_ip"),
]


@pytest.mark.parametrize("args", REPORTS, ids=lambda a: " ".join(a[1:]))
def test_every_report_and_view_answers_the_same(archives, args):
    roots, _rows = archives
    out = {}
    for wire, root in roots.items():
        r = ff(root, *args, "--format", "json")
        assert r.exit_code == 0, r.output
        out[wire] = r.output
    assert out["v1"] == out["v2"]
    assert len(out["v1"]) > 20  # an answer with rows was compared


def test_hourly_summaries_are_equal(archives):
    _roots, rows = archives
    result = {}
    for wire in ("v1", "v2"):
        book = SummaryBook()
        for m in _messages(rows, wire):
            book.add_flows(_decode(m, wire))
        result[wire] = book.close(int(rows["time_end_ms"].max()) + 30 * HOUR_MS)
    assert result["v1"] == result["v2"] and len(result["v1"]) >= 3
