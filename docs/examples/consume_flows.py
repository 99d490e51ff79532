"""Read flows.raw.v1 with plain confluent-kafka + fastavro and print one line per flow.

Needs only ``schemas/avro/flow_batch.avsc`` (no fabricflow import, no schema
registry). Each message value is Avro single-object encoding:
``C3 01`` + 8-byte CRC-64-AVRO fingerprint of the writer schema + the Avro body
of one FlowBatch (a record whose fields are arrays, one element per flow).

    python docs/examples/consume_flows.py [--bootstrap 127.0.0.1:9092] [--topic flows.raw.v1]
                                          [--schema schemas/avro/flow_batch.avsc] [--from-beginning] [--max N]
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import json
import sys
import uuid
from pathlib import Path

import fastavro
from confluent_kafka import Consumer, KafkaError
from fastavro.schema import fingerprint, to_parsing_canonical_form

PROTOCOLS = {1: "sflow5", 2: "netflow5", 3: "netflow9", 4: "ipfix"}
IP_PROTOCOLS = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmp6"}


def load_schema(path: str):
    raw = json.loads(Path(path).read_text())
    schema = fastavro.parse_schema(raw)
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    return schema, b"\xc3\x01" + fp


def addr(b: bytes) -> str:
    a = ipaddress.IPv6Address(b)
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


def flows(value: bytes, schema, header: bytes):
    """Yield one dict per flow of a FlowBatch message (raises ValueError on another schema)."""
    if value[:10] != header:
        raise ValueError("not a FlowBatch message of this schema version (header/fingerprint differs)")
    batch = fastavro.schemaless_reader(io.BytesIO(value[10:]), schema)
    names = list(batch)
    for row in zip(*batch.values()):
        yield dict(zip(names, row))


def endpoint(a: bytes, port: int) -> str:
    s = addr(a)
    return f"[{s}]:{port}" if ":" in s else f"{s}:{port}"


def line(f: dict) -> str:
    proto = IP_PROTOCOLS.get(f["ip_protocol"], str(f["ip_protocol"]))
    return (
        f"{f['time_start_ms']} {PROTOCOLS.get(f['export_protocol'], '?')} exporter={addr(f['exporter_addr'])} "
        f"{endpoint(f['src_addr'], f['src_port'])} -> {endpoint(f['dst_addr'], f['dst_port'])} {proto} "
        f"bytes={f['bytes']} packets={f['packets']} rate=1/{f['sampling_rate']} est_bytes={f['bytes_est']}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="flows.raw.v1")
    default_schema = Path(__file__).resolve().parents[2] / "schemas" / "avro" / "flow_batch.avsc"
    ap.add_argument("--schema", default=str(default_schema))
    ap.add_argument("--group", default=None, help="consumer group (default: a fresh one)")
    ap.add_argument("--from-beginning", action="store_true")
    ap.add_argument("--max", type=int, default=0, help="stop after this many flows (0 = run until Ctrl-C)")
    a = ap.parse_args()
    schema, header = load_schema(a.schema)
    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group or f"consume-flows-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest" if a.from_beginning else "latest",
        "enable.auto.commit": True,
        "session.timeout.ms": 6000,
    })
    c.subscribe([a.topic])
    n = 0
    try:
        while True:
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    print(f"kafka error: {msg.error()}", file=sys.stderr)
                continue
            try:
                for f in flows(msg.value(), schema, header):
                    print(line(f))
                    n += 1
                    if a.max and n >= a.max:
                        return 0
            except ValueError as e:
                print(f"skipped message at {msg.partition()}/{msg.offset()}: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 0
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
