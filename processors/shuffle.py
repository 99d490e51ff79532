"""Wire format of the flow batches on the internal shuffle topic (``processors.shuffle.v1``).

``prepare`` re-partitions raw flow records to detector shards; only
``detect`` reads them back, in the same code version (the topic is internal,
not an interface for platform teams: they read ``flows.enriched.v1`` and
``flows.raw.v1``, which stay Avro). A shuffle flow batch is a NumPy ``.npy``
file (format 1.0: magic, a header naming dtype and shape, then the records'
bytes) of the ``flow_record`` structured dtype, little-endian: writing it is
one copy of the records (~0.02 us each) instead of an Avro encode (~0.1-0.3
us; more for the small per-shard batches), and reading it is a view of the
bytes.

The ``.npy`` bytes travel LZ4-compressed (block format, the same codec the
Kafka producer uses): :data:`LZ4_MAGIC` (8 bytes), the uncompressed length
(4 bytes, little-endian), the LZ4 block. Compressing here rather than in the
Kafka clients means the producer copies and the consumer decompresses a
seventh of the bytes, and a worker that reads back a batch it produced
itself (the common case, see ``Processors._reused``) never decompresses it.
``decode_flows`` still reads plain ``.npy`` messages (earlier versions wrote
those). To inspect one: ``decode_flows(message)`` and ``numpy.save``.

Counter batches go through the shuffle unchanged (Avro ``CounterBatch``), and
``detect`` still accepts Avro ``FlowBatch`` / ``FlowEnrichedBatch`` messages
written by earlier versions (see ``Processors.handle_shuffle``).

A message whose header is not a one-dimensional array of exactly the
``flow_record`` fields (a corrupt message, or one written by a version with
another record layout), or whose LZ4 block does not decompress to its stated
length, raises :class:`schemas.codec.CodecError`: ``detect`` counts it as
undecodable and skips it, as it does with bad Avro.
"""

from __future__ import annotations

import ast
import io

import cramjam
import numpy as np

from schemas.codec import CodecError
from schemas.columns import FLOW_DTYPE

__all__ = ["MAGIC", "LZ4_MAGIC", "is_flow_batch", "encode_flows", "decode_flows"]

MAGIC = b"\x93NUMPY"
LZ4_MAGIC = b"\x93NPYLZ4\x01"  # then the .npy bytes as an LZ4 block with a 4-byte length
_LZ4_MAX = 1 << 30  # a longer stated length is not ours (8,192 records are 1.7 MB)
_DTYPE = FLOW_DTYPE.newbyteorder("<")  # same layout on every host
_DESCR = np.lib.format.dtype_to_descr(_DTYPE)
_HEADER_MAX = 4096  # our headers are ~1.2 kB; a longer one is not ours


def is_flow_batch(message: bytes) -> bool:
    """True when the message is a shuffle flow batch (``.npy``, compressed or not), not Avro."""
    return message[:6] == MAGIC or message[:8] == LZ4_MAGIC


def encode_flows(flows: np.ndarray, compress: bool = True) -> bytes:
    """The shuffle message of a ``flow_record`` array (any length, including 0): its ``.npy`` bytes,
    LZ4-compressed unless ``compress`` is false."""
    npy = _npy(flows)
    if not compress:
        return npy
    return LZ4_MAGIC + bytes(cramjam.lz4.compress_block(npy))  # the block starts with the length


def _npy(flows: np.ndarray) -> bytes:
    if flows.dtype != FLOW_DTYPE and flows.dtype != _DTYPE:
        raise TypeError(f"expected a flow_record array, got dtype {flows.dtype}")
    arr = np.ascontiguousarray(flows, dtype=_DTYPE)
    head = io.BytesIO()
    # write_array would rebuild the descr of the 28-field dtype for every message: it is computed once.
    np.lib.format.write_array_header_1_0(head, {"descr": _DESCR, "fortran_order": False, "shape": (len(arr),)})
    return b"".join((head.getvalue(), memoryview(arr).cast("B")))  # the records are copied once


def decode_flows(message: bytes) -> np.ndarray:
    """The ``flow_record`` array of a shuffle flow batch: a read-only view of ``message``'s bytes.

    Raises :class:`CodecError` when the message is not a ``.npy`` array of exactly the
    ``flow_record`` fields or is truncated.
    """
    if message[:8] == LZ4_MAGIC:
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
