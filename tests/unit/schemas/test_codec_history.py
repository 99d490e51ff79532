"""Batches written with an earlier compatible record schema (schemas/avro/history) still decode."""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest

from schemas import codec
from schemas.columns import AVRO_DIR
from schemas.registry import derive_batch_schema, schema_fingerprint, writer_schema
from tests.support.archive import enriched


def old_enriched_message(rows: np.ndarray) -> bytes:
    """A FlowEnrichedBatch as the previous version wrote it (no ``duplicate`` column), encoded by fastavro."""
    return _old_batch("flow_enriched", "flow_enriched.1.avsc", "flow_enriched_batch", rows)


def test_an_old_enriched_batch_decodes_with_the_new_column_at_its_default():
    rows = enriched([{"src_node": "g1", "dst_node": "g2", "bytes_est": 1000 * i, "category": "collective",
                      "src_addr": "10.0.0.1", "dst_addr": "10.0.0.2"} for i in range(5)])
    msg = old_enriched_message(rows)
    assert msg[2:10] != schema_fingerprint("flow_enriched_batch")
    assert writer_schema(msg) is not None
    assert codec.schema_of(msg) == "flow_enriched_batch"
    out = codec.decode_batch(msg, expect="flow_enriched_batch")
    assert out.dtype == rows.dtype and len(out) == 5
    assert not out["duplicate"].any()
    for name in rows.dtype.names:
        if name != "duplicate":
            assert (out[name] == rows[name]).all(), name


def test_a_current_batch_is_not_taken_for_an_old_one():
    rows = enriched([{"src_node": "g1", "duplicate": True}])
    msg = codec.encode_batch("flow_enriched_batch", rows)
    assert writer_schema(msg) is None
    assert codec.decode_batch(msg)["duplicate"].tolist() == [True]


def test_a_truncated_old_batch_is_a_codec_error():
    msg = old_enriched_message(enriched([{"src_node": "g1"}]))
    with pytest.raises(codec.CodecError):
        codec.decode_batch(msg[:-3])


def _old_batch(record: str, history: str, batch: str, rows: np.ndarray) -> bytes:
    old = json.loads((AVRO_DIR / "history" / history).read_text())
    parsed = fastavro.parse_schema(derive_batch_schema(record, old))
    fp = bytes.fromhex(fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
    cols = {}
    for f in old["fields"]:
        v = rows[f["name"]]
        cols[f["name"]] = [bytes(bytearray(x)) for x in v] if v.ndim == 2 else v.tolist()
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, cols)
    return codec.MAGIC + fp + buf.getvalue()


@pytest.mark.parametrize("record,history,batch", [("flow_record", "flow_record.1.avsc", "flow_batch"),
                                                  ("flow_enriched", "flow_enriched.2.avsc", "flow_enriched_batch")])
def test_batches_written_before_the_vlan_and_next_hop_fields_decode_with_defaults(record, history, batch):
    rows = enriched([{"src_node": "g1", "dst_node": "g2", "bytes_est": 10 * i, "src_addr": "10.0.0.1",
                      "dst_addr": "10.0.0.2"} for i in range(4)])
    if record == "flow_record":
        from schemas.columns import FLOW_DTYPE

        flat = np.zeros(len(rows), dtype=FLOW_DTYPE)
        for name in FLOW_DTYPE.names:
            flat[name] = rows[name]
        rows = flat
    msg = _old_batch(record, history, batch, rows)
    assert msg[2:10] != schema_fingerprint(batch) and codec.schema_of(msg) == batch
    out = codec.decode_batch(msg, expect=batch)
    assert out["bytes_est"].tolist() == [0, 10, 20, 30]
    assert (out["vlan_out"] == 0).all() and (out["vlan_priority_in"] == 0).all()
    assert not out["next_hop"].any() and not out["bgp_next_hop"].any()
