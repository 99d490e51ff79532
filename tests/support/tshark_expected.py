"""Extract expected flow records from tshark's NetFlow/IPFIX decode (for tests/captures/<case>/expected.json).

    python3 tests/support/tshark_expected.py [--biflow] CAPTURE.pcap UDP_PORT > expected.json

Runs ``tshark -r CAPTURE -d udp.port==PORT,cflow -T json --no-duplicate-keys`` and
keeps, per data record: addresses, protocol, raw ports, packets, octets, ToS,
TCP flags, VLAN and the flow start/end in unix ms (absolute times as printed by
tshark; relative ones as export time - (sysUptime - switched)). Standard library only.

``--biflow`` (:func:`expected_biflow`): the directional records of an RFC 5103 biflow IPFIX capture.
tshark 4.0 labels reverse IEs (PEN 29305) "[Reverse]" but gives them the forward field names
(``cflow.octets``, ``cflow.packets``, ``cflow.tos``, ``cflow.tcpflags``), so its JSON is read with
duplicate keys kept, in template order: the first occurrence is the forward value, the second the reverse
one (softflowd's templates list every reverse IE after its forward IE). Each biflow record gives its
forward record and, when its reverse packet count is > 0, a reverse record with source and destination
swapped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone


def _abs_ms(text: str) -> int:
    # "Jul  1, 2024 12:00:00.600000000 UTC"
    head, frac = text.replace(" UTC", "").rsplit(".", 1)
    dt = datetime.strptime(" ".join(head.split()), "%b %d, %Y %H:%M:%S").replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1000 + int(frac[:3].ljust(3, "0"))


def _records(node, out):
    if isinstance(node, dict):
        if "cflow.packets" in node or "cflow.octets" in node:
            out.append(node)
            return
        for v in node.values():
            _records(v, out)
    elif isinstance(node, list):
        for v in node:
            _records(v, out)


def _int(v) -> int:
    return int(v, 16) if isinstance(v, str) and v.startswith("0x") else int(v)


def _tshark(pcap: str, port: int, *options: str, hook=None) -> tuple[list[str], list]:
    """(command, decoded JSON) of tshark's cflow decode of ``pcap``'s datagrams to UDP ``port``."""
    cmd = ["tshark", "-r", pcap, "-d", f"udp.port=={port},cflow", "-T", "json", *options]
    return cmd, json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout,
                           object_pairs_hook=hook)


def expected(pcap: str, port: int) -> dict:
    cmd, packets = _tshark(pcap, port, "--no-duplicate-keys")
    records, sequences, versions = [], [], Counter()
    for p in packets:
        cf = p["_source"]["layers"].get("cflow")
        if cf is None:
            continue
        sequences.append(int(cf["cflow.sequence"]))
        ts = cf.get("cflow.timestamp_tree", {})
        export_ms = int(ts.get("cflow.unix_secs", 0)) * 1000 + int(ts.get("cflow.unix_nsecs", 0)) // 1_000_000
        uptime_ms = round(float(cf["cflow.sysuptime"]) * 1000) if "cflow.sysuptime" in cf else None
        found: list = []
        _records(cf, found)
        for r in found:
            v6 = "cflow.srcaddrv6" in r
            src = r.get("cflow.srcaddrv6" if v6 else "cflow.srcaddr", "0.0.0.0")
            dst = r.get("cflow.dstaddrv6" if v6 else "cflow.dstaddr", "0.0.0.0")
            proto = int(r.get("cflow.protocol", 0))
            sport, dport = int(r.get("cflow.srcport", 0)), int(r.get("cflow.dstport", 0))
            if "cflow.icmp_type_code_ipv4" in r or "cflow.icmp_ipv6_type" in r or "cflow.icmp_type" in r:
                sport = 0
            key_ports = (0, 0) if proto in (1, 58) else (sport, dport)
            rec = {
                "key": f"{src}|{dst}|{proto}|{key_ports[0]}|{key_ports[1]}",
                "src": src, "dst": dst, "proto": proto, "src_port": sport, "dst_port": dport,
                "packets": int(r["cflow.packets"]), "bytes": int(r["cflow.octets"]),
                "tos": _int(r.get("cflow.tos", "0")), "tcp_flags": _int(r.get("cflow.tcpflags", "0")),
                "vlan": int(r.get("cflow.vlanid", r.get("cflow.srcvlan", 0))),
                "ip_version": 6 if v6 else 4,
            }
            td = r.get("cflow.timedelta_tree", {})
            if "cflow.abstimestart" in td:
                rec["first_ms"], rec["last_ms"] = _abs_ms(td["cflow.abstimestart"]), _abs_ms(td["cflow.abstimeend"])
            elif "cflow.timestart" in td and uptime_ms is not None:
                rec["first_ms"] = export_ms - (uptime_ms - round(float(td["cflow.timestart"]) * 1000))
                rec["last_ms"] = export_ms - (uptime_ms - round(float(td["cflow.timeend"]) * 1000))
            records.append(rec)
            versions[rec["ip_version"]] += 1
    return {
        "source": " ".join(cmd),
        "datagrams": len(sequences),
        "sequences": sequences,
        "ip_versions": {str(k): v for k, v in sorted(versions.items())},
        "totals": {"records": len(records), "packets": sum(r["packets"] for r in records), "bytes": sum(r["bytes"] for r in records)},
        "records": records,
    }


def _pairs(pairs):
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


def expected_biflow(pcap: str, port: int) -> dict:
    """Directional records of an RFC 5103 biflow capture (module docstring)."""
    _cmd, packets = _tshark(pcap, port, hook=_pairs)
    records = []
    biflows = 0
    for p in packets:
        cf = p["_source"][0]["layers"][0].get("cflow")
        if cf is None:
            continue
        found: list = []
        _records(cf[0], found)
        for r in found:
            def one(name, i, default="0"):
                vals = r.get(name, [])
                return vals[i] if len(vals) > i else default
            v6 = "cflow.srcaddrv6" in r
            src = one("cflow.srcaddrv6" if v6 else "cflow.srcaddr", 0, "0.0.0.0")
            dst = one("cflow.dstaddrv6" if v6 else "cflow.dstaddr", 0, "0.0.0.0")
            proto = int(one("cflow.protocol", 0))
            sport, dport = int(one("cflow.srcport", 0)), int(one("cflow.dstport", 0))
            common = {"proto": proto, "ip_version": 6 if v6 else 4}
            records.append({"src": src, "dst": dst, "src_port": sport, "dst_port": dport,
                            "packets": int(one("cflow.packets", 0)), "bytes": int(one("cflow.octets", 0)),
                            "tos": _int(one("cflow.tos", 0)), "tcp_flags": _int(one("cflow.tcpflags", 0)), **common})
            rpk = int(one("cflow.packets", 1))
            if len(r.get("cflow.packets", [])) > 1:
                biflows += 1
            if rpk > 0:
                rp = (sport, dport) if proto in (1, 58) else (dport, sport)
                records.append({"src": dst, "dst": src, "src_port": rp[0], "dst_port": rp[1], "packets": rpk,
                                "bytes": int(one("cflow.octets", 1)), "tos": _int(one("cflow.tos", 1)),
                                "tcp_flags": _int(one("cflow.tcpflags", 1)), **common})
    return {"biflow_records": biflows, "directional_records": len(records), "records": records}


if __name__ == "__main__":
    args = sys.argv[1:]
    biflow = args[:1] == ["--biflow"]
    pcap, port = args[biflow:biflow + 2]
    json.dump((expected_biflow if biflow else expected)(pcap, int(port)), sys.stdout, indent=1)
    sys.stdout.write("\n")
