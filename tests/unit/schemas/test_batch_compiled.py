"""The compiled batch walk (schemas.codec.decode_batch) against the readable reference (schemas.reference.batch):
same rows, same spans, same errors, on the golden captures' records and on fuzzed messages of every batch."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.decode import DecodeError, TemplateCache, decode
from ingest.pcapread import read_udp
from schemas import codec, varint
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, concat_rows, dtype_for, empty_flows
from schemas.reference.batch import decode_batch as decode_batch_reference
from tests.support.fixtures_path import SHARED_FIXTURES

# exporters' output (a capture named as its folder; the others there are the traffic they were fed)
CAPTURES = sorted((SHARED_FIXTURES / "exports").glob("*.pcap")) + sorted(
    p for p in (Path(__file__).resolve().parents[2] / "captures").glob("*/*.pcap") if p.stem == p.parent.name)


ENRICHED = dtype_for("flow_enriched")


def _both(msg: bytes):
    """(the reference's outcome, decode_batch's outcome): rows and spans, or the CodecError text."""
    out = []
    for decode in (decode_batch_reference, codec.decode_batch):
        spans: dict = {}
        try:
            out.append((decode(msg, spans=spans), spans))
        except codec.CodecError as e:
            out.append(str(e))
    return out


def _assert_same(msg: bytes) -> bool:
    """Both decoders agree on ``msg``; True when it decoded (False: both raised the same CodecError)."""
    ref, got = _both(msg)
    if isinstance(ref, str):
        assert got == ref
        return False
    assert not isinstance(got, str), got
    assert got[0].dtype == ref[0].dtype
    if got[0].dtype.hasobject:
        assert all(np.array_equal(got[0][f], ref[0][f]) for f in got[0].dtype.names)
        assert all(type(x) is str for f in got[0].dtype.names if got[0].dtype[f] == object for x in got[0][f])
    else:
        assert got[0].tobytes() == ref[0].tobytes()
    assert got[1] == ref[1]
    return True


def _capture_rows(path: Path) -> tuple[np.ndarray, np.ndarray]:
    templates = TemplateCache()
    flows, counters = [], []
    for i, p in enumerate(read_udp(path)):
        try:
            r = decode(p.payload, p.src_ip, 1_700_000_000_000 + i, templates)
        except DecodeError:
            continue
        flows.append(r.flows)
        counters.append(r.counters)
    return concat_rows(flows) if flows else empty_flows(0), concat_rows(counters) if counters else np.zeros(0, COUNTER_DTYPE)


def test_compiled_walk_decodes_every_batch_and_every_earlier_writer():
    """One decoder for all: the raw batches, the enriched one (strings) and batches of earlier schema versions."""
    from schemas.registry import _history

    for name in codec.BATCHES:
        assert codec.batch_plan(codec.header(name) + b"")[0] == name
    old = [(name, fp) for fp, (name, _w) in _history().items() if name in codec.BATCHES]
    assert old
    for name, fp in old:
        assert codec.batch_plan(codec.MAGIC + fp)[0] == name


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.stem)
def test_golden_capture_batches_identical(path):
    if not path.exists():
        pytest.skip(f"{path.name} not present")
    flows, counters = _capture_rows(path)
    assert len(flows) + len(counters) > 0
    for name, rows in (("flow_batch", flows), ("counter_batch", counters)):
        for size in (4096, 7, 1):  # whole batches as ingest writes them, and short ones
            for i in range(0, min(len(rows), 40 * size), size):
                assert _assert_same(codec.encode_batch(name, rows[i : i + size])), (name, size, i)


def test_empty_batches_identical():
    for name, dtype in (("flow_batch", FLOW_DTYPE), ("counter_batch", COUNTER_DTYPE)):
        assert _assert_same(codec.encode_batch(name, np.zeros(0, dtype=dtype)))


def test_multi_block_arrays_identical():
    """Several blocks per array, negative counts with a byte size: both walks read them alike."""
    rng = np.random.default_rng(5)
    arr = empty_flows(9)
    for f in ("bytes", "packets", "src_port", "time_start_ms", "in_if"):
        arr[f] = rng.integers(-(2**31), 2**31 - 1, 9)
    arr["src_addr"] = rng.integers(0, 256, (9, 16), dtype=np.uint8)
    parts = [codec.header("flow_batch")]
    for name, kind in codec._plan("flow_batch"):
        col = arr[name]
        pieces = (col[:2], col[2:3], col[3:])
        for k, piece in enumerate(pieces):
            body = varint.varint_bytes(varint.zigzag(piece.astype(np.int64))) if kind == "long" else piece.tobytes()
            if k == 1:
                parts += [varint.encode_long(-len(piece)), varint.encode_long(len(body)), body]
            else:
                parts += [varint.encode_long(len(piece)), body]
        parts.append(b"\x00")
    msg = b"".join(parts)
    assert _assert_same(msg)
    assert codec.decode_batch(msg).tobytes() == arr.tobytes()


def test_values_wider_than_the_column_wrap_alike():
    """A long that does not fit an int32 column: both walks keep its low 32 bits (numpy's unsafe cast)."""
    arr = empty_flows(3)
    msg = codec.encode_batch("flow_batch", arr)
    spans: dict = {}
    decode_batch_reference(msg, spans=spans)
    a, b = spans["src_port"]
    wide = varint.encode_long(3) + varint.varint_bytes(varint.zigzag(np.array([2**40 + 5, -(2**35) - 1, 2**63 - 1]))) + b"\x00"
    msg = msg[:a] + wide + msg[b:]
    assert _assert_same(msg)
    assert codec.decode_batch(msg)["src_port"].tolist() == [5, -1, -1]


_TEXTS = ["", "gpu-a01-n03", "collective", "é", "x" * 70, "žluťoučký kůň", "\U0001F600" * 20]


def _message(data) -> bytes:
    n = data.draw(st.integers(0, 12))
    name = data.draw(st.sampled_from(["flow_batch", "counter_batch", "flow_enriched_batch"]))
    dtype = {"flow_batch": FLOW_DTYPE, "counter_batch": COUNTER_DTYPE, "flow_enriched_batch": ENRICHED}[name]
    arr = np.zeros(n, dtype=dtype)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for f in dtype.names:
        dt = dtype[f]
        if dt == object:
            arr[f] = np.array([_TEXTS[i] for i in rng.integers(0, len(_TEXTS), n)] + [None], dtype=object)[:n]
        elif dt.shape == (16,):
            arr[f] = rng.integers(0, 256, (n, 16), dtype=np.uint8)
        elif dt.kind == "b":
            arr[f] = rng.integers(0, 2, n).astype(bool)
        else:
            bits = data.draw(st.sampled_from([6, 13, 31, 62]))
            arr[f] = rng.integers(-(2**bits), 2**bits, n)
    return codec.encode_batch(name, arr)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_messages_identical(data):
    msg = bytearray(_message(data))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete", "append", "continue"]))
        at = data.draw(st.integers(codec.HEADER_LEN, max(codec.HEADER_LEN, len(msg) - 1)))
        if op == "flip" and at < len(msg):
            msg[at] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del msg[at:]
        elif op == "insert":
            msg[at:at] = data.draw(st.binary(min_size=1, max_size=12))
        elif op == "append":
            msg += data.draw(st.binary(min_size=1, max_size=4))
        elif op == "continue":  # continuation bits: longer varints, up to over 10 bytes
            msg[at:at] = b"\x80" * data.draw(st.integers(1, 11))
        elif at < len(msg):
            del msg[at : at + data.draw(st.integers(1, 12))]
    _assert_same(bytes(msg))


@settings(max_examples=300, deadline=None)
@given(tail=st.binary(max_size=300), name=st.sampled_from(["flow_batch", "counter_batch", "flow_enriched_batch"]))
def test_garbage_identical(tail, name):
    _assert_same(codec.header(name) + tail)


def test_trailing_bytes_and_overlong_varints_rejected_alike():
    msg = codec.encode_batch("flow_batch", empty_flows(2))
    for tail in (b"\x00", b"\x01\x02"):
        ref, got = _both(msg + tail)
        assert ref == got and "trailing" in ref
    spans: dict = {}
    decode_batch_reference(msg, spans=spans)
    a, b = spans["bytes"]
    for width in (10, 11):  # 10 bytes is the longest varint; 11 is corrupt
        varint_ = b"\xff" * (width - 1) + b"\x01"
        bad = msg[:a] + varint.encode_long(2) + varint_ + b"\x02" + b"\x00" + msg[b:]
        ref, got = _both(bad)
        assert isinstance(ref, str) == (width == 11)
        _assert_same(bad)


def test_block_count_of_minus_2_to_the_63_rejected_alike():
    """Found by fuzzing (tests/fuzz/regressions/codec): a negative block count whose magnitude is 2**63 (the
    zig-zag varint ff..ff 01) was named -9223372036854775808 in the compiled walk's error, 2**63 by the
    reference; the error now gives the count the message says."""
    msg = codec.encode_batch("flow_batch", empty_flows(1))
    first = codec.HEADER_LEN
    bad = msg[:first] + b"\xff" * 9 + b"\x01" + b"\x02" + msg[first:]
    ref, got = _both(bad)
    assert ref == got == f"{codec.batch_plan(bad)[1][0][0]}: block count {2**63} larger than the message"


def test_truncated_at_every_length_identical():
    rng = np.random.default_rng(9)
    arr = empty_flows(6)
    arr["bytes"] = rng.integers(0, 2**40, 6)
    arr["dst_addr"] = rng.integers(0, 256, (6, 16), dtype=np.uint8)
    msg = codec.encode_batch("flow_batch", arr)
    for cut in range(codec.HEADER_LEN, len(msg) + 1):
        _assert_same(msg[:cut])


def test_enriched_truncated_at_every_length_identical():
    arr = np.zeros(5, dtype=ENRICHED)
    arr["bytes"] = [1, 2**40, -3, 0, 7]
    for i, f in enumerate(f for f in ENRICHED.names if ENRICHED[f] == object):
        arr[f] = np.array([_TEXTS[(i + j) % len(_TEXTS)] for j in range(5)], dtype=object)
    msg = codec.encode_batch("flow_enriched_batch", arr)
    assert _assert_same(msg)
    for cut in range(codec.HEADER_LEN, len(msg) + 1):
        _assert_same(msg[:cut])


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"])
@pytest.mark.parametrize("n", [3, 100])  # a few strings, and a column long enough for the dictionary path
def test_invalid_utf8_rejected_alike(bad, n):
    """Bytes Python's UTF-8 decoder refuses (stray, overlong, surrogate, past U+10FFFF, cut) are refused alike."""
    arr = np.zeros(n, dtype=ENRICHED)
    for f in (f for f in ENRICHED.names if ENRICHED[f] == object):
        arr[f] = "ok"
    arr["category"] = np.array(["abcd"] * n, dtype=object)
    msg = codec.encode_batch("flow_enriched_batch", arr)
    at = msg.rfind(b"abcd")
    bad_msg = msg[:at] + bad + b"z" * (4 - len(bad)) + msg[at + 4 :]
    ref, got = _both(bad_msg)
    assert isinstance(ref, str) and "invalid UTF-8" in ref and got == ref


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=9, max_size=300), st.sampled_from([np.int64, np.int32, np.uint32]))
def test_compiled_long_column_encoder_writes_the_numpy_encoders_bytes(values, dtype):
    """schemas._batch_compiled.zigzag_varints (what encode_long_column uses) against the numpy (SWAR) encoder,
    and both against fastavro's reading of them: every width, negative values, int64's ends, strided columns."""
    col = np.array(values, dtype=np.int64).astype(dtype)
    for c in (col, col[::2]):
        if len(c) <= 8:
            continue
        body = varint.encode_long_column(c)
        assert body == varint.encode_long_column_numpy(c)
        pos, got = 0, []
        for _ in range(len(c)):
            v, pos = varint.read_long(body, pos, "x")
            got.append(v)
        assert pos == len(body) and got == c.astype(np.int64).tolist()
