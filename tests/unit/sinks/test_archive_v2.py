"""flows.enriched.v1 and v2 archive the same: a v1-era archive (label columns as plain strings, as every file
written before v2) and a v2-era one (label columns as Parquet dictionary columns straight from the codes) of the
same flows hold the same rows and rollups, and they, and an archive mixing both kinds of file, answer every
`fabricflow query` report, view and SQL the same; the hourly summaries are equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas import codec
from schemas.registry import LABEL_FIELDS
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.layout import HOUR_MS
from sinks.archive.parquet import ParquetWriter
from sinks.archive.summaries import SummaryBook
from tests.support.query_cli import ff, fixture_rows
from tests.support.archive import enriched

MESSAGE_ROWS = 3  # several messages per file, each with its own label table


def _messages(rows: np.ndarray, wire: str) -> list[bytes]:
    encode = codec.encode_coded if wire == "v2" else codec.encode_batch
    schema = "flow_enriched_batch_v2" if wire == "v2" else "flow_enriched_batch"
    return [encode(schema, rows[i:i + MESSAGE_ROWS]) for i in range(0, len(rows), MESSAGE_ROWS)]


def _decode(message: bytes, wire: str):
    """What the archive sink buffers for a message of each era."""
    return codec.decode_coded(message) if wire == "v2" else codec.decode_batch(message, expect="flow_enriched_batch")


def _build(root: Path, rows: np.ndarray, wires: tuple[str, str]) -> None:
    """Partition p's files from messages of ``wires[p]``."""
    w = ParquetWriter(None, str(root))
    for p in (0, 1):
        b = HourlyBuffer("flows_enriched", p)
        for o, m in enumerate(_messages(rows[p::2], wires[p])):
            b.add(_decode(m, wires[p]), o)
        w.write_plan(b.flush_plan(force=True))


ERAS = {"v1": ("v1", "v1"), "v2": ("v2", "v2"), "mixed": ("v1", "v2")}


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    rows = enriched(fixture_rows())
    roots = {}
    for era, wires in ERAS.items():
        roots[era] = tmp_path_factory.mktemp(f"archive-{era}") / "archive"
        _build(roots[era], rows, wires)
    return roots, rows


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*.parquet"))}


def _plain(t: pa.Table) -> pa.Table:
    """``t`` with its dictionary columns as plain strings."""
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(t.column_names, t.columns)})


def test_every_file_holds_the_same_rows(archives):
    roots, _rows = archives
    v1, v2 = _files(roots["v1"]), _files(roots["v2"])
    assert set(v1) == set(v2) and any("traffic_1h" in k for k in v1)  # the rollups too
    for name in v1:
        a, b = pq.read_table(v1[name]), pq.read_table(v2[name])
        if not name.startswith("flows_enriched/"):
            assert a.schema == b.schema and a.equals(b), name  # rollups: identical
            continue
        for f in LABEL_FIELDS:  # before: plain strings; now: dictionary columns, from the codes
            assert a.schema.field(f).type == pa.string(), (name, f)
            assert pa.types.is_dictionary(b.schema.field(f).type), (name, f)
            assert "RLE_DICTIONARY" in str(pq.ParquetFile(v2[name]).metadata.row_group(0).column(
                b.schema.get_field_index(f)).encodings)
        assert _plain(a).equals(_plain(b)), name
        assert a.schema.remove_metadata() != b.schema.remove_metadata()  # the two kinds of file were compared


def test_a_dictionary_column_holds_only_its_own_labels(archives):
    roots, _rows = archives
    for name, path in _files(roots["v2"]).items():
        if name.startswith("flows_enriched/"):
            t = pq.read_table(path)
            for f in LABEL_FIELDS:
                col = t.column(f).combine_chunks()
                assert sorted(col.dictionary.to_pylist()) == sorted(set(col.cast(pa.string()).to_pylist())), f


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
    for era, root in roots.items():
        r = ff(root, *args, "--format", "json")
        assert r.exit_code == 0, r.output
        out[era] = r.output
    assert out["v1"] == out["v2"] == out["mixed"]
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
