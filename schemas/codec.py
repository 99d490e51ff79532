"""The one Kafka wire codec: Avro single-object encoding, columnar batches.

Framing (decided once, documented in docs/schemas.md): every message value is
Avro *single-object encoding* from the Avro specification:

    C3 01 | 8-byte CRC-64-AVRO fingerprint of the writer schema | Avro binary

so any ordinary Avro library can identify the schema without a registry
(Java: ``BinaryMessageDecoder``; Python: strip 10 bytes, look the fingerprint
up among ``schemas/avro/*.avsc``, ``fastavro.schemaless_reader``).

Flow records and counter samples travel as *batches*: one Avro record whose
fields are arrays, one element per record (``FlowBatch``, ``CounterBatch``,
``EnrichedFlowBatch``: derived from ``flow_record.avsc`` etc. and written to
``schemas/avro/*_batch.avsc``). A per-record Avro object costs ~5-10 us in
Python; a columnar batch is encoded and decoded here a whole column at a time
(numpy for zig-zag varints, pyarrow for UTF-8 string columns), byte-for-byte
identical to what fastavro writes (tests check both directions); the decoder
reads any valid Avro encoding of the batch schemas and raises only CodecError
on corrupt input. Detector outputs are low-volume and use fastavro directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from io import BytesIO

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from .columns import AVRO_DIR, dtype_for, load_avsc

MAGIC = b"\xc3\x01"
HEADER_LEN = 10

# Batch schema name -> per-record schema it is derived from.
BATCHES = {"flow_batch": "flow_record", "counter_batch": "counter_sample", "flow_enriched_batch": "flow_enriched"}
RECORD_SCHEMAS = ("matrix_cell", "incast_event", "straggler_score", "link_health", "alert", "summary_hourly", "pattern")


class CodecError(Exception):
    """A message that is not a fabricflow Avro single-object message."""


# --------------------------------------------------------------------------- schemas


def derive_batch_schema(record_name: str) -> dict:
    """Columnar batch schema: same fields as the record schema, each an array."""
    rec = load_avsc(record_name)
    batch_name = rec["name"].replace("Record", "") + "Batch" if rec["name"] == "FlowRecord" else rec["name"] + "Batch"
    fields = []
    named_seen: set[str] = set()
    for f in rec["fields"]:
        items = f["type"]
        if isinstance(items, dict) and items.get("type") == "fixed":
            full = items["name"]
            if full in named_seen:
                items = rec.get("namespace", "") + "." + full
            else:
                named_seen.add(full)
        elif isinstance(items, str) and "." in items:
            pass
        nf = {"name": f["name"], "type": {"type": "array", "items": items}}
        if "doc" in f:
            nf["doc"] = f["doc"]
        fields.append(nf)
    return {
        "type": "record",
        "name": batch_name,
        "namespace": rec.get("namespace", "fabricflow.v1"),
        "doc": f"Columnar batch of {rec['name']}: every field is an array with one element per record (all arrays have the same length).",
        "fields": fields,
    }


@cache
def schema_json(name: str) -> dict:
    if name in BATCHES:
        return derive_batch_schema(BATCHES[name])
    return load_avsc(name)


@cache
def parsed(name: str):
    return parse_schema(schema_json(name))


@cache
def schema_fingerprint(name: str) -> bytes:
    """8-byte CRC-64-AVRO fingerprint, in the byte order single-object encoding stores it."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed(name)), "CRC-64-AVRO"))


@cache
def _by_fingerprint() -> dict[bytes, str]:
    names = list(BATCHES) + [n for n in RECORD_SCHEMAS if (AVRO_DIR / f"{n}.avsc").exists()]
    return {schema_fingerprint(n): n for n in names}


def header(name: str) -> bytes:
    return MAGIC + schema_fingerprint(name)


def schema_of(message: bytes) -> str:
    """Name of the schema a message was written with."""
    if len(message) < HEADER_LEN or message[:2] != MAGIC:
        raise CodecError("not an Avro single-object message (missing C3 01 marker)")
    name = _by_fingerprint().get(bytes(message[2:HEADER_LEN]))
    if name is None:
        raise CodecError(f"unknown schema fingerprint {bytes(message[2:HEADER_LEN]).hex()}")
    return name


def write_batch_schemas(directory=AVRO_DIR) -> list[str]:
    """Write the derived ``*_batch.avsc`` files (for consumers in other languages)."""
    out = []
    for name in BATCHES:
        path = directory / f"{name}.avsc"
        path.write_text(json.dumps(schema_json(name), indent=2) + "\n")
        out.append(str(path))
    return out


# --------------------------------------------------------------------------- record codec (fastavro)


def encode_record(name: str, record: dict) -> bytes:
    buf = BytesIO()
    buf.write(header(name))
    fastavro.schemaless_writer(buf, parsed(name), record)
    return buf.getvalue()


def decode_record(message: bytes, expect: str | None = None) -> dict:
    name = schema_of(message)
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    try:
        return fastavro.schemaless_reader(BytesIO(message[HEADER_LEN:]), parsed(name), parsed(name))
    except Exception as e:  # fastavro raises many types on corrupt input
        raise CodecError(f"corrupt {name} message: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- vectorised varints
#
# Encode: zig-zag a whole column, count the bytes of every varint by comparing
# against the 7-bit-group thresholds, move the 7-bit groups of each value into
# consecutive bytes of one machine word with a few shift/mask steps (SWAR), set
# the continuation bits from a table indexed by the byte count, and keep the
# first ``count`` bytes of each word (a slice when every varint has the same
# width, else one ``np.compress``).
# Decode: a column of 1-byte varints is one table lookup per byte; a column
# of one width is recognised from its first varint; otherwise the terminating
# bytes (< 0x80) are found in a window sized for the column. 1-2 byte varints
# are a lookup of (byte before, last byte) in a 64 K-entry table; wider ones
# load the 8 bytes at each varint start as one little-endian word, mask it to
# the varint's length and pack the 7-bit groups back together (reverse SWAR).

_U64 = np.uint64
# Columns of at most this many values are coded in plain Python (less fixed cost than numpy calls);
# string columns up to _SMALL_STRINGS (pyarrow calls cost ~15-30 us each column; measured crossover 55-80).
_SMALL = 8
_SMALL_STRINGS = 64
# StringTable: longest piece (length prefix + UTF-8) kept in its padded row matrix.
_TABLE_WIDTH = 128
# _LIMIT[k]: smallest value whose varint has more than k bytes (k = 1..9).
_LIMIT = [0] + [1 << (7 * k) for k in range(1, 10)]
# container bytes -> (dtype, [(keep mask, move mask, shift)]) for spreading 7-bit groups into bytes
_SPREAD = {
    2: (np.uint16, [(0x7F, 0x3F80, 1)]),
    4: (np.uint32, [(0x3FFF, 0x0FFFC000, 2), (0x007F007F, 0x3F803F80, 1)]),
    8: (np.uint64, [(0x0FFFFFFF, 0x00FFFFFFF0000000, 4), (0x00003FFF00003FFF, 0x0FFFC0000FFFC000, 2),
                    (0x007F007F007F007F, 0x3F803F803F803F80, 1)]),
}  # fmt: skip
_SPREAD = {c: (dt, [(dt(k), dt(m), dt(s)) for k, m, s in steps]) for c, (dt, steps) in _SPREAD.items()}
# container bytes -> continuation bits of a varint of 0..10 bytes (bytes 0..c-1 only)
_CONT = {c: np.array([sum(0x80 << (8 * j) for j in range(min(w - 1, c))) for w in range(11)], dtype=dt)
         for c, (dt, _) in _SPREAD.items()}  # fmt: skip
# varint width w -> (11, w) table: row k keeps the first k bytes
_KEEP = {w: np.arange(w)[None, :] < np.arange(11)[:, None] for w in range(1, 11)}
# decode: row k masks the 7-bit payload of the first min(k, 8) bytes of a little-endian word
_PAYLOAD = np.array([int.from_bytes(b"\x7f" * min(k, 8) + b"\x00" * (8 - min(k, 8)), "little") for k in range(11)],
                    dtype=np.uint64)  # fmt: skip
_PACK = [(_U64(0x007F007F007F007F), _U64(0x7F007F007F007F00), _U64(1)),
         (_U64(0x00003FFF00003FFF), _U64(0x3FFF00003FFF0000), _U64(2)),
         (_U64(0x000000000FFFFFFF), _U64(0x0FFFFFFF00000000), _U64(4))]  # fmt: skip


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _zz(v: int) -> int:
    return v << 1 if v >= 0 else -2 * v - 1


def _width(u: int) -> int:
    """Bytes in the varint of ``u`` >= 0."""
    return 1 if u < 0x80 else (u.bit_length() + 6) // 7


def _varint_one(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _le_bytes(x: np.ndarray, c: int) -> np.ndarray:
    """(n, c) little-endian byte view of a uint16/32/64 column."""
    return x.astype(x.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(len(x), c)


def _spread(u: np.ndarray, w: int) -> tuple[np.ndarray, int]:
    """7-bit groups of ``u`` (all < 2**(7*min(w, 8))) in consecutive bytes of a c-byte word; returns (words, c)."""
    c = 2 if w <= 2 else 4 if w <= 4 else 8
    dt, steps = _SPREAD[c]
    x = u.astype(dt) if c < 8 else u & _U64(0x00FFFFFFFFFFFFFF)
    t = np.empty_like(x)
    for keep, move, shift in steps:
        np.bitwise_and(x, move, out=t)
        np.left_shift(t, shift, out=t)
        np.bitwise_and(x, keep, out=x)
        np.bitwise_or(x, t, out=x)
    return x, c


def _varint_bytes(u: np.ndarray, lo: int | None = None, hi: int | None = None) -> bytes:
    """Concatenated unsigned LEB128 varints of a uint64 column (``lo``/``hi``: its min/max if known)."""
    n = len(u)
    if n == 0:
        return b""
    hi = int(u.max()) if hi is None else hi
    lo = int(u.min()) if lo is None else lo
    # Constant columns (exporter, sampling rate, absent markers ...) and 1-byte columns are common.
    if lo == hi:
        return _varint_one(hi) * n
    if hi < 0x80:
        return u.astype(np.uint8).tobytes()
    wmax, wmin = _width(hi), _width(lo)
    x, c = _spread(u, wmax)
    if wmin == wmax and wmax <= 8:  # one width (timestamps, sequence numbers): no compaction
        x |= _CONT[c][wmax]
        m = _le_bytes(x, c)
        return (m if wmax == c else m[:, :wmax]).tobytes()
    nb = np.full(n, wmin, dtype=np.uint8)
    for k in range(wmin, wmax):
        nb += u >= _U64(_LIMIT[k])
    x |= _CONT[c].take(nb)
    m = _le_bytes(x, c)
    if wmax > 8:
        m10 = np.empty((n, wmax), dtype=np.uint8)
        m10[:, :8] = m
        m10[:, 8] = ((u >> _U64(56)) & _U64(0x7F)).astype(np.uint8) | ((nb > 9).view(np.uint8) << 7)
        if wmax > 9:
            m10[:, 9] = (u >> _U64(63)).astype(np.uint8)
        m = m10
    keep = _KEEP[m.shape[1]].take(nb, axis=0)  # whole words: compress skips the unused bytes, no slicing copy
    return np.compress(keep.reshape(-1), m.reshape(-1)).tobytes()


def _encode_long(n: int) -> bytes:
    return _varint_one(_zz(n))


def _encode_long_column(col: np.ndarray) -> bytes:
    """Avro ``int``/``long`` array body (zig-zag varints) of a non-empty column."""
    if len(col) <= _SMALL:
        return b"".join([_varint_one(_zz(v)) for v in col.tolist()])
    v = col.astype(np.int64)  # contiguous copy, modified in place below
    lo, hi = int(v.min()), int(v.max())
    if lo == hi:
        return _varint_one(_zz(lo)) * len(v)
    if lo >= 0:  # zig-zag of non-negative values is a shift; min/max follow
        np.left_shift(v, 1, out=v)
        return _varint_bytes(v.view(np.uint64), 2 * lo, 2 * hi)
    u = _zigzag(v)
    if hi < 0:
        return _varint_bytes(u, _zz(hi), _zz(lo))
    return _varint_bytes(u, None, max(_zz(lo), _zz(hi)))


class _Message:
    """A batch message being decoded: the bytes, a uint8 view and unaligned 8-byte word loads."""

    __slots__ = ("raw", "buf", "_padded", "_words", "_direct")

    def __init__(self, message: bytes):
        self.raw = message
        self.buf = np.frombuffer(message, dtype=np.uint8)
        self._padded = None
        self._words = None
        self._direct = None

    def terminators(self, pos: int, count: int, guess: int) -> np.ndarray:
        """Positions of the first ``count`` bytes < 0x80 from ``pos`` (fewer if the message ends first).

        Scans a window sized for the column (``guess``, then 10 bytes per
        varint) instead of the whole message, most of which may be strings.
        """
        size = len(self.buf)
        for span in (guess * count + 16, 10 * count):
            end = min(size, pos + span)
            t = np.flatnonzero(self.buf[pos:end] < 0x80)
            if len(t) >= count or end == size:
                break
        return t[:count] + pos

    def words(self, starts: np.ndarray) -> np.ndarray:
        """The 8 bytes at each of ``starts`` (ascending) as little-endian uint64 (zeros past the end).

        Read in place while no word runs past the end (the usual case: a
        column is followed by others); else from a zero-padded copy.
        """
        n = len(self.buf)
        if len(starts) and int(starts[-1]) <= n - 8:
            if self._direct is None:  # one (unaligned) uint64 starting at every byte offset but the last 7
                self._direct = np.ndarray(shape=(n - 7,), dtype="<u8", buffer=self.raw, strides=(1,))
            return self._direct[starts]
        return self._padded_words()[starts]

    def strided_words(self, pos: int, count: int, width: int) -> np.ndarray:
        """``words(arange(pos, pos + count * width, width))`` as a contiguous copy of a strided view."""
        if pos + (count - 1) * width > len(self.buf) - 8:
            return self.words(np.arange(pos, pos + count * width, width, dtype=np.int64))
        return np.ndarray(shape=(count,), dtype="<u8", buffer=self.raw, offset=pos, strides=(width,)).copy()

    def _padded_words(self) -> np.ndarray:
        if self._words is None:
            n = len(self.buf)
            self._padded = np.zeros(n + 16, dtype=np.uint8)
            self._padded[:n] = self.buf
            # one (unaligned) uint64 starting at every byte offset
            self._words = np.ndarray(shape=(n + 8,), dtype="<u8", buffer=self._padded, strides=(1,))
        return self._words

    def short_varints(self, ends: np.ndarray) -> np.ndarray:
        """Values of 1- or 2-byte zig-zag varints ending at ``ends`` (int64).

        The 16-bit word (byte before, last byte) decides: a byte before >= 0x80
        is this varint's first byte, one < 0x80 ends the previous varint (or the
        block count before the column), so the varint is the last byte alone.
        """
        word = self.buf.take(ends).astype(np.intp) << 8  # two byte gathers beat one unaligned 16-bit gather
        word |= self.buf.take(ends - 1)
        return _short_table().take(word).astype(np.int64)

    def byte_at(self, idx: np.ndarray) -> np.ndarray:
        """The byte at each of ``idx`` (0 past the end)."""
        self._padded_words()
        return self._padded[idx]


_ONE = _U64(1)
# 1-byte zig-zag varint -> value
_UNZZ8 = np.array([(b >> 1) ^ -(b & 1) for b in range(128)], dtype=np.int64)


@cache
def _short_table() -> np.ndarray:
    """int16 value of the 1- or 2-byte varint ending at byte ``hi`` for every little-endian (lo, hi) word."""
    w = np.arange(1 << 16)
    lo, hi = w & 0xFF, w >> 8
    u = np.where(lo >= 0x80, (hi << 7) | (lo & 0x7F), hi)  # hi < 0x80 for every word looked up
    return ((u >> 1) ^ -(u & 1)).astype(np.int16)


def _unzigzag(u: np.ndarray) -> np.ndarray:
    """Zig-zag decode a fresh uint64 array in place; returns it as int64."""
    sign = (u & _ONE).view(np.int64)
    np.negative(sign, out=sign)
    np.right_shift(u, _ONE, out=u)
    v = u.view(np.int64)
    np.bitwise_xor(v, sign, out=v)
    return v


def _decode_varints(m: _Message, pos: int, count: int) -> tuple[np.ndarray, int]:
    """Decode ``count`` zig-zag varints starting at ``pos``; returns (int64 values, next position)."""
    if count <= _SMALL:  # a few values: plain Python beats a dozen numpy calls
        vals = [0] * count
        for i in range(count):
            vals[i], pos = _read_long(m.raw, pos)
        return np.array(vals, dtype=np.int64), pos
    buf = m.buf
    size = len(buf)
    if pos + count <= size and int(buf[pos : pos + count].max()) < 0x80:  # all 1-byte varints
        return _UNZZ8.take(buf[pos : pos + count]), pos + count
    w0 = 1  # width of the first varint
    while pos + w0 <= size and w0 <= 10 and buf[pos + w0 - 1] >= 0x80:
        w0 += 1
    end = pos + w0 * count
    grid = buf[pos:end].reshape(count, w0) if end <= size and w0 <= 10 else None
    if grid is not None and (grid[:, -1] < 0x80).all() and np.count_nonzero(buf[pos:end] < 0x80) == count:
        # every varint has the first one's width (timestamps, sequence numbers, ports)
        if w0 == 2:
            return m.short_varints(np.arange(pos + 1, end, 2, dtype=np.int64)), end
        if w0 <= 8:
            x = m.strided_words(pos, count, w0)
            x &= _PAYLOAD[w0]
            return _unzigzag(_pack(x, w0)), end
        starts = np.arange(pos, end, w0, dtype=np.int64)
        lens = np.full(count, w0, dtype=np.int64)
        lmax = w0
    else:
        ends = m.terminators(pos, count, w0 + 1)
        if len(ends) < count:
            raise CodecError("truncated varint array (or a varint longer than 10 bytes)")
        lens = np.empty(count, dtype=np.int64)
        lens[0] = ends[0] - pos + 1
        np.subtract(ends[1:], ends[:-1], out=lens[1:])
        lmax = int(lens.max())
        if lmax > 10:
            raise CodecError("varint longer than 10 bytes")
        end = int(ends[-1]) + 1
        if lmax == 2:  # 1- and 2-byte varints (ports, interface indexes, tos): one table lookup each
            return m.short_varints(ends), end
        starts = ends - lens + 1
    x = m.words(starts)
    x &= _PAYLOAD.take(lens)
    _pack(x, lmax)
    if lmax > 8:  # bits 56..63 from bytes 8 and 9 (excess bits of a 10th byte are ignored)
        b8 = (m.byte_at(starts + 8) & 0x7F).astype(np.uint64) * (lens > 8)
        b9 = (m.byte_at(starts + 9) & 0x7F).astype(np.uint64) * (lens > 9)
        x |= (b8 << _U64(56)) | (b9 << _U64(63))
    return _unzigzag(x), end


def _pack(x: np.ndarray, lmax: int) -> np.ndarray:
    """Squeeze the 7-bit payloads of the first min(lmax, 8) bytes of each word together, in place."""
    t = np.empty_like(x)
    for keep, move, shift in _PACK[: 1 if lmax <= 2 else 2 if lmax <= 4 else 3]:
        np.bitwise_and(x, move, out=t)
        np.right_shift(t, shift, out=t)
        np.bitwise_and(x, keep, out=x)
        np.bitwise_or(x, t, out=x)
    return x


def _read_long(mv, pos: int) -> tuple[int, int]:
    shift = 0
    u = 0
    while True:
        if pos >= len(mv):
            raise CodecError("truncated varint")
        b = mv[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CodecError("varint longer than 10 bytes")
    u &= 0xFFFFFFFFFFFFFFFF  # a 10th byte's bits above bit 63 are ignored, as in the column decoder and fastavro
    return (u >> 1) ^ -(u & 1), pos


# --------------------------------------------------------------------------- string columns
#
# Encode: pyarrow converts the object column to one UTF-8 buffer plus offsets in
# C; the zig-zag varint of every length is interleaved in front of its bytes
# with numpy. Decode: one short Python step per string follows the 1-byte length
# prefixes (strings of at most 63 bytes, the common case) to find where each
# starts; the column's bytes are then viewed as an Arrow binary array of
# (length byte + text) pieces, the length byte sliced off, UTF-8 validated and
# converted to str objects by pyarrow. Columns with longer strings (multi-byte
# prefixes) take a general walk that reads any prefix, then remove the prefix
# bytes with a numpy mask and build the strings the same way. Blocks of a few
# strings and corrupt input use the per-string loop, which names the error.
# Columns gathered from a small table (enriched labels) are encoded from their
# codes by a StringTable instead (same bytes).


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


def varint_widths(u: np.ndarray, umax: int) -> np.ndarray:
    """Bytes in the varint of each value of a non-negative integer column whose maximum is ``umax``."""
    w = np.ones(len(u), dtype=np.int64)
    for k in range(1, _width(umax)):
        w += u >= _LIMIT[k]
    return w


def _encode_strings(col: np.ndarray) -> bytes:
    n = len(col)
    if n <= _SMALL_STRINGS:  # the same normalisation as _string_array, one string at a time
        out = []
        for x in col.tolist():
            b = _text(x).encode()
            out += (_varint_one(len(b) << 1), b)
        return b"".join(out)
    offs, data = utf8_buffers(_string_array(col))
    z = np.diff(offs) << 1  # zig-zag of the (non-negative) lengths; nulls have length 0
    zmax = int(z.max())
    if zmax < 0x80:  # 1-byte length prefixes
        heads = z.astype(np.uint8)
        hpos = offs[:-1] + np.arange(n)
    else:
        heads = np.frombuffer(_varint_bytes(z.view(np.uint64), None, zmax), dtype=np.uint8)
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

    ``encode(codes)`` is byte for byte ``_encode_strings(strings[codes])`` (the
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
        pieces = [_varint_one(len(b) << 1) + b for b in (_text(x).encode() for x in self.strings.tolist())]
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
            return _encode_strings(self.strings.take(codes))
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


def _decode_strings_fast(m: _Message, pos: int, count: int) -> tuple[np.ndarray, int] | None:
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


def _decode_strings_any(m: _Message, pos: int, count: int) -> tuple[np.ndarray, int] | None:
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
                ln, p = _read_long(raw, p)
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


def _decode_strings(m: _Message, pos: int, count: int, fname: str) -> tuple[np.ndarray, int]:
    if count > _SMALL_STRINGS:
        done = _decode_strings_fast(m, pos, count) or _decode_strings_any(m, pos, count)
        if done is not None:
            return done
    # a few strings, or corrupt input: one at a time, with the precise error
    mv = memoryview(m.raw)
    out = np.empty(count, dtype=object)
    for i in range(count):
        ln, pos = _read_long(mv, pos)
        if ln < 0 or pos + ln > len(mv):
            raise CodecError(f"{fname}: bad string length")
        try:
            out[i] = str(mv[pos : pos + ln], "utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"{fname}: invalid UTF-8") from None
        pos += ln
    return out, pos


# --------------------------------------------------------------------------- batch codec (numpy)


@cache
def _plan(batch: str):
    """[(field, kind)] for a batch schema; kind in long|bool|fixed16|string|double."""
    plan = []
    for f in schema_json(batch)["fields"]:
        it = f["type"]["items"]
        if it in ("int", "long"):
            kind = "long"
        elif it == "boolean":
            kind = "bool"
        elif it == "string":
            kind = "string"
        elif it == "double":
            kind = "double"
        elif (isinstance(it, dict) and it.get("type") == "fixed") or (isinstance(it, str) and it.endswith("Address16")):
            kind = "fixed16"
        else:
            raise TypeError(f"{batch}.{f['name']}: unsupported batch item type {it!r}")
        plan.append((f["name"], kind))
    return tuple(plan)


def _reused_long(col: np.ndarray, last: tuple[np.ndarray, bytes] | None) -> bytes | None:
    """The previous long field's bytes if ``col`` holds the same values, else None.

    Only tried after a column of wide varints (>= 3 bytes a value, e.g. times),
    which costs more to encode than to compare; the ends are compared first.
    """
    if last is None or len(last[1]) < 3 * len(col):
        return None
    prev, body = last
    same = prev.dtype == col.dtype and prev[0] == col[0] and prev[-1] == col[-1] and np.array_equal(prev, col)
    return body if same else None


Coded = Mapping[str, tuple[np.ndarray, StringTable]]  # string field -> (codes, table)


def coded_rows(coded: Coded | None, rows) -> dict | None:
    """The codes of ``rows`` (a slice, mask or indices) of every field of ``coded``."""
    if coded is None:
        return None
    return {k: (codes[rows], table) for k, (codes, table) in coded.items()}


def field_encodings(message: bytes, spans: Mapping[str, tuple[int, int]], batch: str) -> dict[str, bytes]:
    """The encoded fields of ``message`` (``spans`` from :func:`decode_batch`) that ``batch`` has too, with the
    same item type: ``encode_batch(batch, rows, verbatim=...)`` of the very rows of ``message`` copies them."""
    source = dict(_plan(schema_of(message)))
    out = {}
    for f, kind in _plan(batch):
        if source.get(f) == kind and f in spans:
            a, b = spans[f]
            out[f] = message[a:b]
    return out


def encode_batch(batch: str, arr: np.ndarray, coded: Coded | None = None, verbatim: Mapping[str, bytes] | None = None) -> bytes:
    """Encode a structured array (dtype_for(record schema)) as one Avro batch message.

    ``coded``: string field -> (codes, table) with ``arr[field]`` equal to
    ``table.strings[codes]``; those columns are encoded from the codes (same bytes).
    ``verbatim``: field -> its whole encoding (block counts, items, end) in
    another message of exactly these rows (:func:`field_encodings`), copied
    instead of encoding ``arr[field]``; the caller vouches that the values are equal.
    A long field equal to the one before it (the four times of an sFlow
    record) reuses that field's bytes.
    """
    n = len(arr)
    plan = _plan(batch)
    coded = coded or {}
    verbatim = verbatim or {}
    if any(len(codes) != n for codes, _ in coded.values()):
        raise ValueError("coded string columns must have one code per record")
    if n == 0:
        return header(batch) + b"\x00" * len(plan)
    parts = [header(batch)]
    count = _encode_long(n)
    last_long = None  # (column, its bytes) of the previous long field
    for name, kind in plan:
        copied = verbatim.get(name)
        if copied is not None:
            parts.append(copied)
            last_long = None
            continue
        parts.append(count)
        if kind == "string" and name in coded:  # from the codes, without reading the column
            codes, table = coded[name]
            parts.append(table.encode(codes))
            parts.append(b"\x00")
            continue
        col = arr[name]
        if kind == "long":
            body = _reused_long(col, last_long) or _encode_long_column(col)
            last_long = (col, body)
            parts.append(body)
        elif kind == "bool":
            parts.append(col.astype(np.uint8).tobytes())
        elif kind == "fixed16":
            parts.append(np.ascontiguousarray(col, dtype=np.uint8).tobytes())
        elif kind == "double":
            parts.append(col.astype("<f8").tobytes())
        else:
            parts.append(_encode_strings(col))
        parts.append(b"\x00")
    return b"".join(parts)


def decode_batch(message: bytes, expect: str | None = None, spans: dict | None = None) -> np.ndarray:
    """Decode a batch message into a structured array of the record dtype.

    Accepts any valid Avro encoding of the batch schema (several blocks per
    array, negative block counts with sizes), not only what we write.
    ``spans``: a dict to receive field -> (start, end) of its whole encoding in ``message``.
    """
    name = schema_of(message)
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    m = _Message(message)
    mv = memoryview(message)
    buf = m.buf
    size = len(buf)
    pos = HEADER_LEN
    cols: dict[str, np.ndarray] = {}
    n_expected: int | None = None
    last_long = (0, 0, None)  # (start, end, values) of the previous long block
    for fname, kind in _plan(name):
        chunks = []
        total = 0
        fstart = pos
        while True:
            cnt, pos = _read_long(mv, pos)
            if cnt == 0:
                break
            if cnt < 0:
                cnt = -cnt
                _, pos = _read_long(mv, pos)  # block size in bytes, not needed
            if cnt > size:
                raise CodecError(f"{fname}: block count {cnt} larger than the message")
            if kind == "long":
                start, end, prev = last_long
                if prev is not None and len(prev) == cnt and message[pos : pos + end - start] == message[start:end]:
                    vals, pos = prev, pos + end - start  # the same bytes as the block before (sFlow's four times)
                else:
                    begin = pos
                    vals, pos = _decode_varints(m, pos, cnt)
                    last_long = (begin, pos, vals)
            elif kind == "bool":
                if pos + cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + cnt] != 0
                pos += cnt
            elif kind == "fixed16":
                if pos + 16 * cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + 16 * cnt].reshape(cnt, 16)
                pos += 16 * cnt
            elif kind == "double":
                if pos + 8 * cnt > size:
                    raise CodecError(f"{fname}: truncated")
                vals = np.frombuffer(message, dtype="<f8", count=cnt, offset=pos)
                pos += 8 * cnt
            else:
                vals, pos = _decode_strings(m, pos, cnt, fname)
            chunks.append(vals)
            total += cnt
        if n_expected is None:
            n_expected = total
        elif total != n_expected:
            raise CodecError(f"{fname}: {total} elements, expected {n_expected}")
        cols[fname] = np.concatenate(chunks) if len(chunks) > 1 else (chunks[0] if chunks else None)
        if spans is not None:
            spans[fname] = (fstart, pos)
    if pos != size:
        raise CodecError(f"{size - pos} trailing bytes")
    # np.zeros, not np.empty: numpy fills the object fields of an empty structured array one by one (~20x slower)
    out = np.zeros(n_expected or 0, dtype=dtype_for(BATCHES[name]))
    if n_expected:
        for fname, col in cols.items():
            out[fname] = col
    return out


def batch_to_records(arr: np.ndarray) -> list[dict]:
    """Per-record dicts (tests, tools and --stdout only: never on a hot path)."""
    names = arr.dtype.names
    rows = []
    for r in arr:
        d = {}
        for k in names:
            v = r[k]
            d[k] = bytes(bytearray(v)) if getattr(v, "shape", ()) == (16,) else v.item() if hasattr(v, "item") else v
        rows.append(d)
    return rows
