"""Detector state as snapshot bytes: numeric columns as base64, the snapshot as canonical JSON.

Window states are dumped to JSON-compatible values (:func:`dump_columns`) and a
whole snapshot to sorted-key JSON bytes (:func:`to_bytes`), so equal states give
equal bytes.
"""

from __future__ import annotations

import base64
import json

import numpy as np

__all__ = ["dump_columns", "from_bytes", "load_columns", "to_bytes"]


def dump_columns(cols: dict[str, np.ndarray]) -> dict:
    """JSON-compatible form of a dict of 1-D numeric arrays: ``{name: [dtype, base64 of the little-endian bytes]}``.

    Base64 instead of a list of numbers: a window's matrix rows are tens of thousands of numbers, and
    ``tolist`` + JSON cost ~50 ns each where base64 costs ~1 ns per byte.
    """
    return {k: [str(v.dtype), _b64(v)] for k, v in cols.items()}


def _b64(v: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("<")).tobytes()).decode("ascii")


def load_columns(obj: dict) -> dict[str, np.ndarray]:
    """Inverse of :func:`dump_columns`; also reads the list-of-numbers form written by earlier versions."""
    out = {}
    for k, (dt, vals) in obj.items():
        dtype = np.dtype(dt)
        if isinstance(vals, str):
            out[k] = np.frombuffer(base64.b64decode(vals), dtype=dtype.newbyteorder("<")).astype(dtype)
        else:
            out[k] = np.asarray(vals, dtype=dtype)
    return out


def to_bytes(snapshot: dict) -> bytes:
    """Canonical bytes of a snapshot (sorted-key JSON)."""
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":")).encode()


def from_bytes(data: bytes) -> dict:
    return json.loads(data)
