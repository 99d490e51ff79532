"""Avro zig-zag varints, encoded: single values and whole numpy columns.

Zig-zag a whole column, count the bytes of every varint by comparing against
the 7-bit-group thresholds, move the 7-bit groups of each value into
consecutive bytes of one machine word with a few shift/mask steps (SWAR), set
the continuation bits from a table indexed by the byte count, and keep the
first ``count`` bytes of each word. Output is byte for byte what fastavro
writes. (Decoding is the compiled column walk's, :mod:`schemas._batch_compiled`.)
"""

from __future__ import annotations

import numpy as np

from .registry import CodecError

__all__ = [
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


def _compiled():
    """The compiled column encoder (:func:`schemas._batch_compiled.zigzag_varints`), loaded on first use."""
    global _COMPILED
    if _COMPILED is None:
        from fabricflow.compiled import load

        _COMPILED = load("schemas._batch_compiled")
    return _COMPILED


_COMPILED = None


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
    return _compiled().zigzag_varints(np.ascontiguousarray(col, dtype=np.int64))


def encode_long_column_numpy(col: np.ndarray) -> bytes:
    """:func:`encode_long_column` in numpy (SWAR, see the module's doc): the reference the compiled encoder is
    tested against."""
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


def varint_widths(u: np.ndarray, umax: int) -> np.ndarray:
    """Bytes in the varint of each value of a non-negative integer column whose maximum is ``umax``."""
    w = np.ones(len(u), dtype=np.int64)
    for k in range(1, _width(umax)):
        w += u >= _LIMIT[k]
    return w


def read_long(message: bytes, pos: int, what: str) -> tuple[int, int]:
    """(Avro ``long`` at ``pos`` of ``message``, the position after it), one value in plain Python: at most 10
    bytes, a 10th byte's bits past 63 dropped (as the compiled walk reads them); ``CodecError`` naming ``what``."""
    shift = 0
    u = 0
    while True:
        if pos >= len(message):
            raise CodecError(f"{what}: truncated varint")
        b = message[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CodecError(f"{what}: varint longer than 10 bytes")
    u &= 0xFFFFFFFFFFFFFFFF
    return (u >> 1) ^ -(u & 1), pos
