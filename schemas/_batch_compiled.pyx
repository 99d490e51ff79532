# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The column walk of :func:`schemas.codec.decode_batch`, compiled ahead of time (Cython -> C).

One pass over a batch message writes every field straight into the rows of the output array. Every read
is checked against the message's end and every write against the ``n`` rows the first field announced;
``boundscheck`` is off because the walk does those checks itself. Anything the walk does not accept
answers -1 (see :mod:`schemas.codec` for who decides then). Pure: bytes in, rows out.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t, uint64_t

import numpy as np

LONG, BOOL, FIXED16, DOUBLE = 0, 1, 2, 3
KINDS = {"long": LONG, "bool": BOOL, "fixed16": FIXED16, "double": DOUBLE}
cdef enum:
    K_LONG = 0
    K_BOOL = 1
    K_FIXED16 = 2
    K_DOUBLE = 3


def layout(plan: tuple, dtype: np.dtype):
    """(kinds, byte offset in a row or -1, bytes written) per field of ``plan``; None when a field's kind or
    its column's type is not one this walk writes exactly as numpy's assignment would."""
    kinds, offs, widths = [], [], []
    for fname, kind in plan:
        if kind not in KINDS:
            return None
        kinds.append(KINDS[kind])
        if fname not in dtype.names:
            offs.append(-1)
            widths.append(0)
            continue
        dt, off = dtype.fields[fname][:2]
        if dt.byteorder == ">":
            return None
        if kind == "long":
            ok = dt.kind in "iu" and dt.itemsize in (1, 2, 4, 8) and dt.shape == ()
        elif kind == "bool":
            ok = dt.kind == "b"
        elif kind == "fixed16":
            ok = dt.shape == (16,) and dt.base == np.uint8
        else:
            ok = dt.kind == "f" and dt.itemsize == 8 and dt.shape == ()
        if not ok:
            return None
        offs.append(off)
        widths.append(dt.itemsize)
    return np.array(kinds, dtype=np.int8), np.array(offs, dtype=np.int64), np.array(widths, dtype=np.int64)


cdef inline int64_t _count(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t size) noexcept nogil:
    """A block count or size (at most 9 bytes: a longer one is not the walk's); ``pos`` -1 when refused."""
    cdef uint64_t u = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t p = pos[0]
    for _i in range(9):
        if p >= size:
            break
        b = buf[p]
        p += 1
        u |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            pos[0] = p
            return <int64_t>(u >> 1) ^ -<int64_t>(u & 1)
        shift += 7
    pos[0] = -1
    return 0


cdef inline int64_t _block(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t size) noexcept nogil:
    """The item count of the array block at ``pos`` (``pos`` moved to its first item); 0 ends the array (a
    negative count is followed by the block's byte size, skipped); ``pos`` -1 when refused."""
    cdef int64_t cnt = _count(buf, pos, size)
    if pos[0] >= 0 and cnt < 0:
        cnt = -cnt
        _count(buf, pos, size)
    if cnt > size:
        pos[0] = -1
    return cnt


cdef inline Py_ssize_t _item_bytes(int8_t kind) noexcept nogil:
    """Bytes per item of a fixed-size kind (bool, fixed16, double)."""
    return 1 if kind == K_BOOL else 16 if kind == K_FIXED16 else 8


def rows(const uint8_t[::1] message, Py_ssize_t pos, int8_t kind):
    """Elements of the first field (its blocks' counts) from ``pos``; -1 when the walk refuses the message."""
    cdef Py_ssize_t size = message.shape[0]
    cdef int64_t total
    with nogil:
        total = _rows(&message[0] if size else NULL, pos, size, kind)
    return total


cdef int64_t _rows(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t size, int8_t kind) noexcept nogil:
    cdef int64_t total = 0, cnt, i
    while True:
        cnt = _block(buf, &pos, size)
        if pos < 0:
            return -1
        if cnt == 0:
            return total
        total += cnt
        if kind == K_LONG:
            for i in range(cnt):  # skip the varints
                while True:
                    if pos >= size:
                        return -1
                    pos += 1
                    if buf[pos - 1] < 0x80:
                        break
        else:
            pos += _item_bytes(kind) * cnt
        if pos > size:
            return -1


cdef inline void _store(uint8_t* out, uint64_t v, int64_t width) noexcept nogil:
    """The low ``width`` bytes of ``v``, little-endian (numpy's unsafe cast to a narrower int)."""
    cdef int64_t w
    for w in range(width):
        out[w] = <uint8_t>(v >> (8 * w))


def walk(const uint8_t[::1] message, Py_ssize_t pos, const int8_t[::1] kinds, const int64_t[::1] offs,
         const int64_t[::1] widths, uint8_t[::1] out, Py_ssize_t itemsize, Py_ssize_t n, int64_t[:, ::1] spans):
    """Decode every field from ``pos`` into ``out`` (the bytes of ``n`` zeroed rows of ``itemsize``), each
    field's (start, end) into ``spans``; the end position (the message's length), or -1 when refused."""
    cdef Py_ssize_t size = message.shape[0], nf = kinds.shape[0], f, end
    if offs.shape[0] < nf or widths.shape[0] < nf or spans.shape[0] < nf or spans.shape[1] != 2:
        raise ValueError("one offset, width and span per field")
    if n < 0 or out.shape[0] < n * itemsize:
        raise ValueError("out holds fewer than n rows")
    for f in range(nf):
        if offs[f] >= 0 and offs[f] + widths[f] > itemsize:
            raise ValueError("a field past the row")
    with nogil:
        end = _walk(&message[0] if size else NULL, pos, size, kinds, offs, widths,
                    &out[0] if out.shape[0] else NULL, itemsize, n, spans)
    return end


cdef Py_ssize_t _walk(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t size, const int8_t[::1] kinds,
                      const int64_t[::1] offs, const int64_t[::1] widths, uint8_t* dst, Py_ssize_t itemsize,
                      Py_ssize_t n, int64_t[:, ::1] spans) noexcept nogil:
    cdef Py_ssize_t nf = kinds.shape[0], f, row, at, step, r, src, q
    cdef int64_t cnt, off, width
    cdef int8_t kind
    cdef uint64_t u
    cdef int shift
    cdef uint8_t b
    for f in range(nf):
        kind = kinds[f]
        off = offs[f]
        width = widths[f]
        spans[f, 0] = pos
        row = 0
        while True:
            cnt = _block(buf, &pos, size)
            if pos < 0 or row + cnt > n:
                return -1
            if cnt == 0:
                break
            at = row * itemsize + off
            if kind == K_LONG:
                for r in range(cnt):
                    u = 0
                    shift = 0
                    while True:
                        if pos >= size:
                            return -1
                        b = buf[pos]
                        pos += 1
                        u |= <uint64_t>(b & 0x7F) << shift  # bits past 63 of a 10th byte drop out
                        if b < 0x80:
                            break
                        shift += 7
                        if shift > 63:
                            return -1  # over 10 bytes
                    if off >= 0:
                        _store(dst + at, (u >> 1) ^ (<uint64_t>0 - (u & 1)), width)  # zig-zag
                    at += itemsize
            else:
                step = _item_bytes(kind)
                if pos + step * cnt > size:
                    return -1
                if off >= 0:
                    for r in range(cnt):
                        src = pos + r * step
                        if kind == K_BOOL:
                            dst[at] = 1 if buf[src] != 0 else 0
                        else:
                            for q in range(step):
                                dst[at + q] = buf[src + q]
                        at += itemsize
                pos += step * cnt
            row += cnt
        if row != n:
            return -1
        spans[f, 1] = pos
    return pos if pos == size else -1
