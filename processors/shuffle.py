"""Wire format of the flow batches on the internal shuffle topic (``processors.shuffle.v1``).

``prepare`` re-partitions raw flow records to detector shards; only
``detect`` reads them back, in the same code version (the topic is internal,
not an interface for platform teams: they read ``flows.enriched.v1`` and
``flows.raw.v1``, which stay Avro). A shuffle flow batch is a NumPy ``.npy``
file (format 1.0: magic, a header naming dtype and shape, then the records'
bytes) of the ``flow_record`` structured dtype, little-endian: writing it is
one copy of the records (~0.02 us each) instead of an Avro encode (~0.1-0.3
us; more for the small per-shard batches), and reading it is a view of the
message bytes. Any ``.npy`` reader can open one (``numpy.load`` of the
message saved to a file). Messages are compressed by the Kafka producer like
every other topic.

Counter batches go through the shuffle unchanged (Avro ``CounterBatch``), and
``detect`` still accepts Avro ``FlowBatch`` / ``FlowEnrichedBatch`` messages
written by earlier versions (see ``Processors.handle_shuffle``).

A message whose header is not a one-dimensional array of exactly the
``flow_record`` fields (a corrupt message, or one written by a version with
another record layout) raises :class:`schemas.codec.CodecError`: ``detect``
counts it as undecodable and skips it, as it does with bad Avro.
"""

from __future__ import annotations

import ast
import io

import numpy as np

from schemas.codec import CodecError
from schemas.columns import FLOW_DTYPE

__all__ = ["MAGIC", "is_flow_batch", "encode_flows", "decode_flows"]

MAGIC = b"\x93NUMPY"
_DTYPE = FLOW_DTYPE.newbyteorder("<")  # same layout on every host
_DESCR = np.lib.format.dtype_to_descr(_DTYPE)
_HEADER_MAX = 4096  # our headers are ~1.2 kB; a longer one is not ours


def is_flow_batch(message: bytes) -> bool:
    """True when the message is a shuffle flow batch (``.npy``), not Avro."""
    return message[:6] == MAGIC


def encode_flows(flows: np.ndarray) -> bytes:
    """The ``.npy`` bytes of a ``flow_record`` array (any length, including 0)."""
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
    if not is_flow_batch(message) or len(message) < 10:
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
