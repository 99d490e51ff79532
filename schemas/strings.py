"""Avro string columns: encode whole columns of UTF-8 strings, and make the str objects of decoded ones.

Encode: pyarrow converts the object column to one UTF-8 buffer plus offsets;
the zig-zag varint of every length is interleaved in front of its bytes with
numpy. A column gathered from a small table (the enriched label columns) is
encoded from its codes by a :class:`StringTable` instead (same bytes).
Decode: the compiled column walk (:mod:`schemas._batch_compiled`) validates
and gathers each string column's UTF-8; :func:`decode_texts` makes the objects.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fabricflow.compiled import load

from .varint import varint, varint_bytes, varint_widths

__all__ = ["StringTable", "decode_texts", "encode_strings", "utf8_buffers"]

_texts_one_by_one = load("schemas._batch_compiled").texts

# Columns of at most this many strings are coded one string at a time (less fixed cost than pyarrow calls).
_SMALL_STRINGS = 64
# StringTable: longest piece (length prefix + UTF-8) kept in its padded row matrix.
_TABLE_WIDTH = 128


def _text(x) -> str:
    """A string column value as written: None -> "", other non-str objects -> str(x)."""
    return "" if x is None else x if isinstance(x, str) else str(x)


def _string_array(col: np.ndarray) -> pa.Array:
    """Column as an Arrow string array, values normalised as by :func:`_text`."""
    try:
        a = pa.array(col, from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        a = None
    if a is None or not (a.type == pa.string() or a.type == pa.null()):
        a = pa.array([_text(x) for x in col.tolist()], pa.string())
    return a.cast(pa.string()) if a.type == pa.null() else a


def utf8_buffers(a: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 start of every string and the end, from 0; the UTF-8 bytes) of an Arrow string array."""
    _, offs_buf, data_buf = a.buffers()
    offs = np.frombuffer(offs_buf, dtype=np.int32, count=len(a) + 1, offset=4 * a.offset).astype(np.int64)
    o0, o1 = int(offs[0]), int(offs[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8, count=o1 - o0, offset=o0) if o1 > o0 else np.zeros(0, np.uint8)
    return offs - o0, data


def encode_strings(col: np.ndarray) -> bytes:
    """Avro array items (no block count) of a string column: each value's zig-zag length, then its UTF-8."""
    n = len(col)
    if n <= _SMALL_STRINGS:  # the same normalisation as _string_array, one string at a time
        out = []
        for x in col.tolist():
            b = _text(x).encode()
            out += (varint(len(b) << 1), b)
        return b"".join(out)
    offs, data = utf8_buffers(_string_array(col))
    z = np.diff(offs) << 1  # zig-zag of the (non-negative) lengths; nulls have length 0
    zmax = int(z.max())
    if zmax < 0x80:  # 1-byte length prefixes
        heads = z.astype(np.uint8)
        hpos = offs[:-1] + np.arange(n)
    else:
        heads = np.frombuffer(varint_bytes(z.view(np.uint64), None, zmax), dtype=np.uint8)
        w = varint_widths(z, zmax)
        before = np.cumsum(w) - w  # prefix bytes before string i
        first = offs[:-1] + before  # position of string i's first prefix byte
        hpos = np.repeat(first - before, w) + np.arange(len(heads))
    out = np.empty(len(heads) + len(data), dtype=np.uint8)
    is_data = np.ones(len(out), dtype=bool)
    is_data[hpos] = False
    out[hpos] = heads
    out[is_data] = data
    return out.tobytes()


class StringTable:
    """A few distinct strings, each encoded once; a column of them is encoded from its codes.

    ``encode(codes)`` is byte for byte ``encode_strings(strings[codes])`` (the
    label columns of enriched flows are gathers from small per-inventory
    tables). Each string's piece (zig-zag varint length + UTF-8) is a row of a
    zero-padded byte matrix: a column is one row gather, minus the padding
    (a boolean mask gathered the same way) unless every piece has one width.
    Tables with a string too long for the matrix gather the strings instead.
    The table keeps its own copy of the strings.
    """

    __slots__ = ("strings", "_rows", "_keep")

    def __init__(self, strings):
        self.strings = np.array(strings, dtype=object).reshape(-1)
        pieces = [varint(len(b) << 1) + b for b in (_text(x).encode() for x in self.strings.tolist())]
        width = max(map(len, pieces), default=0)
        self._rows = self._keep = None
        if width <= _TABLE_WIDTH:
            lens = np.array([len(p) for p in pieces], dtype=np.int64)
            padded = b"".join([p.ljust(width, b"\0") for p in pieces])
            self._rows = np.frombuffer(padded, dtype=np.uint8).reshape(len(pieces), width)
            if len(pieces) and int(lens.min()) < width:
                self._keep = np.arange(width) < lens[:, None]

    def encode(self, codes: np.ndarray) -> bytes:
        """Avro array items (no block count) of the column ``strings[codes]``."""
        if self._rows is None:
            return encode_strings(self.strings.take(codes))
        m = self._rows.take(codes, axis=0)
        return m.tobytes() if self._keep is None else m[self._keep.take(codes, axis=0)].tobytes()


def decode_texts(text: np.ndarray, offs: np.ndarray, n: int) -> np.ndarray:
    """Object array of the ``n`` strings ``text[offs[i]:offs[i + 1]]`` (UTF-8 the compiled walk validated).

    Enrichment columns repeat a few hundred names: through an Arrow dictionary, one str object is made per
    distinct value (cheaper, and equal names share one object with its cached hash). Few strings, or
    high-cardinality columns, are made one by one.
    """
    if n <= _SMALL_STRINGS:
        return _texts_one_by_one(text, offs, n)
    strs = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offs), pa.py_buffer(text)])
    d = strs.dictionary_encode()
    if 4 * len(d.dictionary) > n:
        return _texts_one_by_one(text, offs, n)
    return d.dictionary.to_numpy(zero_copy_only=False).take(d.indices.to_numpy())
