"""Avro string columns: encode and decode whole columns of UTF-8 strings.

Encode: pyarrow converts the object column to one UTF-8 buffer plus offsets;
the zig-zag varint of every length is interleaved in front of its bytes with
numpy. A column gathered from a small table (the enriched label columns) is
encoded from its codes by a :class:`StringTable` instead (same bytes).
Decode: the length prefixes are walked to find where each string starts; the
column's bytes are then viewed as an Arrow array, UTF-8 validated and turned
into str objects by pyarrow. A few strings, or corrupt input, go one at a
time, which names the error (``CodecError``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .registry import CodecError
from .varint import Message, read_long, varint, varint_bytes, varint_widths

__all__ = ["StringTable", "decode_strings", "encode_strings", "utf8_buffers"]

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


# Step from a string's start to the next one when its length prefix is the single byte b (< 0x80, even).
_SHORT_STEP = [1 + (b >> 1) for b in range(256)]


def _walk_short_strings(raw, pos: int, count: int) -> list[int] | None:
    """Start positions of ``count`` strings (plus the end) assuming 1-byte length prefixes; None if out of bounds.

    The caller checks afterwards that every prefix really was one byte (< 0x80) and even.
    """
    starts = [0] * (count + 1)
    step = _SHORT_STEP
    try:
        for i in range(count):
            starts[i] = pos
            pos += step[raw[pos]]
    except IndexError:
        return None
    starts[count] = pos
    return starts


def _decode_strings_fast(m: Message, pos: int, count: int) -> tuple[np.ndarray, int] | None:
    walked = _walk_short_strings(m.raw, pos, count)
    if walked is None:
        return None
    end = walked[-1]
    if end > len(m.buf) or end - pos >= 2**31:
        return None
    starts = np.fromiter(walked, dtype=np.int64, count=count + 1)
    heads = m.buf[starts[:-1]]
    if int(heads.max()) >= 0x80 or (heads & 1).any():  # not a 1-byte non-negative length: general path
        return None
    offs = (starts - pos).astype(np.int32)
    region = pa.py_buffer(memoryview(m.raw)[pos:end])
    pieces = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offs), region])
    return _texts(pieces), end


def _texts(pieces: pa.Array) -> np.ndarray:
    """Object array of str from (1 length byte + UTF-8 text) pieces; UTF-8 validated.

    Enrichment columns repeat a few hundred names: through a dictionary, one str
    object is made per distinct value (cheaper, and equal names share one object
    with its cached hash). High-cardinality columns skip the dictionary.
    """
    try:
        d = pieces.dictionary_encode()
        if 4 * len(d.dictionary) > len(pieces):
            return pc.binary_slice(pieces, 1, 1 << 30).cast(pa.string()).to_numpy(zero_copy_only=False)
        texts = pc.binary_slice(d.dictionary, 1, 1 << 30).cast(pa.string()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        raise CodecError("invalid UTF-8 in a string column") from None
    return texts.take(d.indices.to_numpy())


def _decode_strings_any(m: Message, pos: int, count: int) -> tuple[np.ndarray, int] | None:
    """Strings with any length prefixes (long strings, other writers); None if the walk fails."""
    raw = m.raw
    size = len(raw)
    heads = [0] * count  # where each length prefix starts
    texts = [0] * count  # where each string's bytes start
    p = pos
    try:
        for i in range(count):
            heads[i] = p
            c = raw[p]
            if c < 0x80:
                if c & 1:
                    return None
                p += 1
                texts[i] = p
                p += c >> 1
            else:
                ln, p = read_long(raw, p)
                if ln < 0:
                    return None
                texts[i] = p
                p += ln
    except (IndexError, CodecError):
        return None
    if p > size or p - pos >= 2**31:
        return None
    h = np.fromiter(heads, dtype=np.int64, count=count)
    t = np.fromiter(texts, dtype=np.int64, count=count)
    w = t - h  # prefix widths
    is_text = np.ones(p - pos, dtype=bool)
    before = np.cumsum(w) - w
    is_text[np.repeat(h - pos - before, w) + np.arange(int(before[-1] + w[-1]))] = False
    offs = np.empty(count + 1, dtype=np.int32)
    offs[0] = 0
    np.cumsum(np.diff(np.append(h, p)) - w, out=offs[1:])  # string lengths
    data = m.buf[pos:p][is_text]
    strs = pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    try:
        strs.validate(full=True)
    except pa.ArrowInvalid:
        raise CodecError("invalid UTF-8 in a string column") from None
    return strs.to_numpy(zero_copy_only=False), p


def decode_strings(m: Message, pos: int, count: int, fname: str) -> tuple[np.ndarray, int]:
    """(``count`` strings from ``pos`` as an object array, the position after them); ``CodecError`` names ``fname``."""
    if count > _SMALL_STRINGS:
        done = _decode_strings_fast(m, pos, count) or _decode_strings_any(m, pos, count)
        if done is not None:
            return done
    # a few strings, or corrupt input: one at a time, with the precise error
    mv = memoryview(m.raw)
    out = np.empty(count, dtype=object)
    for i in range(count):
        ln, pos = read_long(mv, pos)
        if ln < 0 or pos + ln > len(mv):
            raise CodecError(f"{fname}: bad string length")
        try:
            out[i] = str(mv[pos : pos + ln], "utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"{fname}: invalid UTF-8") from None
        pos += ln
    return out, pos
