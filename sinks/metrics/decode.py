"""Kafka message values of the consumed topics -> records (pure; no Kafka).

Each topic kind has its wire schema (``schemas/avro``); patterns.v1 is Avro (``pattern.avsc``) and was
JSON before, so both are read. A value that cannot be read raises :class:`Undecodable` with a reason from a
closed set (the ``reason`` label): empty, not_avro, unknown_schema, wrong_schema, corrupt, not_json.
"""

from __future__ import annotations

import json

import numpy as np

from fabricflow import streams
from schemas import codec
from schemas.matrix import SCHEMA as MATRIX_V2, MatrixWindow, decode_window

__all__ = ["Undecodable", "STREAM_OF", "SCHEMAS", "decode_value"]

#: What the sink reads: its kind (the ``topic`` label's key) -> the stream (fabricflow/streams.py).
STREAM_OF = {"matrix": "matrix", "counters": "counters_raw", "link": "link_health", "incast": "incast",
             "straggler": "straggler", "alerts": "alerts", "patterns": "patterns", "changes": "changes",
             "discards": "discards_raw", "jobs": "jobs"}
#: Kind -> Avro schema name, from the stream catalog; patterns: None = Avro single-object or JSON (its old form).
SCHEMAS = {k: None if k == "patterns" else streams.BY_NAME[name].schema for k, name in STREAM_OF.items()}


class Undecodable(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def decode_value(kind: str, value: bytes | None) -> dict | np.ndarray | MatrixWindow:
    """One message value: a record dict, for ``counters`` / ``discards`` the decoded batch rows, for ``matrix``
    a :class:`schemas.matrix.MatrixWindow` (``matrix.windows.v2``: one columnar message per window, level and
    shard)."""
    if not value:
        raise Undecodable("empty")
    schema = SCHEMAS[kind]
    try:
        if kind in ("counters", "discards"):
            return codec.decode_batch(value, expect=schema)
        if schema == MATRIX_V2:
            return decode_window(value)
        if schema is not None:
            return codec.decode_record(value, expect=schema)
        if value[:2] == codec.MAGIC:
            return codec.decode_record(value)
    except codec.CodecError as e:
        raise Undecodable(codec.error_reason(e), str(e)) from None
    except Exception as e:  # any other failure of a decoder on corrupt bytes
        raise Undecodable("corrupt", f"{type(e).__name__}: {e}") from None
    try:
        rec = json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise Undecodable("not_json", str(e)) from None
    if not isinstance(rec, dict):
        raise Undecodable("not_json", "not a JSON object")
    return rec
