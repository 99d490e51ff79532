"""Wire encoding of processor outputs: one message per output, the schema named by the stream catalog.

Kinds whose stream has an Avro schema are Avro single-object messages (encoded together with
:func:`schemas.records.encode_records`; the matrix's columnar windows by :mod:`schemas.matrix`); a kind
without one is canonical JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from fabricflow.streams import OUTPUTS

from . import codec, records
from .matrix import SCHEMA as MATRIX_V2, MatrixWindow, decode_window, encode_window

__all__ = ["encode_outputs", "decode_output", "plain"]


def plain(v):
    """A JSON-compatible copy of an output value (numpy scalars to Python, bytes to hex)."""
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, MatrixWindow):
        return v.to_record()
    return v


def encode_outputs(kind: str, values: Sequence[dict]) -> list[bytes]:
    """Message values of outputs of one ``kind`` (``Output.kind``), in order."""
    schema = OUTPUTS[kind].schema
    if not schema:
        return [json.dumps(plain(v), sort_keys=True).encode() for v in values]
    if schema == MATRIX_V2:  # one columnar message per MatrixWindow
        return [encode_window(v) for v in values]
    return records.encode_records(schema, list(values))


def decode_output(kind: str, message: bytes) -> dict | MatrixWindow:
    """The value of one output message of ``kind`` (matrix: a :class:`MatrixWindow`); raises :class:`schemas.codec.CodecError` when it is not one."""
    schema = OUTPUTS[kind].schema
    if not schema:
        try:
            value = json.loads(message)
        except (ValueError, UnicodeDecodeError) as e:
            raise codec.CodecError(f"not a JSON {kind} output: {e}") from None
        if not isinstance(value, dict):
            raise codec.CodecError(f"not a JSON {kind} output: {type(value).__name__}")
        return value
    if schema == MATRIX_V2:
        return decode_window(message)
    return codec.decode_record(message, expect=schema)
