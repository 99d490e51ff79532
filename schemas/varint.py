"""Avro zig-zag varints: single values and whole numpy columns.

Encode: zig-zag a whole column, count the bytes of every varint by comparing
against the 7-bit-group thresholds, move the 7-bit groups of each value into
consecutive bytes of one machine word with a few shift/mask steps (SWAR), set
the continuation bits from a table indexed by the byte count, and keep the
first ``count`` bytes of each word.
Decode: 1- and 2-byte varints are table lookups; wider ones load the 8 bytes
at each varint start as one little-endian word, mask it to the varint's length
and pack the 7-bit groups back together (reverse SWAR). Output is byte for
byte what fastavro writes; corrupt input raises ``CodecError``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .registry import CodecError

__all__ = [
    "Message",
    "decode_varints",
    "encode_long",
    "encode_long_column",
    "read_long",
    "varint",
    "varint_bytes",
    "varint_widths",
    "zigzag",
]

_U64 = np.uint64
# Columns of at most this many values are coded in plain Python (less fixed cost than numpy calls).
_SMALL = 8
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


def zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _zz(v: int) -> int:
    return v << 1 if v >= 0 else -2 * v - 1


def _width(u: int) -> int:
    """Bytes in the varint of ``u`` >= 0."""
    return 1 if u < 0x80 else (u.bit_length() + 6) // 7


def varint(v: int) -> bytes:
    """Unsigned LEB128 varint of ``v`` >= 0."""
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


def varint_bytes(u: np.ndarray, lo: int | None = None, hi: int | None = None) -> bytes:
    """Concatenated unsigned LEB128 varints of a uint64 column (``lo``/``hi``: its min/max if known)."""
    n = len(u)
    if n == 0:
        return b""
    hi = int(u.max()) if hi is None else hi
    lo = int(u.min()) if lo is None else lo
    # Constant columns (exporter, sampling rate, absent markers ...) and 1-byte columns are common.
    if lo == hi:
        return varint(hi) * n
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


def encode_long(n: int) -> bytes:
    """Avro ``long``: the zig-zag varint of ``n``."""
    return varint(_zz(n))


def encode_long_column(col: np.ndarray) -> bytes:
    """Avro ``int``/``long`` array body (zig-zag varints) of a non-empty column."""
    if len(col) <= _SMALL:
        return b"".join([varint(_zz(v)) for v in col.tolist()])
    v = col.astype(np.int64)  # contiguous copy, modified in place below
    lo, hi = int(v.min()), int(v.max())
    if lo == hi:
        return varint(_zz(lo)) * len(v)
    if lo >= 0:  # zig-zag of non-negative values is a shift; min/max follow
        np.left_shift(v, 1, out=v)
        return varint_bytes(v.view(np.uint64), 2 * lo, 2 * hi)
    u = zigzag(v)
    if hi < 0:
        return varint_bytes(u, _zz(hi), _zz(lo))
    return varint_bytes(u, None, max(_zz(lo), _zz(hi)))


class Message:
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


def decode_varints(m: Message, pos: int, count: int) -> tuple[np.ndarray, int]:
    """Decode ``count`` zig-zag varints starting at ``pos``; returns (int64 values, next position)."""
    if count <= _SMALL:  # a few values: plain Python beats a dozen numpy calls
        vals = [0] * count
        for i in range(count):
            vals[i], pos = read_long(m.raw, pos)
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


def read_long(mv, pos: int) -> tuple[int, int]:
    """(Avro ``long`` at ``pos``, the position after it); ``CodecError`` if truncated or longer than 10 bytes."""
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


def varint_widths(u: np.ndarray, umax: int) -> np.ndarray:
    """Bytes in the varint of each value of a non-negative integer column whose maximum is ``umax``."""
    w = np.ones(len(u), dtype=np.int64)
    for k in range(1, _width(umax)):
        w += u >= _LIMIT[k]
    return w
