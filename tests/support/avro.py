"""Reference Avro encoders for tests: varints written bit by bit, and batches written the way other Avro
writers may (random array blocks, negative block counts with byte sizes, non-minimal varints)."""

from __future__ import annotations

import random

import numpy as np

from schemas import codec


def ref_varint(u: int) -> bytes:
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ref_long(v: int) -> bytes:
    return ref_varint((v << 1) ^ (v >> 63) if v >= 0 else ((-v) << 1) - 1)


def other_writer(batch: str, arr: np.ndarray, rng: random.Random, pad_varints: bool = False) -> bytes:
    """Pure-Python Avro writer: random blocks per array, some with negative counts and byte sizes.

    ``pad_varints`` writes some varints non-minimally (extra 0x80 continuation bytes,
    up to 10 bytes), which Avro readers accept.
    """

    def long_bytes(v: int) -> bytes:
        b = ref_long(v)
        if pad_varints and len(b) < 10 and rng.random() < 0.3:
            k = rng.randint(len(b), 10)
            b = b[:-1] + bytes([b[-1] | 0x80]) + b"\x80" * (k - len(b) - 1) + b"\x00"
        return b

    out = [codec.header(batch)]
    for name, kind in codec._plan(batch):
        col = arr[name]
        items = []
        for x in col:
            if kind == "long":
                items.append(long_bytes(int(x)))
            elif kind == "bool":
                items.append(b"\x01" if x else b"\x00")
            elif kind == "fixed16":
                items.append(bytes(bytearray(x)))
            elif kind == "double":
                items.append(np.float64(x).tobytes())
            else:
                s = x.encode()
                items.append(long_bytes(len(s)) + s)
        i = 0
        while i < len(items):
            k = rng.randint(1, max(1, len(items) - i))
            body = b"".join(items[i : i + k])
            if rng.random() < 0.5:
                out.append(ref_long(-k) + ref_long(len(body)) + body)
            else:
                out.append(ref_long(k) + body)
            i += k
        out.append(b"\x00")
    return b"".join(out)
