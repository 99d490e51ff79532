"""Wire format of the internal shuffle topic (``processors.shuffle.v1``): flow batches and their headers.

A flow batch is the ``.npy`` file of a ``flow_record`` array in an LZ4 block (:data:`LZ4_MAGIC`, the
uncompressed length as 4 bytes little-endian, the block). Counter batches are Avro ``CounterBatch``:
one unchanged, several that ``prepare`` took together framed by :func:`frame_counters`
(:data:`COUNTERS_MAGIC`, then per piece its 4-byte length and its Avro message). Headers: ``src`` names
the raw message of a message's last piece, ``seg`` every piece with its rows, ``role`` which pieces the
shard reports (absent: all; ``state``: none; else ``own`` / ``state`` per piece). Only ``detect`` of the
same code version reads the topic; anything malformed raises :class:`CodecError`. Routing and recovery:
docs/architecture.md (stream table) and docs/operations.md, "Processor workers".
"""

from __future__ import annotations

import ast
import io

import cramjam
import numpy as np

from schemas.codec import CodecError
from schemas.columns import FLOW_DTYPE

__all__ = ["MAGIC", "LZ4_MAGIC", "is_flow_batch", "encode_flows", "decode_flows", "header", "source_of",
           "segments_of", "fill", "src_header", "seg_header", "STATE_HEADER", "is_state_only", "role_header",
           "state_roles", "COUNTERS_MAGIC", "frame_counters", "counter_pieces"]

MAGIC = b"\x93NUMPY"
COUNTERS_MAGIC = b"\x93FFCNT\x01\x00"  # several counter batches in one shuffle message
LZ4_MAGIC = b"\x93NPYLZ4\x01"  # then the .npy bytes as an LZ4 block with a 4-byte length
_LZ4_MAX = 1 << 30  # a longer stated length is not ours (8,192 records are 1.7 MB)
_DTYPE = FLOW_DTYPE.newbyteorder("<")  # same layout on every host
_DESCR = np.lib.format.dtype_to_descr(_DTYPE)
_HEADER_MAX = 4096  # our headers are ~1.2 kB; a longer one is not ours


def is_flow_batch(message: bytes) -> bool:
    """True when the message is a shuffle flow batch, not Avro."""
    return message[:8] == LZ4_MAGIC


def encode_flows(flows: np.ndarray) -> bytes:
    """The shuffle message of a ``flow_record`` array (any length, including 0)."""
    return LZ4_MAGIC + bytes(cramjam.lz4.compress_block(npy_bytes(flows)))  # the block starts with the length


def npy_bytes(flows: np.ndarray) -> bytes:
    """The ``.npy`` file of a ``flow_record`` array (what the LZ4 block holds)."""
    if flows.dtype != FLOW_DTYPE and flows.dtype != _DTYPE:
        raise TypeError(f"expected a flow_record array, got dtype {flows.dtype}")
    arr = np.ascontiguousarray(flows, dtype=_DTYPE)
    head = io.BytesIO()
    # write_array would rebuild the descr of the 28-field dtype for every message: it is computed once.
    np.lib.format.write_array_header_1_0(head, {"descr": _DESCR, "fortran_order": False, "shape": (len(arr),)})
    return b"".join((head.getvalue(), memoryview(arr).cast("B")))  # the records are copied once


def decode_flows(message: bytes) -> np.ndarray:
    """The ``flow_record`` array of a shuffle flow batch (a read-only view of the decompressed bytes).

    Raises :class:`CodecError` when the message is not an LZ4 block holding a ``.npy`` array of exactly the
    ``flow_record`` fields, or is truncated.
    """
    if message[:8] != LZ4_MAGIC:
        raise CodecError("not a shuffle flow batch (missing LZ4 .npy magic)")
    message = _decompress(message)
    if message[:6] != MAGIC or len(message) < 10:
        raise CodecError("not a shuffle flow batch (missing .npy magic)")
    if message[6:8] != b"\x01\x00":
        raise CodecError(f"shuffle flow batch: unsupported .npy version {message[6]}.{message[7]}")
    hlen = int.from_bytes(message[8:10], "little")
    start = 10 + hlen
    if hlen > _HEADER_MAX or len(message) < start:
        raise CodecError("shuffle flow batch: truncated or oversized header")
    try:  # the header is a Python literal dict; literal_eval runs no code
        head = ast.literal_eval(message[10:start].decode("latin1"))
        descr, fortran, shape = head["descr"], head["fortran_order"], head["shape"]
        dtype = np.dtype(np.lib.format.descr_to_dtype(descr))
    except (ValueError, SyntaxError, KeyError, TypeError, MemoryError, RecursionError) as e:
        raise CodecError(f"shuffle flow batch: bad header ({type(e).__name__})") from None
    if dtype != _DTYPE or fortran is not False or not (isinstance(shape, tuple) and len(shape) == 1 and isinstance(shape[0], int)):
        raise CodecError(f"shuffle flow batch: not a 1-D flow_record array (dtype {dtype}, shape {shape!r})")
    n = shape[0]
    if n < 0 or len(message) - start != n * _DTYPE.itemsize:
        raise CodecError(f"shuffle flow batch: {len(message) - start} data bytes for {n} records")
    out = np.frombuffer(message, dtype=_DTYPE, count=n, offset=start)
    return out if _DTYPE == FLOW_DTYPE else out.astype(FLOW_DTYPE)


def _decompress(message: bytes) -> bytes:
    if len(message) < 12:
        raise CodecError("shuffle flow batch: truncated LZ4 header")
    size = int.from_bytes(message[8:12], "little")
    if size > _LZ4_MAX:
        raise CodecError(f"shuffle flow batch: stated length {size} is too large")
    try:
        out = cramjam.lz4.decompress_block(memoryview(message)[12:], output_len=size)
    except cramjam.DecompressionError as e:
        raise CodecError(f"shuffle flow batch: LZ4 block does not decompress ({e})") from None
    if len(out) != size:
        raise CodecError(f"shuffle flow batch: LZ4 block gave {len(out)} bytes, {size} stated")
    return bytes(out)


def frame_counters(messages: list[bytes]) -> bytes:
    """One shuffle message of several Avro counter batch messages, unchanged (one alone is sent as is)."""
    if len(messages) == 1:
        return messages[0]
    return b"".join([COUNTERS_MAGIC, *(p for m in messages for p in (len(m).to_bytes(4, "little"), m))])


def counter_pieces(message: bytes) -> list[bytes]:
    """The Avro counter batch messages of a shuffle counter message (:func:`frame_counters`)."""
    if message[:8] != COUNTERS_MAGIC:
        return [message]
    out, pos, size = [], 8, len(message)
    while pos < size:
        if pos + 4 > size:
            raise CodecError("shuffle counter message: truncated piece length")
        n = int.from_bytes(message[pos : pos + 4], "little")
        pos += 4
        if pos + n > size:
            raise CodecError(f"shuffle counter message: piece of {n} bytes past the end")
        out.append(message[pos : pos + n])
        pos += n
    return out


# ---------------------------------------------------------------------------- headers


def header(headers, name: str) -> str | None:
    """The text of a Kafka message header (Faust gives a dict or a list of pairs), or None."""
    if not headers:
        return None
    items = headers.items() if hasattr(headers, "items") else headers
    for k, v in items:
        if k == name or k == name.encode():
            return v.decode() if isinstance(v, bytes) else v
    return None


#: Header of a counter batch copy whose shard only keeps the port state (another shard reports link health).
STATE_HEADER = ("role", b"state")


def is_state_only(headers) -> bool:
    """True for a counter batch copy marked ``role=state``."""
    return header(headers, "role") == "state"


def role_header(state: list[bool]) -> tuple[str, bytes] | None:
    """The ``role`` header of a counter message whose pieces are state-only where ``state`` is True (None:
    the shard owns them all)."""
    if not any(state):
        return None
    if all(state):
        return STATE_HEADER
    return ("role", ",".join("state" if s else "own" for s in state).encode())


def state_roles(headers) -> bool | list[bool]:
    """From a counter message's ``role`` header: True / False when every piece is / is not state-only, else
    one bool per piece."""
    text = header(headers, "role")
    if text is None or text == "state":
        return text is not None
    return [r == "state" for r in text.split(",")]


def src_header(src: str, offset: int, chunk: int) -> tuple[str, bytes]:
    """The ``src`` header of a piece of raw message ``src`` ("topic:partition")."""
    return ("src", f"{src}:{offset}:{chunk}".encode())


def seg_header(pieces) -> tuple[str, bytes]:
    """The ``seg`` header of ``(src, (offset, chunk), rows)`` pieces."""
    return ("seg", ",".join(f"{s}:{o}:{c}:{n}" for s, (o, c), n in pieces).encode())


def source_of(headers) -> tuple[str, tuple[int, int]] | None:
    """("topic:partition", (offset, chunk)) from a shuffle message's ``src`` header."""
    text = header(headers, "src")
    if text is None:
        return None
    topic, part, off, chunk = text.rsplit(":", 3)
    return f"{topic}:{part}", (int(off), int(chunk))


def segments_of(headers) -> list[tuple[str, tuple[int, int], int]] | None:
    """[("topic:partition", (offset, chunk), rows), ...] from a shuffle message's ``seg`` header, in row order.

    Only messages that combine the rows of several raw messages (or chunks) have one; None otherwise.
    """
    text = header(headers, "seg")
    if text is None:
        return None
    out = []
    for piece in text.split(","):
        topic, part, off, chunk, rows = piece.rsplit(":", 4)
        out.append((f"{topic}:{part}", (int(off), int(chunk)), int(rows)))
    return out


def fill(pieces: list, limit: int):
    """Consecutive groups of ``(src, pos, rows)`` pieces with at most ``limit`` rows each (a bigger piece alone)."""
    group: list = []
    rows = 0
    for piece in pieces:
        if group and rows + piece[2] > limit:
            yield group
            group, rows = [], 0
        group.append(piece)
        rows += piece[2]
    if group:
        yield group
