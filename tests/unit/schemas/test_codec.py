"""Wire codec: Avro single-object framing, numpy batch encoding identical to fastavro."""

import io
import json

import fastavro
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import codec, varint
from schemas.columns import AVRO_DIR, COUNTER_DTYPE, FLOW_DTYPE, dtype_for

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _column_strategy(dt, n):
    if dt.shape == (16,):
        return st.lists(st.binary(min_size=16, max_size=16), min_size=n, max_size=n)
    if dt.base == np.int32:
        return st.lists(INT32, min_size=n, max_size=n)
    if dt.base == np.int64:
        return st.lists(INT64, min_size=n, max_size=n)
    if dt.base == np.bool_:
        return st.lists(st.booleans(), min_size=n, max_size=n)
    return st.lists(st.text(max_size=12), min_size=n, max_size=n)


@st.composite
def batches(draw, dtype):
    n = draw(st.integers(0, 40))
    arr = np.zeros(n, dtype=dtype)
    for name in dtype.names:
        vals = draw(_column_strategy(dtype[name], n))
        if dtype[name].shape == (16,):
            arr[name] = np.frombuffer(b"".join(vals), dtype=np.uint8).reshape(n, 16) if n else arr[name]
        else:
            arr[name] = np.array(vals, dtype=dtype[name].base if dtype[name].base != object else object) if n else arr[name]
    return arr


def _fastavro_bytes(batch_name, arr):
    rec = {}
    for k in arr.dtype.names:
        col = arr[k]
        if col.ndim == 2:
            rec[k] = [bytes(x) for x in col]
        else:
            rec[k] = col.tolist()
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, codec.parsed(batch_name), rec)
    return buf.getvalue()


@pytest.mark.parametrize(
    "batch,dtype",
    [("flow_batch", FLOW_DTYPE), ("counter_batch", COUNTER_DTYPE), ("flow_enriched_batch", dtype_for("flow_enriched"))],
)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_batch_roundtrip_and_fastavro_identity(batch, dtype, data):
    arr = data.draw(batches(dtype))
    msg = codec.encode_batch(batch, arr)
    assert msg[:2] == codec.MAGIC
    assert codec.schema_of(msg) == batch
    # Byte-identical to the reference Avro implementation ...
    assert msg[codec.HEADER_LEN :] == _fastavro_bytes(batch, arr)
    # ... and decodes back to the same columns.
    back = codec.decode_batch(msg, expect=batch)
    assert back.dtype == dtype
    assert len(back) == len(arr)
    for k in dtype.names:
        assert np.array_equal(back[k], arr[k]), k
    # An ordinary Avro reader decodes our bytes too.
    rec = fastavro.schemaless_reader(io.BytesIO(msg[codec.HEADER_LEN :]), codec.parsed(batch), codec.parsed(batch))
    assert len(rec[dtype.names[0]]) == len(arr)


def test_decode_accepts_multi_block_arrays_from_other_writers():
    """Avro allows arrays in several blocks (negative counts carry a byte size); we must read them."""
    arr = np.zeros(3, dtype=COUNTER_DTYPE)
    arr["if_index"] = [1, 2, 3]
    arr["in_octets"] = [2**40, -5, 7]
    parts = [codec.header("counter_batch")]
    for name, kind in codec._plan("counter_batch"):
        col = arr[name]
        if kind == "long":
            body1 = varint.varint_bytes(varint.zigzag(col[:1]))
            body2 = varint.varint_bytes(varint.zigzag(col[1:]))
        elif kind == "bool":
            body1, body2 = col[:1].astype(np.uint8).tobytes(), col[1:].astype(np.uint8).tobytes()
        else:
            body1, body2 = col[:1].tobytes(), col[1:].tobytes()
        # block 1: count 1; block 2: count -2 with byte size
        parts += [varint.encode_long(1), body1, varint.encode_long(-2), varint.encode_long(len(body2)), body2, b"\x00"]
    back = codec.decode_batch(b"".join(parts))
    assert back["if_index"].tolist() == [1, 2, 3]
    assert back["in_octets"].tolist() == [2**40, -5, 7]


def test_committed_batch_avsc_match_derivation():
    for name in (*codec.BATCHES, *codec.CODED_BATCHES):
        committed = json.loads((AVRO_DIR / f"{name}.avsc").read_text())
        assert committed == codec.schema_json(name), f"{name}.avsc is stale: run schemas.codec.write_batch_schemas()"


ROCE_OPS_ZERO = {f"roce_{op}_packets_est": 0 for op in ("send", "write", "read_request", "read_response", "ack",
                                                         "atomic")}


def test_record_written_with_an_earlier_schema_version_reads_with_defaults():
    """matrix_cell before the rack level and signal columns (schemas/avro/history/matrix_cell.1.avsc)."""
    old = fastavro.parse_schema(json.loads((AVRO_DIR / "history" / "matrix_cell.1.avsc").read_text()))
    fp = bytes.fromhex(fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(old), "CRC-64-AVRO"))
    assert fp != codec.schema_fingerprint("matrix_cell")
    cell = {"window_start_ms": 1, "window_end_ms": 2, "level": "group", "src": "gpu", "dst": "storage",
            "category": "storage", "bytes_est": 9, "packets_est": 3, "flow_records": 1, "samples": 3}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, cell)
    msg = codec.MAGIC + fp + buf.getvalue()
    assert codec.schema_of(msg) == "matrix_cell"
    assert codec.decode_record(msg, expect="matrix_cell") == cell | {
        "syn_packets_est": 0, "rst_packets_est": 0, "ecn_ce_packets_est": 0, "cnp_packets_est": 0} | ROCE_OPS_ZERO
    with pytest.raises(codec.CodecError):
        codec.decode_record(msg[:-2], expect="matrix_cell")


def test_record_schemas_roundtrip():
    cell = {
        "window_start_ms": 1000, "window_end_ms": 11000, "level": "node", "src": "gpu-1", "dst": "gpu-2",
        "category": "collective", "bytes_est": 123, "packets_est": 4, "flow_records": 2, "samples": 3,
    }  # fmt: skip
    msg = codec.encode_record("matrix_cell", cell)
    assert codec.schema_of(msg) == "matrix_cell"
    # fields added later (with defaults) read as their default when a writer leaves them out
    signals = {"syn_packets_est": 0, "rst_packets_est": 0, "ecn_ce_packets_est": 0, "cnp_packets_est": 0,
               **ROCE_OPS_ZERO}
    assert codec.decode_record(msg, expect="matrix_cell") == cell | signals
    cell = cell | signals | {"level": "rack", "syn_packets_est": 1024, "cnp_packets_est": 7}
    assert codec.decode_record(codec.encode_record("matrix_cell", cell), expect="matrix_cell") == cell
    with pytest.raises(codec.CodecError):
        codec.decode_record(msg, expect="alert")


def test_fingerprint_is_avro_crc64_little_endian():
    # Avro spec: the CRC-64-AVRO fingerprint of "null" is 0x63dd24e7cc258f8a, stored little-endian.
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form("null"), "CRC-64-AVRO"))
    assert fp == (0x63DD24E7CC258F8A).to_bytes(8, "little")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_codec_error_only(data):
    for msg in (data, codec.header("flow_batch") + data):
        try:
            codec.decode_batch(msg)
        except codec.CodecError:
            pass


def test_truncated_batches_raise_codec_error():
    arr = np.zeros(5, dtype=FLOW_DTYPE)
    arr["bytes"] = np.arange(5) * 1000
    msg = codec.encode_batch("flow_batch", arr)
    for cut in range(len(msg)):
        with pytest.raises(codec.CodecError):
            codec.decode_batch(msg[:cut])


@pytest.mark.parametrize("name, version, added", [
    ("incast_event", 1, {"dst_port": "", "dst_out_discards_per_s": -1.0, "diagnosis": None}),
    ("link_health", 1, {"node": "", "job": "", "diagnosis": None}),
    ("straggler_score", 1, {"explained_by": "", "diagnosis": None}),
    # before the diagnosis (issue 28)
    ("incast_event", 2, {"diagnosis": None}),
    ("link_health", 2, {"diagnosis": None}),
    ("straggler_score", 2, {"diagnosis": None}),
    ("alert", 1, {"diagnosis": None}),
])
def test_detector_outputs_from_before_added_fields_read_with_defaults(name, version, added):
    """Detector output messages written before issue #19's cause-link fields or issue 28's diagnosis
    (schemas/avro/history/<name>.<version>.avsc) still decode, the new fields at their defaults."""
    old_json = json.loads((AVRO_DIR / "history" / f"{name}.{version}.avsc").read_text())
    old = fastavro.parse_schema(old_json)
    fp = bytes.fromhex(fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(old), "CRC-64-AVRO"))
    assert fp != codec.schema_fingerprint(name)
    samples = {"long": 7, "int": 3, "double": 0.5, "boolean": True, "string": "x"}
    rec = {}
    for f in old_json["fields"]:
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "array":
            rec[f["name"]] = []
        elif isinstance(t, dict) and t.get("type") == "map":
            rec[f["name"]] = {"k": "v"}
        elif isinstance(t, dict) and t.get("type") == "enum":
            rec[f["name"]] = t["symbols"][0]
        else:
            rec[f["name"]] = samples[t]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, rec)
    msg = codec.MAGIC + fp + buf.getvalue()
    assert codec.schema_of(msg) == name
    assert codec.decode_record(msg, expect=name) == rec | added


@pytest.mark.parametrize("field", ["src_node", "dst_switch", "category"])
def test_v2_label_code_outside_the_table_names_its_field(field):
    """A flows.enriched.v2 message whose codes point past its label table is a CodecError naming the field (the
    codes are checked all at once; the field is found only for a bad message)."""
    from schemas.registry import LABEL_FIELDS, header

    name = "flow_enriched_batch_v2"
    arr = np.zeros(3, dtype=dtype_for("flow_enriched"))
    codes = {f: np.zeros(3, np.int64) for f in LABEL_FIELDS}
    good = [header(name), codec.encode_long(1), codec.encode_strings(np.array(["x"], dtype=object)), b"\x00"]
    ok = b"".join(codec._encode_fields(list(good), codec._plan(name)[1:], arr, 3, {}, {}, codes))
    assert codec.decode_coded(ok).column(field).tolist() == ["x"] * 3
    codes[field] = np.array([0, 1, 0])
    bad = b"".join(codec._encode_fields(list(good), codec._plan(name)[1:], arr, 3, {}, {}, codes))
    with pytest.raises(codec.CodecError, match=f"^{field}: label code outside the 1 labels"):
        codec.decode_coded(bad)
