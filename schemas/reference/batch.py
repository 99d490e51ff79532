"""Batch messages decoded one value at a time in plain Python: the readable reference, used by tests only.

Reads the Avro encoding of a batch (``MAGIC``, fingerprint, then one array per field: blocks of a
zig-zag item count -- negative: followed by the block's byte size -- and the items, until a zero
count) exactly as :func:`schemas.codec.decode_batch` must, and raises the same ``CodecError`` texts.
Slow by design; the compiled walk is tested against it.
"""

from __future__ import annotations

import struct

import numpy as np

from ..codec import HEADER_LEN, CodecError, batch_plan
from ..columns import dtype_for
from ..registry import BATCHES
from ..varint import read_long

__all__ = ["decode_batch"]

_ITEM_BYTES = {"bool": 1, "fixed16": 16, "double": 8}


_long = read_long  # (value, next position); CodecError naming the field


def _item(message: bytes, pos: int, fname: str, kind: str):
    """(one item of ``kind`` at ``pos``, the position after it)."""
    size = len(message)
    if kind == "long":
        return _long(message, pos, fname)
    if kind == "string":
        ln, pos = _long(message, pos, fname)
        if ln < 0 or pos + ln > size:
            raise CodecError(f"{fname}: bad string length")
        try:
            return message[pos : pos + ln].decode("utf-8"), pos + ln
        except UnicodeDecodeError:
            raise CodecError(f"{fname}: invalid UTF-8") from None
    width = _ITEM_BYTES[kind]
    if pos + width > size:
        raise CodecError(f"{fname}: truncated")
    raw = message[pos : pos + width]
    value = raw[0] != 0 if kind == "bool" else struct.unpack("<d", raw)[0] if kind == "double" else raw
    return value, pos + width


def decode_batch(message: bytes, expect: str | None = None, spans: dict | None = None) -> np.ndarray:
    """What :func:`schemas.codec.decode_batch` returns for ``message`` (rows and ``spans``), or raises."""
    message = bytes(message)
    name, plan, defaults = batch_plan(message)
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    size = len(message)
    pos = HEADER_LEN
    cols: dict[str, list] = {}
    n = None
    for fname, kind in plan:
        start = pos
        items: list = []
        while True:
            count, pos = _long(message, pos, fname)
            if count == 0:
                break
            if count < 0:
                count = -count
                _size, pos = _long(message, pos, fname)
            if count > size:
                raise CodecError(f"{fname}: block count {count} larger than the message")
            for _ in range(count):
                value, pos = _item(message, pos, fname, kind)
                items.append(value)
        if n is None:
            n = len(items)
        elif len(items) != n:
            raise CodecError(f"{fname}: {len(items)} elements, expected {n}")
        cols[fname] = items
        if spans is not None:
            spans[fname] = (start, pos)
    if pos != size:
        raise CodecError(f"{size - pos} trailing bytes")
    out = np.zeros(n or 0, dtype=dtype_for(BATCHES[name]))
    for fname, kind in plan:
        if fname not in out.dtype.names or not n:
            continue
        values = cols[fname]
        if kind == "long":
            out[fname] = np.array(values, dtype=np.int64).astype(out.dtype[fname], casting="unsafe")
        elif kind == "fixed16":
            out[fname] = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(n, 16)
        elif kind == "string":
            out[fname] = np.array(values, dtype=object)
        else:
            out[fname] = values
    if n:
        for fname, default in defaults:
            out[fname] = default
    return out
