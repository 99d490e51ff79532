"""The one Kafka wire codec: Avro single-object encoding, columnar batches.

Framing (decided once, documented in docs/schemas.md): every message value is
Avro *single-object encoding* from the Avro specification:

    C3 01 | 8-byte CRC-64-AVRO fingerprint of the writer schema | Avro binary

so any ordinary Avro library can identify the schema without a registry
(Java: ``BinaryMessageDecoder``; Python: strip 10 bytes, look the fingerprint
up among ``schemas/avro/*.avsc``, ``fastavro.schemaless_reader``).

Flow records and counter samples travel as *batches*: one Avro record whose
fields are arrays, one element per record (``FlowBatch``, ``CounterBatch``,
``EnrichedFlowBatch``: derived from ``flow_record.avsc`` etc. and written to
``schemas/avro/*_batch.avsc``). A per-record Avro object costs ~5-10 us in
Python; a columnar batch is encoded and decoded here with numpy (zig-zag
varints computed for whole columns at once), byte-for-byte identical to what
fastavro writes (tests check both directions). Detector outputs are low-volume
and use fastavro directly.
"""

from __future__ import annotations

import json
from functools import cache
from io import BytesIO

import fastavro
import numpy as np
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from .columns import AVRO_DIR, dtype_for, load_avsc

MAGIC = b"\xc3\x01"
HEADER_LEN = 10

# Batch schema name -> per-record schema it is derived from.
BATCHES = {"flow_batch": "flow_record", "counter_batch": "counter_sample", "flow_enriched_batch": "flow_enriched"}
RECORD_SCHEMAS = ("matrix_cell", "incast_event", "straggler_score", "link_health", "alert", "summary_hourly")


class CodecError(Exception):
    """A message that is not a fabricflow Avro single-object message."""


# --------------------------------------------------------------------------- schemas


def derive_batch_schema(record_name: str) -> dict:
    """Columnar batch schema: same fields as the record schema, each an array."""
    rec = load_avsc(record_name)
    batch_name = rec["name"].replace("Record", "") + "Batch" if rec["name"] == "FlowRecord" else rec["name"] + "Batch"
    fields = []
    named_seen: set[str] = set()
    for f in rec["fields"]:
        items = f["type"]
        if isinstance(items, dict) and items.get("type") == "fixed":
            full = items["name"]
            if full in named_seen:
                items = rec.get("namespace", "") + "." + full
            else:
                named_seen.add(full)
        elif isinstance(items, str) and "." in items:
            pass
        nf = {"name": f["name"], "type": {"type": "array", "items": items}}
        if "doc" in f:
            nf["doc"] = f["doc"]
        fields.append(nf)
    return {
        "type": "record",
        "name": batch_name,
        "namespace": rec.get("namespace", "fabricflow.v1"),
        "doc": f"Columnar batch of {rec['name']}: every field is an array with one element per record (all arrays have the same length).",
        "fields": fields,
    }


@cache
def schema_json(name: str) -> dict:
    if name in BATCHES:
        return derive_batch_schema(BATCHES[name])
    return load_avsc(name)


@cache
def parsed(name: str):
    return parse_schema(schema_json(name))


@cache
def schema_fingerprint(name: str) -> bytes:
    """8-byte CRC-64-AVRO fingerprint, in the byte order single-object encoding stores it."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed(name)), "CRC-64-AVRO"))


@cache
def _by_fingerprint() -> dict[bytes, str]:
    names = list(BATCHES) + [n for n in RECORD_SCHEMAS if (AVRO_DIR / f"{n}.avsc").exists()]
    return {schema_fingerprint(n): n for n in names}


def header(name: str) -> bytes:
    return MAGIC + schema_fingerprint(name)


def schema_of(message: bytes) -> str:
    """Name of the schema a message was written with."""
    if len(message) < HEADER_LEN or message[:2] != MAGIC:
        raise CodecError("not an Avro single-object message (missing C3 01 marker)")
    name = _by_fingerprint().get(bytes(message[2:HEADER_LEN]))
    if name is None:
        raise CodecError(f"unknown schema fingerprint {bytes(message[2:HEADER_LEN]).hex()}")
    return name


def write_batch_schemas(directory=AVRO_DIR) -> list[str]:
    """Write the derived ``*_batch.avsc`` files (for consumers in other languages)."""
    out = []
    for name in BATCHES:
        path = directory / f"{name}.avsc"
        path.write_text(json.dumps(schema_json(name), indent=2) + "\n")
        out.append(str(path))
    return out


# --------------------------------------------------------------------------- record codec (fastavro)


def encode_record(name: str, record: dict) -> bytes:
    buf = BytesIO()
    buf.write(header(name))
    fastavro.schemaless_writer(buf, parsed(name), record)
    return buf.getvalue()


def decode_record(message: bytes, expect: str | None = None) -> dict:
    name = schema_of(message)
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    try:
        return fastavro.schemaless_reader(BytesIO(message[HEADER_LEN:]), parsed(name), parsed(name))
    except Exception as e:  # fastavro raises many types on corrupt input
        raise CodecError(f"corrupt {name} message: {type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- vectorised varints


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _varint_one(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _varint_bytes(u: np.ndarray) -> bytes:
    """Concatenated unsigned LEB128 varints of a uint64 column."""
    n = len(u)
    if n == 0:
        return b""
    # Fast paths: constant columns (exporter, sampling rate, protocol, absent markers ...)
    # and small values are common in flow batches.
    hi = int(u.max())
    if hi < 0x80:
        return u.astype(np.uint8).tobytes() if int(u.min()) != hi else bytes([hi]) * n
    if int(u.min()) == hi:
        return _varint_one(hi) * n
    # Number of 7-bit groups per value (1..10).
    nbytes = np.ones(n, dtype=np.int64)
    rest = u >> np.uint64(7)
    while True:
        more = rest != 0
        if not more.any():
            break
        nbytes += more
        rest = rest >> np.uint64(7)
    total = int(nbytes.sum())
    out = np.empty(total, dtype=np.uint8)
    ends = np.cumsum(nbytes)
    starts = ends - nbytes
    maxlen = int(nbytes.max())
    rest = u.copy()
    for j in range(maxlen):
        live = nbytes > j
        idx = starts[live] + j
        chunk = (rest[live] & np.uint64(0x7F)).astype(np.uint8)
        cont = (nbytes[live] > j + 1).astype(np.uint8) << 7
        out[idx] = chunk | cont
        rest = rest >> np.uint64(7)
    return out.tobytes()


def _encode_long(n: int) -> bytes:
    return _varint_bytes(_zigzag(np.array([n], dtype=np.int64)))


def _decode_varints(buf: np.ndarray, term: np.ndarray, pos: int, count: int) -> tuple[np.ndarray, int]:
    """Decode ``count`` varints starting at ``pos``; ``term`` = indices of bytes < 0x80 in ``buf``."""
    if count == 0:
        return np.zeros(0, dtype=np.int64), pos
    i0 = int(np.searchsorted(term, pos))
    if i0 + count > len(term):
        raise CodecError("truncated varint array")
    ends = term[i0 : i0 + count]
    starts = np.empty(count, dtype=np.int64)
    starts[0] = pos
    starts[1:] = ends[:-1] + 1
    lens = ends - starts + 1
    if lens.max() > 10:
        raise CodecError("varint longer than 10 bytes")
    u = np.zeros(count, dtype=np.uint64)
    for j in range(int(lens.max())):
        live = lens > j
        b = buf[starts[live] + j].astype(np.uint64) & np.uint64(0x7F)
        u[live] |= b << np.uint64(7 * j)
    v = (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)
    return v, int(ends[-1]) + 1


def _read_long(mv: memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    u = 0
    while True:
        if pos >= len(mv):
            raise CodecError("truncated varint")
        b = mv[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CodecError("varint longer than 10 bytes")
    return (u >> 1) ^ -(u & 1), pos


# --------------------------------------------------------------------------- batch codec (numpy)


@cache
def _plan(batch: str):
    """[(field, kind)] for a batch schema; kind in long|bool|fixed16|string|double."""
    plan = []
    for f in schema_json(batch)["fields"]:
        it = f["type"]["items"]
        if it in ("int", "long"):
            kind = "long"
        elif it == "boolean":
            kind = "bool"
        elif it == "string":
            kind = "string"
        elif it == "double":
            kind = "double"
        elif (isinstance(it, dict) and it.get("type") == "fixed") or (isinstance(it, str) and it.endswith("Address16")):
            kind = "fixed16"
        else:
            raise TypeError(f"{batch}.{f['name']}: unsupported batch item type {it!r}")
        plan.append((f["name"], kind))
    return plan


def _encode_strings(col: np.ndarray) -> bytes:
    try:
        uniq, inv = np.unique(col, return_inverse=True)
    except TypeError:  # None or non-str objects: normalise (None -> "")
        norm = np.array(["" if x is None else str(x) for x in col.tolist()], dtype=object)
        uniq, inv = np.unique(norm, return_inverse=True)
    pieces = np.empty(len(uniq), dtype=object)
    for i, s in enumerate(uniq):
        b = s.encode()
        pieces[i] = _encode_long(len(b)) + b
    return b"".join(pieces[inv].tolist())


def encode_batch(batch: str, arr: np.ndarray) -> bytes:
    """Encode a structured array (dtype_for(record schema)) as one Avro batch message."""
    n = len(arr)
    parts = [header(batch)]
    count = _encode_long(n) if n else b""
    for name, kind in _plan(batch):
        if n == 0:
            parts.append(b"\x00")
            continue
        parts.append(count)
        col = arr[name]
        if kind == "long":
            parts.append(_varint_bytes(_zigzag(col)))
        elif kind == "bool":
            parts.append(col.astype(np.uint8).tobytes())
        elif kind == "fixed16":
            parts.append(np.ascontiguousarray(col, dtype=np.uint8).tobytes())
        elif kind == "double":
            parts.append(col.astype("<f8").tobytes())
        else:
            parts.append(_encode_strings(col))
        parts.append(b"\x00")
    return b"".join(parts)


def decode_batch(message: bytes, expect: str | None = None) -> np.ndarray:
    """Decode a batch message into a structured array of the record dtype.

    Accepts any valid Avro encoding of the batch schema (several blocks per
    array, negative block counts with sizes), not only what we write.
    """
    name = schema_of(message)
    if name not in BATCHES:
        raise CodecError(f"{name} is not a batch schema")
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    mv = memoryview(message)
    buf = np.frombuffer(message, dtype=np.uint8)
    term = np.flatnonzero(buf < 0x80)
    pos = HEADER_LEN
    cols: dict[str, np.ndarray] = {}
    n_expected: int | None = None
    for fname, kind in _plan(name):
        chunks = []
        total = 0
        while True:
            cnt, pos = _read_long(mv, pos)
            if cnt == 0:
                break
            if cnt < 0:
                cnt = -cnt
                _, pos = _read_long(mv, pos)  # block size in bytes, not needed
            if cnt > len(message):
                raise CodecError(f"{fname}: block count {cnt} larger than the message")
            if kind == "long":
                vals, pos = _decode_varints(buf, term, pos, cnt)
            elif kind == "bool":
                if pos + cnt > len(buf):
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + cnt].astype(bool)
                pos += cnt
            elif kind == "fixed16":
                if pos + 16 * cnt > len(buf):
                    raise CodecError(f"{fname}: truncated")
                vals = buf[pos : pos + 16 * cnt].reshape(cnt, 16)
                pos += 16 * cnt
            elif kind == "double":
                if pos + 8 * cnt > len(buf):
                    raise CodecError(f"{fname}: truncated")
                vals = np.frombuffer(message, dtype="<f8", count=cnt, offset=pos)
                pos += 8 * cnt
            else:
                out = []
                for _ in range(cnt):
                    ln, pos = _read_long(mv, pos)
                    if ln < 0 or pos + ln > len(mv):
                        raise CodecError(f"{fname}: bad string length")
                    out.append(str(mv[pos : pos + ln], "utf-8"))
                    pos += ln
                vals = np.array(out, dtype=object)
            chunks.append(vals)
            total += cnt
        if n_expected is None:
            n_expected = total
        elif total != n_expected:
            raise CodecError(f"{fname}: {total} elements, expected {n_expected}")
        cols[fname] = np.concatenate(chunks) if len(chunks) > 1 else (chunks[0] if chunks else None)
    if pos != len(message):
        raise CodecError(f"{len(message) - pos} trailing bytes")
    out = np.zeros(n_expected or 0, dtype=dtype_for(BATCHES[name]))
    if n_expected:
        for fname, col in cols.items():
            out[fname] = col
    return out


def batch_to_records(arr: np.ndarray) -> list[dict]:
    """Per-record dicts (tests, tools and --stdout only: never on a hot path)."""
    names = arr.dtype.names
    rows = []
    for r in arr:
        d = {}
        for k in names:
            v = r[k]
            d[k] = bytes(bytearray(v)) if getattr(v, "shape", ()) == (16,) else v.item() if hasattr(v, "item") else v
        rows.append(d)
    return rows
