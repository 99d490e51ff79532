"""Offline decode of a capture file: ``fabricflow decode FILE.pcap``.

Reads UDP datagrams from a pcap/pcapng file (:mod:`ingest.pcapread`), decodes
them in capture order through the dispatcher :func:`ingest.decode.decode`
with one :class:`TemplateCache`, and prints one JSON object per flow record /
counter sample (Avro field names, addresses as text, plus ``"type"``) or a
table. A summary goes to stderr. The receive time of each datagram is its
capture timestamp. Tooling only: not on the ingest path.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, TextIO

import numpy as np

from ingest.decode import DecodeError, DecodeResult, TemplateCache, decode, sniff_protocol
from ingest.pcapread import PcapError, PcapStats, UdpPacket, read_udp
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, addr_str

__all__ = [
    "DecodedDatagram",
    "DecodeSummary",
    "decode_pcap",
    "summarize_pcap",
    "parse_port_map",
    "records_as_dicts",
    "run_decode",
    "PORT_MAP_PROTOCOLS",
]

# Port-map protocol names -> the sniffed protocols they accept.
PORT_MAP_PROTOCOLS = {
    "sflow": {"sflow5"},
    "sflow5": {"sflow5"},
    "netflow": {"netflow5", "netflow9"},
    "netflow5": {"netflow5"},
    "netflow9": {"netflow9"},
    "ipfix": {"ipfix"},
}

_ADDR_FIELDS = {"exporter_addr", "src_addr", "dst_addr"}
_U64_COUNTER_FIELDS = {"if_speed", "in_octets", "out_octets"}


@dataclass
class DecodedDatagram:
    """One UDP datagram and what decoding it gave (``result`` or ``error``)."""

    packet: UdpPacket
    protocol: str
    result: DecodeResult | None = None
    error: DecodeError | None = None


@dataclass
class DecodeSummary:
    udp_datagrams: int = 0
    decoded: int = 0  # datagrams decoded without DecodeError
    flows: Counter = field(default_factory=Counter)  # protocol -> flow records
    counters: Counter = field(default_factory=Counter)  # protocol -> counter samples
    datagrams_by_protocol: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # "protocol/reason" -> datagrams
    problems: Counter = field(default_factory=Counter)  # reason -> count
    skipped: Counter = field(default_factory=Counter)  # reason -> datagrams not decoded
    pcap: PcapStats = field(default_factory=PcapStats)

    def lines(self) -> list[str]:
        out = [
            f"datagrams: {self.udp_datagrams} udp, {self.decoded} decoded, {sum(self.errors.values())} failed",
            "records: "
            + (
                ", ".join(
                    f"{p} flows={self.flows[p]} counters={self.counters[p]} datagrams={self.datagrams_by_protocol[p]}"
                    for p in sorted(self.datagrams_by_protocol)
                )
                or "none"
            ),
            "problems: " + (_fmt_counter(self.problems) or "none"),
            "errors: " + (_fmt_counter(self.errors) or "none"),
            "skipped: " + (_fmt_counter(self.skipped) or "none"),
            f"non-export packets skipped: {self.pcap.non_udp + sum(self.skipped.values())}"
            f" (non-UDP frames: {_fmt_counter(self.pcap.skipped) or 0})",
        ]
        return out


def _fmt_counter(c) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(c.items()))


def parse_port_map(text: str | None) -> dict[int, str] | None:
    """``"2055=netflow,6343=sflow"`` -> ``{2055: "netflow", 6343: "sflow"}``; None/empty -> None."""
    if not text:
        return None
    out: dict[int, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        port_s, sep, proto = part.partition("=")
        proto = proto.strip().lower()
        if not sep or proto not in PORT_MAP_PROTOCOLS:
            raise ValueError(f"bad port map entry {part!r} (want PORT=" + "|".join(sorted(PORT_MAP_PROTOCOLS)) + ")")
        port = int(port_s)
        if not 0 < port < 65536:
            raise ValueError(f"bad port {port}")
        out[port] = proto
    return out or None


def decode_pcap(
    path,
    port_map: dict[int, str] | None = None,
    templates: TemplateCache | None = None,
    summary: DecodeSummary | None = None,
) -> Iterator[DecodedDatagram]:
    """Decode every export datagram of a capture in order, yielding :class:`DecodedDatagram`.

    With ``port_map`` only datagrams to a mapped destination port whose
    version field matches the mapped protocol are decoded; without it the
    version field decides (unknown ones are skipped). ``summary`` (optional)
    is updated as the iterator advances. Raises :class:`PcapError`/``OSError``
    for unreadable files.
    """
    cache = templates if templates is not None else TemplateCache()
    sm = summary if summary is not None else DecodeSummary()
    for pkt in read_udp(path, sm.pcap):
        sm.udp_datagrams += 1
        proto = sniff_protocol(pkt.payload)
        if port_map is not None:
            mapped = port_map.get(pkt.dst_port)
            if mapped is None:
                sm.skipped["port_not_in_map"] += 1
                continue
            if proto not in PORT_MAP_PROTOCOLS[mapped]:
                sm.skipped["port_map_mismatch"] += 1
                continue
        elif proto == "unknown":
            sm.skipped["not_export"] += 1
            continue
        received_ms = int(round(pkt.timestamp_s * 1000))
        try:
            res = decode(pkt.payload, pkt.src_ip, received_ms, cache)
        except DecodeError as e:
            sm.errors[f"{e.protocol}/{e.reason}"] += 1
            yield DecodedDatagram(pkt, proto, error=e)
            continue
        except ModuleNotFoundError:
            sm.skipped[f"no_decoder_{proto}"] += 1
            continue
        sm.decoded += 1
        sm.datagrams_by_protocol[proto] += 1
        sm.flows[proto] += len(res.flows)
        sm.counters[proto] += len(res.counters)
        sm.problems.update(res.problems)
        yield DecodedDatagram(pkt, proto, result=res)


def summarize_pcap(path, port_map: dict[int, str] | None = None) -> DecodeSummary:
    """Decode a whole capture and return only the summary."""
    sm = DecodeSummary()
    for _ in decode_pcap(path, port_map, summary=sm):
        pass
    return sm


def _py(name: str, v):
    if name in _ADDR_FIELDS or (isinstance(v, np.ndarray) and v.shape == (16,)):  # next hops too
        return addr_str(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.floating):
        return float(v)
    iv = int(v)
    if name in _U64_COUNTER_FIELDS and iv < 0:
        iv &= 0xFFFFFFFFFFFFFFFF
    return iv


def records_as_dicts(arr: np.ndarray, kind: str) -> Iterator[dict]:
    """Rows of a flow/counter array as plain dicts (``type`` first, then the Avro fields)."""
    names = arr.dtype.names
    for row in arr:
        d = {"type": kind}
        for name in names:
            d[name] = _py(name, row[name])
        yield d


_FLOW_TABLE = [
    ("exporter", "exporter_addr"), ("src", "src_addr"), ("sport", "src_port"), ("dst", "dst_addr"),
    ("dport", "dst_port"), ("proto", "ip_protocol"), ("bytes", "bytes"), ("pkts", "packets"),
    ("rate", "sampling_rate"), ("vlan", "vlan"), ("in_if", "in_if"), ("out_if", "out_if"), ("flags", "tcp_flags"),
]
_COUNTER_TABLE = [
    ("exporter", "exporter_addr"), ("source", "source_id"), ("if", "if_index"), ("speed", "if_speed"),
    ("in_octets", "in_octets"), ("in_pkts", "in_ucast_pkts"), ("out_octets", "out_octets"),
    ("out_pkts", "out_ucast_pkts"), ("in_err", "in_errors"), ("out_err", "out_errors"),
    ("in_disc", "in_discards"), ("out_disc", "out_discards"),
]


def run_decode(
    path: str,
    fmt: str = "jsonl",
    port_map: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``fabricflow decode FILE [--format jsonl|table] [--port-map 2055=netflow,...]``; returns the exit code.

    0 when at least one export datagram was decoded, 1 otherwise (or when
    the file or arguments are unusable, with a message on ``err``).
    ``out``/``err`` default to the current ``sys.stdout``/``sys.stderr``.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    if fmt not in ("jsonl", "table"):
        print(f"error: unknown format {fmt!r} (jsonl or table)", file=err)
        return 1
    try:
        pmap = parse_port_map(port_map)
    except ValueError as e:
        print(f"error: {e}", file=err)
        return 1
    sm = DecodeSummary()
    flow_rows: list = []
    counter_rows: list = []
    try:
        for item in decode_pcap(path, pmap, summary=sm):
            res = item.result
            if res is None:
                continue
            if fmt == "jsonl":
                for kind, arr in (("flow", res.flows), ("counter", res.counters)):
                    for d in records_as_dicts(arr, kind):
                        out.write(json.dumps(d, separators=(",", ":")) + "\n")
            else:
                if len(res.flows):
                    flow_rows.append(res.flows)
                if len(res.counters):
                    counter_rows.append(res.counters)
    except BrokenPipeError:  # e.g. piped into `head`
        return 0
    except (PcapError, OSError) as e:
        print(f"error: cannot read {path}: {e}", file=err)
        return 1
    if fmt == "table":
        _print_tables(out, flow_rows, counter_rows)
    for line in sm.lines():
        print(line, file=err)
    return 0 if sm.decoded else 1


def _print_tables(out: TextIO, flow_rows: list, counter_rows: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    flows = np.concatenate(flow_rows) if flow_rows else np.zeros(0, FLOW_DTYPE)
    ctrs = np.concatenate(counter_rows) if counter_rows else np.zeros(0, COUNTER_DTYPE)
    for what, rows, columns in (("flows", flows, _FLOW_TABLE), ("counter samples", ctrs, _COUNTER_TABLE)):
        if not len(rows):
            continue
        t = Table(title=f"{what} ({len(rows)})")
        for title, _ in columns:
            t.add_column(title)
        for row in rows:
            t.add_row(*(str(_py(name, row[name])) for _, name in columns))
        console.print(t)
