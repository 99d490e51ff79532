"""Batch codec fast paths: varint widths 1..10, string length prefixes, blocks, corrupt input.

Every numpy/pyarrow encoding fast path in ``schemas.codec`` and the compiled
decoding walk are checked against independent references: fastavro for
encoding, a small pure-Python Avro writer (below) for the encodings other
writers may produce (several blocks, negative block counts with byte sizes,
non-minimal varints), and CodecError-only behaviour on corrupt input.
"""

from __future__ import annotations

import io
import random
from contextlib import contextmanager

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import codec, strings, varint
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, dtype_for
from tests.support.avro import other_writer, ref_long, ref_varint

ENRICHED = dtype_for("flow_enriched")
STRING_FIELDS = [k for k in ENRICHED.names if ENRICHED[k] == object]
# Generation time varies with the load from other jobs: no health checks that time data generation.
RELAXED = [HealthCheck.too_slow, HealthCheck.data_too_large]


# --------------------------------------------------------------------------- references


@contextmanager
def small_columns_limits(small: int, small_strings: int):
    """Set the codec's "few values: plain Python" limits (0, 0 forces the numpy/pyarrow paths)."""
    saved = varint._SMALL, strings._SMALL_STRINGS
    varint._SMALL, strings._SMALL_STRINGS = small, small_strings
    try:
        yield
    finally:
        varint._SMALL, strings._SMALL_STRINGS = saved


def every_path():
    """Run the body once with the default limits and once with every column on the vectorised path."""
    for limits in ((varint._SMALL, strings._SMALL_STRINGS), (0, 0)):
        with small_columns_limits(*limits):
            yield limits


def fastavro_bytes(batch: str, arr: np.ndarray) -> bytes:
    rec = {k: ([bytes(x) for x in arr[k]] if arr[k].ndim == 2 else arr[k].tolist()) for k in arr.dtype.names}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, codec.parsed(batch), rec)
    return buf.getvalue()


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and len(a) == len(b)
    for k in a.dtype.names:
        assert np.array_equal(a[k], b[k]), k


# --------------------------------------------------------------------------- strategies


def values_of_width(w: int) -> st.SearchStrategy[int]:
    """int64 values whose zig-zag varint has exactly ``w`` bytes."""
    lo = 0 if w == 1 else 1 << (7 * (w - 1))
    hi = (1 << (7 * w)) - 1 if w < 10 else (1 << 64) - 1
    return st.integers(lo, hi).map(lambda u: (u >> 1) if u % 2 == 0 else -((u + 1) >> 1))


WIDTH_EDGES = sorted({v for w in range(1, 11) for u in ((1 << (7 * w)) - 1, 1 << (7 * w), (1 << (7 * w)) + 1)
                      if u < 1 << 64 for v in ((u >> 1) if u % 2 == 0 else -((u + 1) >> 1),)})  # fmt: skip


@st.composite
def long_columns(draw, max_n: int = 60):
    """A column mixing a few varint widths (or one width, or one value)."""
    n = draw(st.integers(1, max_n))
    shape = draw(st.sampled_from(["mixed", "one-width", "constant", "edges"]))
    if shape == "constant":
        return np.full(n, draw(values_of_width(draw(st.integers(1, 10)))), dtype=np.int64)
    if shape == "edges":
        return np.array(draw(st.lists(st.sampled_from(WIDTH_EDGES), min_size=n, max_size=n)), dtype=np.int64)
    if shape == "one-width":
        widths = [draw(st.integers(1, 10))]
    else:
        widths = draw(st.lists(st.integers(1, 10), min_size=2, max_size=4))
    vals = draw(st.lists(st.sampled_from(widths).flatmap(values_of_width), min_size=n, max_size=n))
    return np.array(vals, dtype=np.int64)


UTF8 = st.characters(codec="utf-8")  # no lone surrogates: not encodable, rejected by every Avro writer
ASCII = st.characters(codec="ascii")


def text_near(n_bytes: int) -> st.SearchStrategy[str]:
    """ASCII text of about ``n_bytes`` bytes (around a length-prefix width boundary)."""
    return st.text(ASCII, min_size=max(0, n_bytes - 2), max_size=n_bytes + 2)


STRINGS = st.one_of(
    st.just(""),
    st.text(UTF8, max_size=8),
    st.sampled_from(["gpu-a01-n03", "tor-b07-1", "collective", "unknown", "job-llama3-70b-pretrain-0042"]),
    text_near(63), text_near(64), text_near(127), text_near(128),  # 1/2-byte zig-zag length prefix edges
    st.text(st.characters(codec="utf-8", min_codepoint=0x80), max_size=40),  # multi-byte UTF-8
    st.text(UTF8, min_size=30, max_size=70),  # byte length around 63/64 or more
    st.text(UTF8, min_size=200, max_size=300),
)  # fmt: skip


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize("w", range(1, 11))
def test_varint_bytes_every_width_matches_reference(w):
    rng = np.random.default_rng(w)
    lo = 0 if w == 1 else 1 << (7 * (w - 1))
    hi = (1 << (7 * w)) - 1 if w < 10 else (1 << 64) - 1
    uniform = rng.integers(lo, hi, 300, dtype=np.uint64, endpoint=True)
    mixed = np.concatenate([uniform, rng.integers(0, 1 << 14, 300, dtype=np.uint64)])
    rng.shuffle(mixed)
    for u in (uniform, mixed, uniform[:1], np.array([lo, hi], dtype=np.uint64)):
        assert varint.varint_bytes(u) == b"".join(ref_varint(int(x)) for x in u)


@settings(max_examples=150, deadline=None, suppress_health_check=RELAXED)
@given(col=long_columns())
def test_long_column_encode_matches_fastavro_and_roundtrips(col):
    arr = np.zeros(len(col), dtype=COUNTER_DTYPE)
    arr["in_octets"] = col
    arr["out_octets"] = col[::-1]
    arr["if_direction"] = np.clip(col, -(2**31), 2**31 - 1)
    ref = fastavro_bytes("counter_batch", arr)
    for _ in every_path():
        msg = codec.encode_batch("counter_batch", arr)
        assert msg[codec.HEADER_LEN :] == ref
        assert varint.encode_long_column(col) == b"".join(ref_long(int(v)) for v in col)
        assert_same(codec.decode_batch(msg), arr)


@settings(max_examples=60, deadline=None, suppress_health_check=RELAXED)
@given(cols=st.lists(long_columns(max_n=30), min_size=3, max_size=3), seed=st.integers(0, 2**32))
def test_long_columns_from_other_writers_decode(cols, seed):
    """Several blocks, negative counts, non-minimal (padded) varints."""
    n = min(len(c) for c in cols)
    arr = np.zeros(n, dtype=COUNTER_DTYPE)
    for name, c in zip(("in_octets", "sample_sequence", "if_speed"), cols):
        arr[name] = c[:n]
    msg = other_writer("counter_batch", arr, random.Random(seed), pad_varints=True)
    for _ in every_path():
        assert_same(codec.decode_batch(msg), arr)


@settings(max_examples=150, deadline=None, suppress_health_check=RELAXED)
@given(col=long_columns())
def test_varint_column_at_the_end_of_a_message_decodes(col):
    """The long column that ends the message (its last varint is the message's last item) decodes."""
    arr = np.zeros(len(col), dtype=COUNTER_DTYPE)
    arr["dot3_symbol_errors"] = col
    assert codec._plan("counter_batch")[-1][0] == "dot3_symbol_errors"
    msg = codec.encode_batch("counter_batch", arr)
    assert msg.endswith(b"".join(ref_long(int(v)) for v in col) + b"\x00")
    for _ in every_path():
        assert_same(codec.decode_batch(msg), arr)


def test_varint_decode_rejects_eleven_byte_varint():
    arr = np.zeros(2, dtype=COUNTER_DTYPE)
    good = codec.encode_batch("counter_batch", arr)
    # exporter_addr: count, 2 x 16 bytes, 0; observation_domain: count, first value -> an 11-byte varint
    first = codec.HEADER_LEN + 1 + 32 + 1 + 1
    assert good[first - 1 : first + 1] == b"\x04\x00"
    bad = good[:first] + b"\x80" * 10 + b"\x00" + good[first + 1 :]
    for _ in every_path():
        with pytest.raises(codec.CodecError):
            codec.decode_batch(bad)


# --------------------------------------------------------------------------- strings


@st.composite
def enriched(draw, max_n: int = 12):
    n = draw(st.integers(0, max_n))
    arr = np.zeros(n, dtype=ENRICHED)
    arr["bytes"] = draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n)) if n else arr["bytes"]
    for k in STRING_FIELDS:
        vals = draw(st.lists(STRINGS, min_size=n, max_size=n))
        arr[k] = np.array(vals, dtype=object) if n else arr[k]
    return arr


@settings(max_examples=120, deadline=None, suppress_health_check=RELAXED)
@given(arr=enriched())
def test_string_columns_match_fastavro_and_roundtrip(arr):
    ref = fastavro_bytes("flow_enriched_batch", arr)
    for _ in every_path():
        msg = codec.encode_batch("flow_enriched_batch", arr)
        assert msg[codec.HEADER_LEN :] == ref
        back = codec.decode_batch(msg, expect="flow_enriched_batch")
        assert_same(back, arr)
        assert all(type(x) is str for k in STRING_FIELDS for x in back[k])


@settings(max_examples=60, deadline=None, suppress_health_check=RELAXED)
@given(arr=enriched(max_n=15), seed=st.integers(0, 2**32))
def test_string_columns_from_other_writers_decode(arr, seed):
    msg = other_writer("flow_enriched_batch", arr, random.Random(seed), pad_varints=True)
    for _ in every_path():
        assert_same(codec.decode_batch(msg), arr)


def test_string_encode_normalises_none_and_non_str_objects():
    arr = np.zeros(4, dtype=ENRICHED)
    for k in STRING_FIELDS:
        arr[k] = np.array(["a", None, "b", ""], dtype=object)
    arr["src_node"] = np.array([None, None, None, None], dtype=object)
    arr["dst_node"] = np.array([1, "x", 2.5, None], dtype=object)
    arr["category"] = np.array([np.str_("collective"), "dns", "é", "x" * 70], dtype=object)
    for _ in every_path():
        back = codec.decode_batch(codec.encode_batch("flow_enriched_batch", arr))
        assert back["src_rack"].tolist() == ["a", "", "b", ""]
        assert back["src_node"].tolist() == ["", "", "", ""]
        assert back["dst_node"].tolist() == ["1", "x", "2.5", ""]
        assert back["category"].tolist() == ["collective", "dns", "é", "x" * 70]


@pytest.mark.parametrize("repeat", [1, 20])  # 20: few distinct values among 41 (dictionary path)
@pytest.mark.parametrize("text", ["plain", "x" * 63, "x" * 64, "y" * 200])
def test_invalid_utf8_raises_codec_error(text, repeat):
    arr = np.zeros(1 + 2 * repeat, dtype=ENRICHED)
    arr["category"] = np.array(["ok"] * repeat + [text] + ["fine"] * repeat, dtype=object)
    for k in STRING_FIELDS[:-1]:
        arr[k] = ""
    msg = bytearray(codec.encode_batch("flow_enriched_batch", arr))
    at = bytes(msg).rfind(text.encode())
    msg[at] = 0xFF  # never valid in UTF-8
    for _ in every_path():
        with pytest.raises(codec.CodecError):
            codec.decode_batch(bytes(msg))


@pytest.mark.parametrize("longest", [5, 70, 300])
def test_negative_string_length_raises_codec_error(longest):
    """A 1-byte zig-zag length that is odd means a negative length: corrupt, whichever path reads it."""
    arr = np.zeros(40, dtype=ENRICHED)
    for k in STRING_FIELDS:
        arr[k] = ""
    arr["category"] = np.array(["y" * longest] + ["ab"] * 39, dtype=object)
    msg = bytearray(codec.encode_batch("flow_enriched_batch", arr))
    at = bytes(msg).rfind(b"\x04ab")
    msg[at] = 0x05  # zig-zag -3 (a reader that ignored the sign would consume exactly "ab")
    for _ in every_path():
        with pytest.raises(codec.CodecError):
            codec.decode_batch(bytes(msg))


def test_large_realistic_enriched_batch_roundtrips():
    rng = random.Random(1)
    names = [f"gpu-{r}{i:02d}-n{j}" for r in "ab" for i in range(30) for j in range(5)] + [""] * 40
    n = 20_000
    arr = np.zeros(n, dtype=ENRICHED)
    arr["time_start_ms"] = 1_719_835_200_000 + np.arange(n)
    arr["bytes"] = np.array([rng.randrange(0, 1 << 34) for _ in range(n)])
    for k in STRING_FIELDS:
        arr[k] = np.array([rng.choice(names) for _ in range(n)], dtype=object)
    arr["category"][::997] = "é" * 100  # a few 2-byte length prefixes: general path for that column
    msg = codec.encode_batch("flow_enriched_batch", arr)
    assert msg[codec.HEADER_LEN :] == fastavro_bytes("flow_enriched_batch", arr)
    assert_same(codec.decode_batch(msg), arr)


@pytest.mark.parametrize("batch,dtype", [("flow_batch", FLOW_DTYPE), ("flow_enriched_batch", ENRICHED)])
@pytest.mark.parametrize("n", [0, 1, 5000])
def test_empty_single_and_big_batches(batch, dtype, n):
    arr = np.zeros(n, dtype=dtype)
    if n:
        arr["bytes"] = np.arange(n) * 1_000_003
        arr["time_start_ms"] = 1_719_835_200_000 - np.arange(n)
        if dtype == ENRICHED:
            arr["src_node"] = np.array([f"n{i % 300}" for i in range(n)], dtype=object)
            for k in STRING_FIELDS[1:]:
                arr[k] = ""
    ref = fastavro_bytes(batch, arr)
    for _ in every_path():
        msg = codec.encode_batch(batch, arr)
        assert msg[codec.HEADER_LEN :] == ref
        assert_same(codec.decode_batch(msg), arr)


# --------------------------------------------------------------------------- corrupt input


def _valid_enriched_message() -> bytes:
    arr = np.zeros(40, dtype=ENRICHED)
    arr["bytes"] = np.arange(40) * 70_000
    arr["time_start_ms"] = 1_719_835_200_000 + np.arange(40)
    for i, k in enumerate(STRING_FIELDS):
        arr[k] = np.array([f"{k}-{j % 7}" * (1 + (i + j) % 3) if j % 5 else "" for j in range(40)], dtype=object)
    arr["category"][3] = "z" * 80
    return codec.encode_batch("flow_enriched_batch", arr)


VALID = _valid_enriched_message()


@settings(max_examples=200, deadline=None, suppress_health_check=RELAXED)
@given(
    edits=st.lists(st.tuples(st.integers(codec.HEADER_LEN, len(VALID) - 1), st.integers(0, 255)),
                   min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(codec.HEADER_LEN, len(VALID))),
)
def test_corrupted_messages_raise_codec_error_only(edits, cut):
    msg = bytearray(VALID)
    for at, value in edits:
        msg[at] = value
    msg = bytes(msg[:cut] if cut is not None else msg)
    outcomes = []
    for _ in every_path():
        try:
            out = codec.decode_batch(msg)
        except codec.CodecError:
            outcomes.append(None)
            continue
        assert out.dtype == ENRICHED  # some edits keep the message valid
        outcomes.append(out)
    if outcomes[0] is None or outcomes[1] is None:
        assert outcomes[0] is None and outcomes[1] is None  # both paths agree on what is corrupt
    else:
        assert_same(*outcomes)


@settings(max_examples=100, deadline=None, suppress_health_check=RELAXED)
@given(data=st.binary(max_size=300), kind=st.sampled_from(["flow_enriched_batch", "counter_batch"]))
def test_garbage_bodies_raise_codec_error_only(data, kind):
    for _ in every_path():
        try:
            codec.decode_batch(codec.header(kind) + data)
        except codec.CodecError:
            pass


# --------------------------------------------------------------------------- string columns from codes (StringTable)


def coded_batch(table: list, codes: np.ndarray) -> tuple[np.ndarray, dict]:
    """An enriched batch whose every string column is ``table[codes]`` (each column's codes rotated), and its codes."""
    tab = codec.StringTable(table)
    arr = np.zeros(len(codes), dtype=ENRICHED)
    coded = {}
    for j, k in enumerate(STRING_FIELDS):
        c = np.roll(codes, j)
        arr[k] = tab.strings[c] if len(c) else arr[k]
        coded[k] = (c, tab)
    return arr, coded


@settings(max_examples=150, deadline=None, suppress_health_check=RELAXED)
@given(table=st.lists(STRINGS, min_size=1, max_size=12), data=st.data())
def test_coded_string_columns_match_plain_encode(table, data):
    codes = np.array(data.draw(st.lists(st.integers(0, len(table) - 1), max_size=90)), dtype=np.intp)
    arr, coded = coded_batch(table, codes)
    for _ in every_path():
        assert codec.encode_batch("flow_enriched_batch", arr, coded) == codec.encode_batch("flow_enriched_batch", arr)


@pytest.mark.parametrize("table", [
    ["gpu-0001", "gpu-0002", "gpu-0003"],                      # one piece width: a plain row gather
    ["", "gpu-0001", "nfs-1", "collective", "é", "日本語"],      # mixed widths, empty and multi-byte UTF-8
    ["x" * 63, "y" * 64, "", "z" * 120],                         # 1- and 2-byte length prefixes in the row matrix
    ["", "w" * 200, "short"],                                    # wider than the row matrix: strings gathered
    [None, 7, "a"],                                              # normalised like the plain encoder
])  # fmt: skip
@pytest.mark.parametrize("n", [0, 1, 64, 65, 3000])
def test_coded_string_columns_edge_cases(table, n):
    codes = np.random.default_rng(n).integers(0, len(table), n)
    arr, coded = coded_batch(table, codes)
    msg = codec.encode_batch("flow_enriched_batch", arr, coded)
    assert msg == codec.encode_batch("flow_enriched_batch", arr)
    if all(isinstance(x, str) for x in table):  # fastavro writes str only
        assert msg[codec.HEADER_LEN :] == fastavro_bytes("flow_enriched_batch", arr)


def test_coded_string_columns_need_one_code_per_record():
    arr, coded = coded_batch(["a", "b"], np.array([0, 1, 1]))
    with pytest.raises(ValueError):
        codec.encode_batch("flow_enriched_batch", arr[:2], coded)


@pytest.mark.parametrize("middle", [False, True])
def test_equal_adjacent_long_columns_reuse_bytes_correctly(middle):
    """sFlow records carry one time in all four time fields; a column equal only at its ends is encoded itself."""
    n = 300
    arr = np.zeros(n, dtype=ENRICHED)
    t = 1_796_083_200_000 + np.sort(np.random.default_rng(5).integers(0, 100_000, n))
    for col in ("time_start_ms", "time_end_ms", "time_received_ms", "time_export_ms"):
        arr[col] = t
    if middle:
        arr["time_received_ms"][1:-1] += 1
    arr["packets_est"] = arr["ip_version"] = 4  # equal values in fields of different int types
    for k in STRING_FIELDS:
        arr[k] = ""
    for _ in every_path():
        msg = codec.encode_batch("flow_enriched_batch", arr)
        assert msg[codec.HEADER_LEN :] == fastavro_bytes("flow_enriched_batch", arr)
        assert_same(codec.decode_batch(msg), arr)  # decode reuses equal bytes of the column before


@settings(max_examples=60, deadline=None, suppress_health_check=RELAXED)
@given(col=long_columns(max_n=30), seed=st.integers(0, 2**32), change=st.integers(-1, 29))
def test_equal_long_blocks_from_other_writers_decode(col, seed, change):
    """Adjacent long fields with equal values in blocks of any layout (a block is reused only on equal bytes)."""
    arr = np.zeros(len(col), dtype=COUNTER_DTYPE)
    for name in ("in_octets", "in_ucast_pkts", "in_mcast_pkts", "in_bcast_pkts", "out_octets"):
        arr[name] = col
    if 0 <= change < len(col):
        arr["in_ucast_pkts"][change] += 1
    msg = other_writer("counter_batch", arr, random.Random(seed), pad_varints=bool(seed & 1))
    for _ in every_path():
        assert_same(codec.decode_batch(msg), arr)


@settings(max_examples=40, deadline=None, suppress_health_check=RELAXED)
@given(data=st.data(), seed=st.integers(0, 2**32), other=st.booleans())
def test_enriched_batch_copies_the_flow_fields_of_the_raw_message(data, seed, other):
    """``decode_batch(spans=)`` + ``field_encodings``: the enriched message of a raw message's rows copies its
    flow fields; from our writer that is byte for byte the plain encoding, from another writer (blocks, padded
    varints) it decodes to the same records."""
    n = data.draw(st.integers(1, 40))
    flows = np.zeros(n, dtype=FLOW_DTYPE)
    for name in ("bytes", "packets", "time_start_ms", "time_end_ms", "src_port", "sampling_rate"):
        flows[name] = np.resize(data.draw(long_columns(max_n=n)), n)
    flows["src_addr"] = np.frombuffer(random.Random(seed).randbytes(16 * n), dtype=np.uint8).reshape(n, 16)
    raw = other_writer("flow_batch", flows, random.Random(seed), pad_varints=True) if other else codec.encode_batch("flow_batch", flows)
    spans: dict = {}
    decoded = codec.decode_batch(raw, spans=spans)
    assert_same(decoded, flows)
    assert list(spans) == list(FLOW_DTYPE.names)
    assert b"".join(raw[a:b] for a, b in spans.values()) == raw[codec.HEADER_LEN :]
    copied = codec.field_encodings(raw, spans, "flow_enriched_batch")
    assert set(copied) == set(FLOW_DTYPE.names)
    enriched = np.zeros(n, dtype=ENRICHED)
    for name in FLOW_DTYPE.names:
        enriched[name] = decoded[name]
    for k in STRING_FIELDS:
        enriched[k] = "gpu-a01"
    plain = codec.encode_batch("flow_enriched_batch", enriched)
    msg = codec.encode_batch("flow_enriched_batch", enriched, verbatim=copied)
    if not other:
        assert msg == plain
    assert_same(codec.decode_batch(msg), enriched)


def test_field_encodings_only_of_fields_with_the_same_item_type():
    flows = np.zeros(3, dtype=FLOW_DTYPE)
    raw = codec.encode_batch("flow_batch", flows)
    spans: dict = {}
    codec.decode_batch(raw, spans=spans)
    assert codec.field_encodings(raw, spans, "flow_batch").keys() == set(FLOW_DTYPE.names)
    # counter_batch shares exporter_addr (fixed16) and time_received_ms (long) with flow_batch, nothing else
    shared = {f for f, kind in codec._plan("counter_batch") if dict(codec._plan("flow_batch")).get(f) == kind}
    assert codec.field_encodings(raw, spans, "counter_batch").keys() == shared


def test_coded_rows_takes_the_same_rows_of_every_field():
    from schemas.codec import StringTable, coded_rows

    t = StringTable(["", "a", "b"])
    coded = {"x": (np.array([0, 1, 2, 1]), t), "y": (np.array([2, 2, 1, 0]), t)}
    assert coded_rows(None, slice(0, 2)) is None
    part = coded_rows(coded, np.array([True, False, True, True]))
    assert {k: v[0].tolist() for k, v in part.items()} == {"x": [0, 2, 1], "y": [2, 1, 0]}
    assert all(v[1] is t for v in part.values())
    span = coded_rows(coded, slice(1, 3))
    assert {k: v[0].tolist() for k, v in span.items()} == {"x": [1, 2], "y": [2, 1]}
