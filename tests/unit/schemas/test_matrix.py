"""schemas.matrix: the matrix.windows.v2 codec (round trip, fastavro's bytes, empty and big windows, malformed
messages raise only CodecError, the docs' plain-fastavro snippet)."""

from __future__ import annotations

import io
import json
import re

import fastavro
import numpy as np
import pytest

from schemas import codec
from schemas.columns import AVRO_DIR
from schemas.matrix import LEVELS, SCHEMA, VALUE_FIELDS, MatrixWindow, decode_cells, decode_window, encode_window
from schemas.registry import HEADER_LEN, parsed
from tests.support.fixtures_path import REPO


def window(n: int, seed: int = 0, level: str = "node", names: int = 50) -> MatrixWindow:
    rng = np.random.default_rng(seed)
    labels = np.array(sorted({f"gpu-{i}" for i in range(names)} | {"unknown", "collective", "storage"}), dtype=object)
    codes = lambda: rng.integers(0, len(labels), n).astype(np.int32)  # noqa: E731
    values = {f: rng.integers(0, 1 << 40, n, dtype=np.int64) for f in VALUE_FIELDS}
    values["syn_packets_est"][: n // 2] = 0
    return MatrixWindow(1_800_000_000_000, 1_800_000_010_000, level, 3, labels, codes(), codes(), codes(), values, 0)


def fastavro_bytes(w: MatrixWindow) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed(SCHEMA), w.to_record())
    return codec.header(SCHEMA) + buf.getvalue()


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_round_trip_and_the_bytes_fastavro_writes(n):
    w = window(n, seed=n, level=LEVELS[n % 3])
    msg = encode_window(w)
    assert msg == fastavro_bytes(w)
    got = decode_window(msg)
    assert got == w and got.to_record() == w.to_record()
    assert got.src.dtype == np.int32 and all(got.values[f].dtype == np.int64 for f in VALUE_FIELDS)
    # fastavro reads what we write, and we read what fastavro writes (the same bytes, checked above)
    assert fastavro.schemaless_reader(io.BytesIO(msg[HEADER_LEN:]), parsed(SCHEMA)) == w.to_record()


def test_empty_window():
    w = MatrixWindow(0, 10_000, "group", 0, [], np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                     {f: np.zeros(0, np.int64) for f in VALUE_FIELDS})
    got = decode_window(encode_window(w))
    assert len(got) == 0 and got.cells() == [] and list(got.labels) == [] and got.level == "group"


def test_big_window_round_trips_byte_for_byte():
    w = window(200_000, seed=5, names=3000)
    msg = encode_window(w)
    assert msg == fastavro_bytes(w)
    got = decode_window(msg)
    assert all(np.array_equal(got.values[f], w.values[f]) for f in VALUE_FIELDS)
    assert np.array_equal(got.src, w.src) and np.array_equal(got.category, w.category)
    assert len(msg) < 100 * len(w)  # columns: a varint per cell and column (40-bit values here: 6 bytes)


def test_cells_are_the_v1_cells():
    cells = [{"window_start_ms": 0, "window_end_ms": 10_000, "level": "rack", "src": s, "dst": d, "category": c,
              **{f: i * 10 + k for k, f in enumerate(VALUE_FIELDS)}}
             for i, (s, d, c) in enumerate([("r1", "r2", "collective"), ("r2", "r1", "storage"), ("unknown", "r1", "r1")])]
    w = MatrixWindow.from_cells(cells, shard=2)
    assert list(w.labels) == ["collective", "r1", "r2", "storage", "unknown"]  # sorted, each name once
    assert decode_window(encode_window(w)).cells() == cells
    assert decode_cells(encode_window(w)) == cells
    assert decode_cells(codec.encode_record("matrix_cell", cells[0])) == [cells[0]]  # v1 reads too
    assert w.key() == "0|rack|2" and MatrixWindow.from_cells(cells, 2, part=1).key() == "0|rack|2|1"


def _malformed(msg: bytes) -> list[bytes]:
    out = [msg[:cut] for cut in range(HEADER_LEN, len(msg))]  # every truncation
    out.append(msg + b"\x00")  # trailing bytes
    return out


def test_malformed_messages_raise_only_codec_errors():
    w = window(40, seed=2)
    msg = encode_window(w)
    for bad in _malformed(msg):
        with pytest.raises(codec.CodecError):
            decode_window(bad)
    rng = np.random.default_rng(9)
    for _ in range(300):  # random corruption: a valid window or a CodecError, never another exception
        b = bytearray(msg)
        for i in rng.integers(HEADER_LEN, len(b), 3):
            b[i] = int(rng.integers(0, 256))
        try:
            got = decode_window(bytes(b))
        except codec.CodecError:
            continue
        assert all(int(getattr(got, f).max(initial=0)) < len(got.labels) for f in ("src", "dst", "category"))


def test_codes_outside_the_table_level_and_schema_are_rejected():
    w = window(5)
    w.dst = w.dst.copy()
    w.dst[2] = len(w.labels)
    with pytest.raises(codec.CodecError, match="dst: label code outside"):
        decode_window(encode_window(w))
    bad_level = bytearray(encode_window(window(3)))
    pos = HEADER_LEN + len(codec.encode_long(1_800_000_000_000)) + len(codec.encode_long(1_800_000_010_000))
    bad_level[pos] = 2 * 7  # enum index 7
    with pytest.raises(codec.CodecError, match="level"):
        decode_window(bytes(bad_level))
    with pytest.raises(codec.CodecError, match="expected matrix_window_v2"):
        decode_window(codec.encode_record("matrix_cell", window(1).cells()[0]))
    with pytest.raises(codec.CodecError):
        decode_window(b"junk")
    assert codec.error_reason(_err(lambda: decode_window(codec.encode_record("matrix_cell", window(1).cells()[0])))) \
        == "wrong_schema"


def _err(fn) -> Exception:
    try:
        fn()
    except Exception as e:
        return e
    raise AssertionError("no error")


def test_the_docs_plain_fastavro_snippet_reads_a_message():
    doc = (REPO / "docs" / "schemas.md").read_text()
    section = doc[doc.index("## matrix.windows.v2"):]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    w = window(30, seed=4)
    message = encode_window(w)
    scope = {"message": message, "open": lambda p: open(AVRO_DIR.parent.parent / p)}
    exec(snippet, scope)
    want = [(c["src"], c["dst"], c["category"], c["bytes_est"]) for c in w.cells()]
    assert scope["cells"] == want


def test_schema_value_columns_are_the_matrix_cell_ones():
    cell = json.loads((AVRO_DIR / "matrix_cell.avsc").read_text())
    names = [f["name"] for f in cell["fields"]]
    assert list(VALUE_FIELDS) == names[6:]
    from processors.logic.windows.matrix import VALUE_COLUMNS

    assert tuple(VALUE_COLUMNS) == VALUE_FIELDS
