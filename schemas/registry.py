"""Schema names and message framing: which schema a Kafka message was written with.

Every message value is Avro *single-object encoding* (``C3 01``, the 8-byte
CRC-64-AVRO fingerprint of the writer schema, then Avro binary; see
docs/schemas.md), so any Avro library can identify the schema without a
registry. This module knows the schemas (the ``.avsc`` files and the columnar
batch schemas derived from them), their fingerprints, the framing, and the
per-record fastavro codec used for the low-volume detector outputs.
"""

from __future__ import annotations

import json
from functools import cache
from io import BytesIO

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from .columns import AVRO_DIR, load_avsc

__all__ = [
    "BATCHES",
    "CODED_BATCHES",
    "HEADER_LEN",
    "LABEL_FIELDS",
    "MAGIC",
    "RECORD_SCHEMAS",
    "CodecError",
    "decode_record",
    "derive_batch_schema",
    "derive_coded_schema",
    "encode_record",
    "error_reason",
    "header",
    "parsed",
    "schema_fingerprint",
    "schema_json",
    "schema_of",
    "write_batch_schemas",
    "writer_schema",
]

MAGIC = b"\xc3\x01"
HEADER_LEN = 10

# Batch schema name -> per-record schema it is derived from.
BATCHES = {"flow_batch": "flow_record", "counter_batch": "counter_sample", "flow_enriched_batch": "flow_enriched",
           "discard_batch": "discarded_packet"}
# Dictionary-coded batch schema -> the batch schema it codes (same records; label strings as codes into a
# per-message string table): flows.enriched.v2 (docs/schemas.md, "flows.enriched.v2").
CODED_BATCHES = {"flow_enriched_batch_v2": "flow_enriched_batch"}
# The label fields of flow_enriched that flow_enriched_batch_v2 carries as codes (every string field of it).
LABEL_FIELDS = ("src_node", "dst_node", "src_group", "dst_group", "src_rack", "dst_rack", "src_switch", "dst_switch",
                "src_job", "dst_job", "category")
RECORD_SCHEMAS = ("matrix_cell", "matrix_window_v2", "incast_event", "straggler_score", "link_health", "alert", "summary_hourly", "pattern",
                  "ingest_quality", "change_mark", "step_mark", "job_membership")


class CodecError(Exception):
    """A message that is not a fabricflow Avro single-object message."""


def error_reason(err: Exception) -> str:
    """Bounded reason label for a message that could not be decoded (metrics label, never free text)."""
    if not isinstance(err, CodecError):
        return "corrupt"
    msg = str(err)
    if "single-object" in msg:
        return "not_avro"
    if "unknown schema" in msg:
        return "unknown_schema"
    if msg.startswith("expected") or "is not a batch schema" in msg:
        return "wrong_schema"
    if "empty message" in msg:
        return "empty"
    return "corrupt"


def derive_batch_schema(record_name: str, record: dict | None = None) -> dict:
    """Columnar batch schema: same fields as the record schema (``record``, default the current
    ``<record_name>.avsc``), each an array."""
    rec = record if record is not None else load_avsc(record_name)
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


def derive_coded_schema(batch: str) -> dict:
    """The dictionary-coded form of a batch schema: a ``labels`` array of the message's distinct label strings
    first, then the batch's fields, each label field (:data:`LABEL_FIELDS`) an array of ``int`` indexes into
    ``labels``. Namespace ``fabricflow.v2``: an incompatible change, so a new topic (``flows.enriched.v2``)."""
    base = derive_batch_schema(BATCHES[batch])
    fields = [{"name": "labels", "type": {"type": "array", "items": "string"},
               "doc": "The distinct label strings of this message; every label field below holds indexes into it"}]
    for f in base["fields"]:
        if f["name"] in LABEL_FIELDS:
            f = {"name": f["name"], "type": {"type": "array", "items": "int"},
                 "doc": "Index into labels. " + f.get("doc", "")}
        elif isinstance(f["type"]["items"], dict) and "." not in f["type"]["items"]["name"]:  # keep v1 named types
            f = {**f, "type": {**f["type"], "items": {**f["type"]["items"], "namespace": base["namespace"]}}}
        fields.append(f)
    return {**base, "namespace": "fabricflow.v2",
            "doc": base["doc"] + " Label strings are dictionary-coded: one table per message (labels), one int "
            "code per record and label field.", "fields": fields}


@cache
def schema_json(name: str) -> dict:
    if name in BATCHES:
        return derive_batch_schema(BATCHES[name])
    if name in CODED_BATCHES:
        return derive_coded_schema(CODED_BATCHES[name])
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
    names = list(BATCHES) + list(CODED_BATCHES) + [n for n in RECORD_SCHEMAS if (AVRO_DIR / f"{n}.avsc").exists()]
    out = {schema_fingerprint(n): n for n in names}
    out.update((fp, name) for fp, (name, _writer) in _history().items() if fp not in out)
    return out


@cache
def _history() -> dict[bytes, tuple[str, object]]:
    """Fingerprint -> (schema name, parsed writer schema) of earlier compatible versions of the schemas
    (``schemas/avro/history/<record name>.<n>.avsc``): record messages written with them are read into the
    current schema by Avro schema resolution, batches of a record written with them by
    :func:`schemas.codec.decode_batch` (in both cases fields added since take their defaults)."""
    out = {}
    batch_of = {record: batch for batch, record in BATCHES.items()}
    for path in sorted((AVRO_DIR / "history").glob("*.avsc")):
        name = path.name.split(".")[0]
        old = json.loads(path.read_text())
        if name in RECORD_SCHEMAS:
            writer = parse_schema(old)
        elif name in batch_of:
            name, writer = batch_of[name], parse_schema(derive_batch_schema(name, old))
        else:
            continue
        fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(writer), "CRC-64-AVRO"))
        out[fp] = (name, writer)
    return out


def writer_schema(message: bytes) -> dict | None:
    """The parsed schema an older compatible writer used for ``message``, None when it is the current one."""
    fp = bytes(message[2:HEADER_LEN])
    old = _history().get(fp)
    if old is None or schema_fingerprint(old[0]) == fp:
        return None
    return old[1]


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
    for name in (*BATCHES, *CODED_BATCHES):
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
    """One record message; written with the current schema or an earlier compatible version of it."""
    name = schema_of(message)
    if expect is not None and name != expect:
        raise CodecError(f"expected {expect}, got {name}")
    fp = bytes(message[2:HEADER_LEN])
    old = _history().get(fp)
    writer = old[1] if old is not None and old[0] == name and schema_fingerprint(name) != fp else parsed(name)
    try:
        return fastavro.schemaless_reader(BytesIO(message[HEADER_LEN:]), writer, parsed(name))
    except Exception as e:  # fastavro raises many types on corrupt input
        raise CodecError(f"corrupt {name} message: {type(e).__name__}: {e}") from None
