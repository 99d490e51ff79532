"""Drop-reason metrics from sFlow dropped-packet notifications (discards.raw.v1; pure logic, no Kafka).

Each notification is one packet a switch (or host) dropped, with the spec's drop reason. It is counted once
(notifications are not sampled; an agent that rate-limits them says so in its own ``drops`` counter, which
ingest does not turn into packets) per switch port and reason, per node and reason (the dropped packet's
source node, ``direction="tx"``, and destination node, ``direction="rx"``, from the inventory) and per job and
reason (the destination node's job at the notification's time, else the source node's). Reasons are the
spec's names (:mod:`schemas.drop_reasons`) plus ``other``: a bounded label. docs/metrics.md, "Drop reasons".
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from schemas.drop_reasons import reason_names
from processors.logic.enrich.inventory import Inventory

from .labels import UNKNOWN, node_label
from .store import COUNTER

__all__ = ["DropFamilies", "drop_labels"]


def drop_labels(inv: Inventory, arr: np.ndarray) -> dict[str, list]:
    """Per discard row (DISCARD_DTYPE): switch, port (the egress ifIndex of an egress drop, else the input
    one; "unknown" when neither is known), the node on that port, reason name, source and destination node,
    and job."""
    agents = arr["exporter_addr"]
    sw = inv.switch_for_agents(agents).tolist()
    ifx = np.where(arr["out_if"] > 0, arr["out_if"], arr["in_if"])
    peers = inv.port_info(agents, ifx)[0].tolist()
    src_e, dst_e = inv.lookup(arr["src_addr"]), inv.lookup(arr["dst_addr"])
    t = arr["time_received_ms"]
    src_job = inv.jobs_at(inv.entry_node_id[src_e + 1], t)
    dst_job = inv.jobs_at(inv.entry_node_id[dst_e + 1], t)
    switch = [s or inv.switch_name(bytes(a)) for s, a in zip(sw, agents)]
    return {
        "switch": [node_label(s) if s else UNKNOWN for s in switch],
        "port": [str(i) if i > 0 else UNKNOWN for i in ifx.tolist()],
        "peer": [node_label(p) for p in peers],
        "reason": reason_names(arr["reason"]),
        "src_node": [node_label(n) for n in inv.entry_node[src_e + 1].tolist()],
        "dst_node": [node_label(n) for n in inv.entry_node[dst_e + 1].tolist()],
        "job": [d or s or UNKNOWN for d, s in zip(dst_job.tolist(), src_job.tolist())],
    }


class DropFamilies:
    """The three drop-reason families; ``family(name, doc, labels, kind, ttl)`` registers one."""

    def __init__(self, family, ttl_s: float):
        self.port = family("sflow_port_dropped_packets_total", "Packets the switch port dropped, per sFlow drop "
                           "reason (dropped-packet notifications, each counted once)",
                           ("switch", "port", "node", "reason"), COUNTER, ttl_s)
        self.node = family("node_dropped_packets_total", "Dropped packets per node (tx: the node sent it, rx: it "
                           "was for the node) and sFlow drop reason", ("node", "direction", "reason"), COUNTER)
        self.job = family("job_dropped_packets_total", "Dropped packets per job (the destination node's, else the "
                          "source node's) and sFlow drop reason", ("job", "reason"), COUNTER)

    def add(self, inv: Inventory, arr: np.ndarray, now: float) -> int:
        """Count the notifications of ``arr`` (DISCARD_DTYPE rows); rows applied."""
        if len(arr) == 0:
            return 0
        lab = drop_labels(inv, arr)
        ports = Counter(zip(lab["switch"], lab["port"], lab["peer"], lab["reason"]))
        nodes = Counter(zip(lab["src_node"], ["tx"] * len(arr), lab["reason"]))
        nodes.update(zip(lab["dst_node"], ["rx"] * len(arr), lab["reason"]))
        for key, n in ports.items():
            self.port.inc(key, n)
            self.port.touched[key] = now
        for key, n in nodes.items():
            if key[0] != UNKNOWN:
                self.node.inc(key, n)
        for key, n in Counter(zip(lab["job"], lab["reason"])).items():
            self.job.inc(key, n)
        return len(arr)
