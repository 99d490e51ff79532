"""Traffic-matrix outputs in tests: ``matrix.windows.v2`` windows as v1 cell dicts, and cells as v2 messages.

The processors emit one :class:`schemas.matrix.MatrixWindow` per window, level and shard; tests that state
expectations per cell read them through :func:`matrix_cells`, and tests that feed consumers build messages
with :func:`window_message`. :func:`cell_set` is the order-free form two runs are compared in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from schemas.matrix import MatrixWindow, decode_cells, encode_window
from schemas.outputs import decode_output, encode_outputs

__all__ = ["matrix_cells", "window_message", "cell_set", "output_json", "expected_output", "message_json",
           "decoded_cells", "merge_shards", "record_cells", "summed"]


def matrix_cells(outputs: Iterable) -> list[dict]:
    """The v1 ``matrix_cell`` dicts of the matrix outputs among ``outputs`` (``Output`` tuples, or windows)."""
    out = []
    for o in outputs:
        w = o if isinstance(o, MatrixWindow) else o[2] if o[0] == "matrix" else None
        if w is not None:
            out += w.cells()
    return out


def window_message(cells: list[dict], shard: int = 0, part: int = 0) -> bytes:
    """One ``matrix.windows.v2`` message of v1 cell dicts of one window and level."""
    return encode_window(MatrixWindow.from_cells(cells, shard, part))


def cell_set(cells: Iterable[dict]) -> set[str]:
    """The cells as a set of canonical JSON lines (order aside)."""
    return {json.dumps(c, sort_keys=True) for c in cells}


def _json(value) -> str:
    return json.dumps(value.to_record() if isinstance(value, MatrixWindow) else value, sort_keys=True, default=str)


def output_json(kind: str, value) -> str:
    """An output value as a consumer reads it back from its message (round trip through the wire codec), as
    canonical JSON: floats and enums compare as consumed; a matrix window as its Avro record."""
    return _json(decode_output(kind, encode_outputs(kind, [value])[0]))


def expected_output(topic: str, kind: str, key: str, value) -> tuple[str, str, str]:
    """(topic, key, canonical JSON) of an output as the pure core computed it: what a test that consumes the
    output topics (``message_json`` of each message) should see."""
    return topic, key, output_json(kind, value)


def message_json(message: bytes) -> str:
    """Any output message (an Avro record, a ``matrix.windows.v2`` window or JSON) as canonical JSON."""
    from schemas import codec
    from schemas.matrix import SCHEMA, decode_window

    try:
        val = decode_window(message) if codec.schema_of(message) == SCHEMA else codec.decode_record(message)
    except codec.CodecError:
        val = json.loads(message)
    return _json(val)


def decoded_cells(messages: Iterable[bytes]) -> list[dict]:
    """The v1 cells of ``matrix.windows`` messages of either version."""
    return [c for m in messages for c in decode_cells(m)]


def merge_shards(outputs) -> list:
    """What a consumer does (docs/architecture.md): the matrix cells of one window, level, src, dst and category
    from several shards summed into one, each an ``Output("matrix", "window|level|src|dst|category", cell)``
    in v1 form; the other outputs as they are."""
    from processors.logic.engine import Output

    rest = [o for o in outputs if o.kind != "matrix"]
    cells = summed(c for o in outputs if o.kind == "matrix" for c in o.value.cells())
    keyed = {f"{c['window_start_ms']}|{c['level']}|{c['src']}|{c['dst']}|{c['category']}": c for c in cells}
    return rest + [Output("matrix", k, v) for k, v in sorted(keyed.items())]


def record_cells(rec: dict) -> list[dict]:
    """The v1 cells of a window given as its Avro record (``MatrixWindow.to_record()``, e.g. a ``replay`` report)."""
    import numpy as np

    from schemas.matrix import VALUE_FIELDS

    codes = {f: np.array(rec[f], dtype=np.int32) for f in ("src", "dst", "category")}
    return MatrixWindow(rec["window_start_ms"], rec["window_end_ms"], rec["level"], rec["shard"], rec["labels"],
                        codes["src"], codes["dst"], codes["category"],
                        {f: np.array(rec[f], dtype=np.int64) for f in VALUE_FIELDS}, rec["part"]).cells()


def summed(cells: Iterable[dict]) -> list[dict]:
    """Cells of equal (window, level, src, dst, category) summed (the shards' partial cells as one), sorted."""
    from schemas.matrix import VALUE_FIELDS

    out: dict[tuple, dict] = {}
    for c in cells:
        k = (c["window_start_ms"], c["level"], c["src"], c["dst"], c["category"])
        got = out.get(k)
        if got is None:
            out[k] = dict(c)
        else:
            for f in VALUE_FIELDS:
                got[f] += c[f]
    return [out[k] for k in sorted(out)]
