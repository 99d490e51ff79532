"""Traffic-matrix outputs in tests: ``matrix.windows.v2`` windows as v1 cell dicts, and cells as v2 messages.

The processors emit one :class:`schemas.matrix.MatrixWindow` per window, level and shard; tests that state
expectations per cell read them through :func:`matrix_cells`, and tests that feed consumers build messages
with :func:`window_message`. :func:`cell_set` is the order-free form two runs are compared in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from schemas.matrix import MatrixWindow, decode_cells, encode_window
from schemas.outputs import decode_output, encode_outputs, plain

__all__ = ["matrix_cells", "window_message", "cell_set", "output_json", "message_json", "decoded_cells"]


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


def output_json(kind: str, value) -> str:
    """An output value as a consumer reads it back from its message (round trip through the wire codec), as
    canonical JSON: floats and enums compare as consumed; a matrix window as its Avro record."""
    return json.dumps(plain(decode_output(kind, encode_outputs(kind, [value])[0])), sort_keys=True, default=str)


def message_json(message: bytes) -> str:
    """Any output message (an Avro record, a ``matrix.windows.v2`` window or JSON) as canonical JSON."""
    from schemas import codec
    from schemas.matrix import SCHEMA, decode_window

    try:
        if codec.schema_of(message) == SCHEMA:
            val = plain(decode_window(message))
        else:
            val = codec.decode_record(message)
    except codec.CodecError:
        val = json.loads(message)
    return json.dumps(val, sort_keys=True, default=str)


def decoded_cells(messages: Iterable[bytes]) -> list[dict]:
    """The v1 cells of ``matrix.windows`` messages of either version."""
    return [c for m in messages for c in decode_cells(m)]


def merge_shards(outputs) -> list:
    """What a consumer does (docs/architecture.md): the matrix cells of one window, level, src, dst and category
    from several shards summed into one, each an ``Output("matrix", "window|level|src|dst|category", cell)``
    in v1 form; the other outputs as they are."""
    from processors.logic.engine import Output
    from schemas.matrix import VALUE_FIELDS

    cells: dict[str, dict] = {}
    rest = []
    for o in outputs:
        if o.kind != "matrix":
            rest.append(o)
            continue
        for c in o.value.cells():
            key = f"{c['window_start_ms']}|{c['level']}|{c['src']}|{c['dst']}|{c['category']}"
            got = cells.get(key)
            if got is None:
                cells[key] = dict(c)
            else:
                for f in VALUE_FIELDS:
                    got[f] += c[f]
    return rest + [Output("matrix", k, v) for k, v in sorted(cells.items())]
