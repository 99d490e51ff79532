"""Ground truth of a simulation run: labelled faults and true per-window node-to-node bytes.

Bytes and packets are IP-layer totals before any sampling, summed per window of
``window_ms`` (default 10 s) by (src, dst); an endpoint is named by its inventory node
name, or by its dotted IPv4 address when it is not in the inventory (externals,
unregistered hosts). Output is JSON lines (see :meth:`TruthRecorder.lines`).
"""

from __future__ import annotations

import ipaddress
import json
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import numpy as np

from .faults import fault_labels
from .model import Scenario, ip_int

KEY_DTYPE = np.dtype([("w", "i8"), ("src", "u4"), ("dst", "u4")])


class TruthRecorder:
    def __init__(self, scen: Scenario, seed: int, start_ms: int, duration_ms: int, window_ms: int):
        self.scen = scen
        self.seed = seed
        self.start_ms = start_ms
        self.duration_ms = duration_ms
        self.window_ms = window_ms
        self.names = {ip_int(ip): n.name for n in scen.cluster.nodes.values() for ip in n.ips}
        self.pairs: dict[int, dict[tuple[int, int], list[int]]] = defaultdict(dict)
        self.total_bytes = 0
        self.total_packets = 0
        self.exporters: dict[str, dict[str, int]] = {}

    def name(self, ip: int) -> str:
        return self.names.get(ip) or str(ipaddress.IPv4Address(ip))

    def add(self, segs: np.ndarray) -> None:
        """Count segments (each lies inside one chunk, chunks tile windows)."""
        if len(segs) == 0:
            return
        keys = np.empty(len(segs), KEY_DTYPE)
        keys["w"] = segs["t0"] // self.window_ms
        keys["src"] = segs["src"]
        keys["dst"] = segs["dst"]
        uniq, inv = np.unique(keys, return_inverse=True)
        inv = inv.ravel()
        by = np.bincount(inv, weights=segs["bytes"].astype(np.float64)).astype(np.int64)
        pk = np.bincount(inv, weights=segs["packets"].astype(np.float64)).astype(np.int64)
        for k, b, p in zip(uniq.tolist(), by.tolist(), pk.tolist()):
            cell = self.pairs[k[0]].setdefault((k[1], k[2]), [0, 0])
            cell[0] += b
            cell[1] += p
        self.total_bytes += int(segs["bytes"].sum())
        self.total_packets += int(segs["packets"].sum())

    def count_datagram(self, exporter: str, kind: str, dropped: bool) -> None:
        st = self.exporters.setdefault(exporter, {"kind": kind, "generated": 0, "dropped": 0})
        st["generated"] += 1
        st["dropped"] += int(dropped)

    def lines(self) -> Iterator[dict]:
        """``scenario`` line, one ``fault`` line per fault, one ``window`` line per window, ``summary`` last."""
        s = self.scen
        yield {
            "type": "scenario",
            "name": s.name,
            "seed": self.seed,
            "start_ms": self.start_ms,
            "duration_ms": self.duration_ms,
            "window_ms": self.window_ms,
            "sflow_sampling_rate": s.sflow.sampling_rate,
            "flow_exporters": {fe.name: {"protocol": fe.protocol, "source_id": fe.source_id,
                                         "sampling_interval": fe.sampling_interval} for fe in s.flow_exporters},
            "inventory": s.cluster.to_inventory_dict(),
        }  # fmt: skip
        labels = fault_labels(s, self.start_ms, self.duration_ms)
        for lab in labels:
            if lab["kind"] == "exporter_loss":
                lab["entities"]["dropped"] = self.exporters.get(lab["entities"]["exporter"], {}).get("dropped", 0)
            yield lab
        for w in sorted(self.pairs):
            named: dict[tuple[str, str], list[int]] = {}  # a multi-NIC node's addresses are one endpoint
            for (a, b), v in self.pairs[w].items():
                cell = named.setdefault((self.name(a), self.name(b)), [0, 0])
                cell[0] += v[0]
                cell[1] += v[1]
            pairs = [{"src": a, "dst": b, "bytes": v[0], "packets": v[1]} for (a, b), v in sorted(named.items())]
            yield {
                "type": "window",
                "start_ms": self.start_ms + w * self.window_ms,
                "end_ms": self.start_ms + (w + 1) * self.window_ms,
                "bytes": sum(p["bytes"] for p in pairs),
                "pairs": pairs,
            }
        yield {
            "type": "summary",
            "total_bytes": self.total_bytes,
            "total_packets": self.total_packets,
            "exporters": self.exporters,
        }

    def write(self, path: str | Path) -> None:
        with open(path, "w") as fh:
            for line in self.lines():
                fh.write(json.dumps(line, sort_keys=True) + "\n")


def read_truth(path: str | Path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]
