"""A seeded byte-level mutator: what libFuzzer's ``Mutate`` does, reproducible from a ``random.Random``.

The atheris runs use libFuzzer's mutator (``atheris.Mutate``); the short fuzz run in the test suite uses
this one so it needs no libFuzzer and gives the same inputs on every run.
"""

from __future__ import annotations

import random
import struct

# Values that sit on the decoders' boundaries: zero, one, powers of two and their neighbours,
# all-ones, and the sizes of the structures (sFlow sample/record formats, v9/IPFIX set ids, lengths).
INTERESTING_32 = (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 16, 32, 40, 44, 56, 88, 255, 256, 0x3FFF, 0x7FFF, 0x8000,
                  0xFFFF, 0x10000, 1001, 1002, 4096, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
INTERESTING_16 = (0, 1, 2, 3, 4, 8, 16, 255, 256, 257, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF)


def mutate_bytes(data: bytes, max_size: int, rng: random.Random) -> bytes:
    """``data`` with one to four random edits, at most ``max_size`` bytes long."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        _edit(b, rng)
    return bytes(b[:max_size])


def _edit(b: bytearray, rng: random.Random) -> None:
    n = len(b)
    op = rng.randrange(9)
    if n == 0 or op == 8:  # insert random bytes
        at = rng.randrange(n + 1)
        b[at:at] = rng.randbytes(rng.choice((1, 2, 4, 8, 16)))
        return
    at = rng.randrange(n)
    if op == 0:
        b[at] ^= 1 << rng.randrange(8)
    elif op == 1:
        b[at] = rng.randrange(256)
    elif op == 2 and n >= 4:
        at = min(at & ~3, n - 4)
        b[at : at + 4] = struct.pack(">I", rng.choice(INTERESTING_32))
    elif op == 3 and n >= 2:
        at = min(at & ~1, n - 2)
        b[at : at + 2] = struct.pack(">H", rng.choice(INTERESTING_16))
    elif op == 4:  # delete a range
        del b[at : at + rng.choice((1, 2, 4, 8, 32))]
    elif op == 5:  # duplicate a range
        ln = rng.choice((1, 4, 8, 24, 64))
        b[at:at] = b[at : at + ln]
    elif op == 6:  # truncate
        del b[rng.randrange(n) :]
    else:  # add or subtract a small number from a big-endian word
        if n >= 4:
            at = min(at & ~3, n - 4)
            v = (struct.unpack_from(">I", b, at)[0] + rng.choice((-4, -1, 1, 4, 8))) & 0xFFFFFFFF
            b[at : at + 4] = struct.pack(">I", v)
        else:
            b[at] = (b[at] + 1) & 0xFF
