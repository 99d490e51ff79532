# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The column walk of :func:`schemas.codec.decode_batch`, compiled ahead of time (Cython -> C).

One pass over a batch message (any valid Avro encoding: several blocks per array, negative counts with
byte sizes, varints up to 10 bytes) writes every long, boolean, fixed(16) and double field straight into
the rows of the output array and every string field's UTF-8 (validated) into one text buffer with
offsets. Every read is checked against the message's end and every write against the rows and buffers
the caller sized; ``boundscheck`` is off because the walk does those checks itself. A message it
cannot decode gives an error code (:data:`ERRORS`), the same one the readable reference
(:mod:`schemas.reference.batch`, tests only) raises for it. Pure: bytes in, rows out.
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

import numpy as np

LONG, BOOL, FIXED16, DOUBLE, STRING = 0, 1, 2, 3, 4
KINDS = {"long": LONG, "bool": BOOL, "fixed16": FIXED16, "double": DOUBLE, "string": STRING}
cdef enum:
    K_LONG = 0
    K_BOOL = 1
    K_FIXED16 = 2
    K_DOUBLE = 3
    K_STRING = 4

# CodecError text of each error code, formatted with f= (the field), a= and b=.
ERRORS = (
    None,
    "{f}: truncated varint",
    "{f}: varint longer than 10 bytes",
    "{f}: block count {a} larger than the message",
    "{f}: truncated",
    "{f}: bad string length",
    "{f}: invalid UTF-8",
    "{f}: {a} elements, expected {b}",
    "{a} trailing bytes",
)
cdef enum:
    E_VARINT_CUT = 1
    E_VARINT_LONG
    E_BLOCK
    E_TRUNCATED
    E_STRING_LENGTH
    E_UTF8
    E_COUNT
    E_TRAILING


def layout(plan: tuple, dtype: np.dtype):
    """(kinds, byte offset in a row -- or string slot -- or -1 when the row has no such field, bytes
    written) per field of ``plan``; TypeError when a field's item type cannot be written to its column."""
    kinds, offs, widths = [], [], []
    slots = 0
    for fname, kind in plan:
        if kind not in KINDS:
            raise TypeError(f"{fname}: no compiled decoding of {kind} items")
        kinds.append(KINDS[kind])
        if fname not in dtype.names:
            offs.append(-1)
            widths.append(0)
            continue
        dt, off = dtype.fields[fname][:2]
        if kind == "long":
            ok = dt.kind in "iu" and dt.itemsize in (1, 2, 4, 8) and dt.shape == () and dt.byteorder != ">"
        elif kind == "bool":
            ok = dt.kind == "b"
        elif kind == "fixed16":
            ok = dt.shape == (16,) and dt.base == np.uint8
        elif kind == "double":
            ok = dt.kind == "f" and dt.itemsize == 8 and dt.shape == () and dt.byteorder != ">"
        else:
            ok = dt.kind == "O"
        if not ok:
            raise TypeError(f"{fname}: {kind} items cannot be decoded into a {dt} column")
        if kind == "string":
            off = slots
            slots += 1
        offs.append(off)
        widths.append(dt.itemsize)
    return np.array(kinds, dtype=np.int8), np.array(offs, dtype=np.int64), np.array(widths, dtype=np.int64)


cdef struct Err:
    int64_t code
    int64_t field
    uint64_t a
    int64_t b


cdef inline int64_t _varint(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t size, uint64_t* u) noexcept nogil:
    """The unsigned varint at ``pos`` (at most 10 bytes; a 10th byte's bits above bit 63 drop out) into ``u``,
    ``pos`` moved past it; 0, or the error code."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t p = pos[0]
    while True:
        if p >= size:
            return E_VARINT_CUT
        b = buf[p]
        p += 1
        v |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            return E_VARINT_LONG
    pos[0] = p
    u[0] = v
    return 0


cdef inline int64_t _unzigzag(uint64_t u) noexcept nogil:
    return <int64_t>((u >> 1) ^ (<uint64_t>0 - (u & 1)))


cdef inline bint _utf8(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """``s[:n]`` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF: Python's rules)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
            continue
        if i + 1 >= n:
            return False
        c1 = s[i + 1]
        if (c1 & 0xC0) != 0x80 or (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F) \
                or (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
            return False
        if c < 0xF0:
            if i + 2 >= n or (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
        else:
            if i + 3 >= n or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            i += 4
    return True


cdef inline void _store(uint8_t* out, uint64_t v, int64_t width) noexcept nogil:
    """The low ``width`` bytes of ``v``, little-endian (numpy's unsafe cast to a narrower int)."""
    cdef int64_t w
    if width == 8:
        memcpy(out, &v, 8)  # little-endian hosts only (the layout check refuses others)
    else:
        for w in range(width):
            out[w] = <uint8_t>(v >> (8 * w))


cdef struct Field:  # where one field's values go
    int8_t kind
    int64_t off  # byte offset in a row, the string slot, or -1: read and check only
    int64_t width
    uint8_t* rows  # n rows of itemsize bytes
    Py_ssize_t itemsize
    Py_ssize_t n  # rows to write: items past n are read and checked only
    int32_t* toffs  # string slot: n + 1 text offsets (from text_base)
    uint8_t* text  # the text buffer, its size and the bytes already in it
    Py_ssize_t text_cap
    Py_ssize_t* text_len


cdef int64_t _field(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t size, Field* f, int64_t* total,
                    Err* err) noexcept nogil:
    """Read one field (every block) from ``pos``, writing its first ``f.n`` items; its item count into
    ``total``; 0, or the error code (``err.a`` set for a block count)."""
    cdef uint64_t u
    cdef int64_t cnt, code, row = 0, r
    cdef Py_ssize_t p = pos[0], step, ln, at
    cdef uint8_t* dst
    cdef Py_ssize_t text_base = f.text_len[0] if f.kind == K_STRING and f.off >= 0 else 0
    while True:
        code = _varint(buf, &p, size, &u)
        if code:
            return code
        cnt = _unzigzag(u)
        if cnt == 0:
            break
        if cnt < 0:
            code = _varint(buf, &p, size, &u)  # the block's size in bytes, not needed
            if code:
                return code
            err.a = <uint64_t>0 - <uint64_t>cnt
            if err.a > <uint64_t>size:
                return E_BLOCK
            cnt = <int64_t>err.a
        elif cnt > size:
            err.a = <uint64_t>cnt
            return E_BLOCK
        if f.kind == K_LONG:
            for r in range(cnt):
                code = _varint(buf, &p, size, &u)
                if code:
                    return code
                if f.off >= 0 and row + r < f.n:
                    _store(f.rows + (row + r) * f.itemsize + f.off, (u >> 1) ^ (<uint64_t>0 - (u & 1)), f.width)
        elif f.kind == K_STRING:
            for r in range(cnt):
                code = _varint(buf, &p, size, &u)
                if code:
                    return code
                ln = <Py_ssize_t>_unzigzag(u)
                if _unzigzag(u) < 0 or _unzigzag(u) > size - p:
                    return E_STRING_LENGTH
                if not _utf8(buf + p, ln):
                    return E_UTF8
                if f.off >= 0 and row + r < f.n:
                    at = f.text_len[0]
                    if at + ln > f.text_cap:  # cannot happen: the texts are a part of the message
                        return E_TRUNCATED
                    memcpy(f.text + at, buf + p, ln)
                    f.text_len[0] = at + ln
                    f.toffs[row + r + 1] = <int32_t>(at + ln - text_base)
                p += ln
        else:
            step = 1 if f.kind == K_BOOL else 16 if f.kind == K_FIXED16 else 8
            if step * cnt > size - p:
                return E_TRUNCATED
            if f.off >= 0:
                for r in range(min(cnt, f.n - row) if f.n > row else 0):
                    dst = f.rows + (row + r) * f.itemsize + f.off
                    if f.kind == K_BOOL:
                        dst[0] = 1 if buf[p + r] != 0 else 0
                    else:
                        memcpy(dst, buf + p + r * step, step)
            p += step * cnt
        row += cnt
    pos[0] = p
    total[0] = row
    return 0


def rows(const uint8_t[::1] message, Py_ssize_t pos, int8_t kind, int64_t[::1] err):
    """Items of the first field from ``pos`` (its structure checked, nothing written); -1 with
    ``err`` = (code, 0, a, b) when the message is not decodable there."""
    cdef Field f
    cdef Err e
    cdef int64_t total = 0, code
    cdef Py_ssize_t size = message.shape[0], zero = 0
    f.kind = kind
    f.off = -1
    f.n = 0
    f.text_len = &zero
    if pos < 0:
        raise ValueError("negative position")
    with nogil:
        code = _field(&message[0] if size else NULL, &pos, size, &f, &total, &e)
    if code:
        err[0], err[1], err[2], err[3] = code, 0, e.a, 0
        return -1
    return total


def walk(const uint8_t[::1] message, Py_ssize_t pos, const int8_t[::1] kinds, const int64_t[::1] offs,
         const int64_t[::1] widths, out, int64_t[:, ::1] spans, int32_t[:, ::1] toffs, uint8_t[::1] text,
         int64_t[:, ::1] tspans, int64_t[::1] err):
    """Decode every field from ``pos`` into ``out`` (``n`` zeroed rows of a structured array; its string
    fields are left to the caller) and the string slots' texts into ``text`` (``toffs[s]``: n + 1 offsets,
    ``tspans[s]``: the slot's part of ``text``), each field's (start, end) into ``spans``. Returns 0, or -1
    with ``err`` = (code, field, a, b)."""
    cdef Py_ssize_t size = message.shape[0], nf = kinds.shape[0], i, text_len = 0
    cdef Py_ssize_t n = len(out), itemsize = out.dtype.itemsize
    cdef size_t address = out.ctypes.data  # a structured array with object fields exports no byte buffer
    if not out.flags.c_contiguous or out.ndim != 1 or out.dtype.names is None or pos < 0:
        raise ValueError("out must be one contiguous array of structured rows, pos not negative")
    cdef int64_t code = 0, total = 0
    cdef Field f
    cdef Err e
    cdef const uint8_t* buf = &message[0] if size else NULL
    if offs.shape[0] < nf or widths.shape[0] < nf or spans.shape[0] < nf or spans.shape[1] != 2:
        raise ValueError("one offset, width and span per field")
    if (toffs.shape[0] and text.shape[0] < size) or toffs.shape[1] < n + 1:
        raise ValueError("output arrays too small")
    for i in range(nf):
        if kinds[i] == K_STRING and offs[i] >= toffs.shape[0]:
            raise ValueError("a string slot past the offsets")
        if kinds[i] != K_STRING and offs[i] >= 0 and offs[i] + widths[i] > itemsize:
            raise ValueError("a field past the row")
    f.rows = <uint8_t*>address
    f.itemsize = itemsize
    f.n = n
    f.text = &text[0] if text.shape[0] else NULL
    f.text_cap = text.shape[0]
    f.text_len = &text_len
    with nogil:
        for i in range(nf):
            f.kind = kinds[i]
            f.off = offs[i]
            f.width = widths[i]
            f.toffs = &toffs[f.off, 0] if f.kind == K_STRING and f.off >= 0 else NULL
            if f.toffs != NULL:
                f.toffs[0] = 0
                tspans[f.off, 0] = text_len
            spans[i, 0] = pos
            code = _field(buf, &pos, size, &f, &total, &e)
            if code:
                break
            if total != n:
                code = E_COUNT
                e.a = <uint64_t>total
                e.b = n
                break
            if f.toffs != NULL:
                tspans[f.off, 1] = text_len
            spans[i, 1] = pos
        if code == 0 and pos != size:
            code = E_TRAILING
            e.a = <uint64_t>(size - pos)
            i = 0
    if code:
        err[0], err[1], err[2], err[3] = code, i, e.a, e.b
        return -1
    return 0


def texts(const uint8_t[::1] text, const int32_t[::1] offs, Py_ssize_t n):
    """Object array of the ``n`` strings ``text[offs[i]:offs[i + 1]]`` (valid UTF-8, checked by the walk)."""
    cdef Py_ssize_t i
    cdef const char* base = ""  # no text: every string is empty
    cdef object[::1] o
    if offs.shape[0] < n + 1:
        raise ValueError("fewer offsets than strings")
    for i in range(n):
        if offs[i] < 0 or offs[i + 1] < offs[i] or offs[i + 1] > text.shape[0]:
            raise ValueError("offsets past the text")
    out = np.empty(n, dtype=object)
    o = out
    if text.shape[0]:
        base = <const char*>&text[0]
    for i in range(n):
        o[i] = PyUnicode_DecodeUTF8(base + offs[i], offs[i + 1] - offs[i], NULL)
    return out


def strings(const uint8_t[::1] message, Py_ssize_t pos, int64_t[::1] err):
    """(object array of the Avro array of strings at ``pos``, the position after it): one pass to count and
    check, one to copy the texts, one string object per item (a ``flows.enriched.v2`` label table); None with
    ``err`` = (code, 0, a, 0) when the message is not decodable there."""
    cdef Field f
    cdef Err e
    cdef int64_t total = 0, code
    cdef Py_ssize_t size = message.shape[0], zero = 0, start = pos, text_len = 0
    cdef const uint8_t* buf = &message[0] if size else NULL
    if pos < 0:
        raise ValueError("negative position")
    f.kind = K_STRING
    f.off = -1
    f.n = 0
    f.text_len = &zero
    with nogil:
        code = _field(buf, &pos, size, &f, &total, &e)
    if code:
        err[0], err[1], err[2], err[3] = code, 0, e.a, 0
        return None
    text = np.empty(pos - start, dtype=np.uint8)
    toffs = np.zeros(total + 1, dtype=np.int32)
    cdef uint8_t[::1] t = text
    cdef int32_t[::1] o = toffs
    f.off = 0
    f.n = total
    f.toffs = &o[0]
    f.text = &t[0] if t.shape[0] else NULL
    f.text_cap = t.shape[0]
    f.text_len = &text_len
    pos = start
    total = 0
    with nogil:
        code = _field(buf, &pos, size, &f, &total, &e)
    if code:  # pragma: no cover - the first pass checked the same bytes
        err[0], err[1], err[2], err[3] = code, 0, e.a, 0
        return None
    return texts(text[:text_len], toffs, total), pos


def zigzag_varints(const int64_t[::1] values):
    """Avro ``int``/``long`` array body of ``values``: the zig-zag varint of every value, concatenated (the
    bytes of :func:`schemas.varint.encode_long_column`; one pass, no fixed cost per column beyond the call)."""
    cdef Py_ssize_t n = values.shape[0], i, k = 0
    out = np.empty(10 * n, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    cdef uint64_t u
    cdef int64_t v
    with nogil:
        for i in range(n):
            v = values[i]
            u = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
            while u >= 0x80:
                o[k] = <uint8_t>((u & 0x7F) | 0x80)
                u >>= 7
                k += 1
            o[k] = <uint8_t>u
            k += 1
    return out[:k].tobytes()
