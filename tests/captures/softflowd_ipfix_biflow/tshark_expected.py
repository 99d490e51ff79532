"""Expected directional records of an RFC 5103 biflow IPFIX capture, from tshark's decode.

    python3 tests/captures/softflowd_ipfix_biflow/tshark_expected.py CAPTURE.pcap UDP_PORT > expected.json

tshark 4.0 labels reverse IEs (PEN 29305) "[Reverse]" but gives them the
forward field names (``cflow.octets``, ``cflow.packets``, ``cflow.tos``,
``cflow.tcpflags``), so its JSON is read with duplicate keys kept, in template
order: the first occurrence is the forward value, the second the reverse one
(softflowd's templates list every reverse IE after its forward IE). Each
biflow record gives its forward record and, when its reverse packet count is
> 0, a reverse record with source and destination swapped. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys


def _pairs(pairs):
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


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


def expected(pcap: str, port: int) -> dict:
    cmd = ["tshark", "-r", pcap, "-d", f"udp.port=={port},cflow", "-T", "json"]
    packets = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout, object_pairs_hook=_pairs)
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
            fwd = {"src": src, "dst": dst, "src_port": sport, "dst_port": dport,
                   "packets": int(one("cflow.packets", 0)), "bytes": int(one("cflow.octets", 0)),
                   "tos": _int(one("cflow.tos", 0)), "tcp_flags": _int(one("cflow.tcpflags", 0)), **common}
            records.append(fwd)
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
    json.dump(expected(sys.argv[1], int(sys.argv[2])), sys.stdout, indent=1)
    sys.stdout.write("\n")
