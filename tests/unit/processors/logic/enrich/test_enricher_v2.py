"""flows.enriched.v2: dictionary-coded enriched batches read back as the same records as v1, by our codec and by
plain fastavro, and are written from the enricher's codes without gathering a label column."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import numpy as np
import pytest

from processors.config_files import read_inventory
from processors.logic.enrich.enricher import ENRICHED_DTYPE, Enricher
from schemas import codec
from schemas.registry import parsed

from tests.support.enrich import EXAMPLE, assert_same_records, example_batch

ROOT = Path(__file__).resolve().parents[5]


def _enriched(times: int = 40):
    e = Enricher(read_inventory(EXAMPLE))
    f = example_batch(times)
    return e.enrich(f), e.enrich_labels(f)


def test_v2_decodes_to_the_v1_records_from_codes_or_strings():
    arr, lab = _enriched()
    v2 = codec.encode_coded("flow_enriched_batch_v2", lab, lab.label_codes())
    assert lab._columns == {}  # written from the codes: no label column gathered
    assert_same_records(codec.decode_batch(codec.encode_coded("flow_enriched_batch_v2", arr)), arr)  # coded from the strings
    assert codec.schema_of(v2) == "flow_enriched_batch_v2"
    assert_same_records(codec.decode_batch(v2), arr)
    assert_same_records(codec.decode_batch(v2, expect="flow_enriched_batch"), arr)
    v1 = codec.encode_batch("flow_enriched_batch", arr)
    assert_same_records(codec.decode_batch(v1, expect="flow_enriched_batch_v2"), arr)  # a reader of v2 reads v1 too
    cb = codec.decode_coded(v2)
    assert cb.rows.dtype == codec.CODED_DTYPE and len(cb.labels) == len(set(cb.labels.tolist()))
    used = set().union(*(arr[f].tolist() for f in codec.LABEL_FIELDS))
    assert set(cb.labels.tolist()) == used  # only the strings the rows use, each once
    for f in codec.LABEL_FIELDS:
        assert cb.column(f).tolist() == arr[f].tolist()
    assert_same_records(codec.decode_coded(v1).to_array(), arr)
    assert len(v2) < len(v1)


def _docs_snippet() -> str:
    """The fastavro snippet of docs/schemas.md, "flows.enriched.v2"."""
    text = (ROOT / "docs" / "schemas.md").read_text()
    section = text[text.index("## flows.enriched.v2"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_v2_reads_with_plain_fastavro_as_docs_schemas_md_shows(monkeypatch):
    arr, lab = _enriched(2)
    message = codec.encode_coded("flow_enriched_batch_v2", lab, lab.label_codes())
    monkeypatch.chdir(ROOT)
    scope = {"message": message}
    exec(_docs_snippet(), scope)  # exactly the documented lines
    assert scope["src_node"] == arr["src_node"].tolist()
    batch = scope["batch"]
    assert batch["bytes"] == arr["bytes"].tolist()
    assert [scope["labels"][i] for i in batch["category"]] == arr["category"].tolist()
    # and what fastavro writes, our decoder reads
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed("flow_enriched_batch_v2"), batch)
    assert_same_records(codec.decode_batch(codec.header("flow_enriched_batch_v2") + buf.getvalue()), arr)


def test_empty_and_one_row_batches_round_trip():
    arr, lab = _enriched(1)
    for rows in (slice(0, 0), slice(0, 1)):
        m = codec.encode_coded("flow_enriched_batch_v2", lab[rows], codec.coded_rows(lab.label_codes(), rows))
        out = codec.decode_batch(m)
        assert out.dtype == ENRICHED_DTYPE
        assert_same_records(out, arr[rows])


def test_corrupt_v2_messages_raise_codec_error_only():
    arr, lab = _enriched(1)
    m = codec.encode_coded("flow_enriched_batch_v2", lab, lab.label_codes())
    rng = np.random.default_rng(7)
    for cut in range(11, len(m), max(1, len(m) // 97)):
        with pytest.raises(codec.CodecError):
            codec.decode_coded(m[:cut])
    bad = 0
    for _ in range(300):
        b = bytearray(m)
        for i in rng.integers(10, len(b), 3):
            b[i] = int(rng.integers(0, 256))
        try:
            codec.decode_coded(bytes(b))
        except codec.CodecError:
            bad += 1
    assert bad > 0
    # a code past the table
    cb = codec.decode_coded(m)
    rows = cb.rows.copy()
    rows["category"][0] = len(cb.labels)
    batch = {f: rows[f].tolist() for f in codec.LABEL_FIELDS}
    schema = fastavro.parse_schema(codec.schema_json("flow_enriched_batch_v2"))
    full = fastavro.schemaless_reader(io.BytesIO(m[10:]), schema)
    full.update(batch)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, full)
    with pytest.raises(codec.CodecError, match="category: label code outside"):
        codec.decode_coded(codec.header("flow_enriched_batch_v2") + buf.getvalue())


def _strings(xs) -> bytes:
    from schemas.varint import encode_long

    return b"".join(encode_long(len(x.encode())) + x.encode() for x in xs)


def test_the_label_table_reads_in_any_avro_blocking_and_names_its_errors():
    from schemas.varint import encode_long

    _arr, lab = _enriched(1)
    m = codec.encode_coded("flow_enriched_batch_v2", lab, lab.label_codes())
    spans: dict = {}
    cb = codec.decode_coded(m, spans=spans)
    a, b = spans["labels"]
    labels = list(cb.labels)
    assert len(labels) > 3
    h = len(labels) // 2
    first = _strings(labels[:h])
    blocked = encode_long(-h) + encode_long(len(first)) + first + encode_long(len(labels) - h) + _strings(labels[h:])
    again = codec.decode_coded(m[:a] + blocked + b"\x00" + m[b:])
    assert list(again.labels) == labels and (again.rows == cb.rows).all()
    for table, reason in ((encode_long(1) + encode_long(1) + b"\xff\x00", "labels: invalid UTF-8"),
                          (encode_long(1) + encode_long(10**6) + b"x\x00", "labels: bad string length"),
                          (encode_long(10**9) + b"\x00", "labels: block count 1000000000 larger than the message")):
        with pytest.raises(codec.CodecError, match=reason):
            codec.decode_coded(m[:a] + table + m[b:])
    with pytest.raises(codec.CodecError, match="labels: truncated varint"):
        codec.decode_coded(m[:a])
