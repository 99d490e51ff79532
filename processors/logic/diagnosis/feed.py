"""What the engine hands the diagnosis rules: the port state of the link-health detector and the evidence of
the event, turned into a diagnosis record per incast, straggler and link event.

:class:`Diagnoser` is built with the link-health detector's ``node_state`` / ``port_state`` look-ups (so
this package imports no detector). The congestion detector calls :func:`~.rules.diagnose_congestion`
itself: the evidence of an alert is its own state. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .catalog import DiagnosisConfig
from .rules import diagnose_incast, diagnose_link, diagnose_straggler
from .signals import FlowSignals, PortFacts, cell_signals

__all__ = ["Diagnoser"]

NodeState = Callable[..., dict | None]  # (node, now_ms, since_ms=None) -> port state
PortState = Callable[[str, int, int], dict | None]  # (exporter, if_index, now_ms) -> port state


class Diagnoser:
    def __init__(self, config: DiagnosisConfig, node_state: NodeState, port_state: PortState):
        self.config = config
        self.node_state = node_state
        self.port_state = port_state

    def incast(self, event: dict, start_ms: int) -> dict:
        """The diagnosis of an incast record so far (its ``_signals``: the event's sampled-packet signals)."""
        sig = list(event.get("_signals") or [0] * 7)
        flows = FlowSignals(*(float(x) for x in sig[:6]), sampling_rate=int(sig[6]))
        port = PortFacts.of(self.node_state(event["destination"], event["window_end_ms"], since_ms=start_ms))
        return diagnose_incast(event["destination"], flows, port, self.config, start_ms)

    def straggler(self, score: dict, peer: str, cells: dict, interner, categories: tuple[str, ...]) -> dict:
        """The diagnosis of a flagged straggler score, from the window's cells (its job traffic's marks), its
        port and the port of ``peer`` (the node it sends most to)."""
        node, job, we = score["node"], score["job"], int(score["window_end_ms"])
        code = interner.index.get
        n, j = code(node, -1), code(job, -1)
        cats = [code(c, -1) for c in categories]
        if len(cells["sn"]):
            mask = (cells["sj"] == j) & (cells["dj"] == j) & np.isin(cells["cat"], cats)
            mask &= (cells["sn"] == n) | (cells["dn"] == n)
        else:
            mask = np.zeros(0, dtype=bool)
        flows = cell_signals(cells, mask, code("rocev2", -1))
        median = float(score["peer_median_recv"])
        recv_ratio = float(score["recv_bytes"]) / median if median > 0 else 0.0
        own = PortFacts.of(self.node_state(node, we))
        peer_port = PortFacts.of(self.node_state(peer, we)) if peer else None
        return diagnose_straggler(node, job, own, peer, peer_port, flows, recv_ratio, we, self.config)

    def link(self, record: dict) -> dict | None:
        """The diagnosis of a link record (None for samples and the kinds that carry none)."""
        port = PortFacts.of(self.port_state(record["exporter"], int(record["if_index"]), int(record["time_ms"])))
        return diagnose_link(record, port, self.config)
