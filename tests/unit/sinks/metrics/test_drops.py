"""Drop-reason metrics from dropped-packet notifications: per port, node and job, through the metrics sink."""

from __future__ import annotations

import numpy as np

from processors.logic.enrich.inventory import Inventory
from schemas import codec
from schemas.columns import DISCARD_DTYPE, addr16
from sinks.metrics.state import MetricsState
from tests.support.metrics_state import INVENTORY, T0, scrape, values


def discards(rows: list[dict]) -> bytes:
    arr = np.zeros(len(rows), DISCARD_DTYPE)
    arr["egress_queue"] = arr["roce_opcode"] = -1
    for i, r in enumerate(rows):
        arr[i]["exporter_addr"] = np.frombuffer(addr16(r.get("agent", "10.0.255.1")), np.uint8)
        arr[i]["src_addr"] = np.frombuffer(addr16(r.get("src", "10.0.0.3")), np.uint8)
        arr[i]["dst_addr"] = np.frombuffer(addr16(r.get("dst", "10.0.0.1")), np.uint8)
        arr[i]["in_if"], arr[i]["out_if"] = r.get("in_if", 0), r.get("out_if", 1)
        arr[i]["reason"] = r.get("reason", 259)
        arr[i]["time_received_ms"] = T0
    return codec.encode_batch("discard_batch", arr)


def test_drop_reasons_per_port_node_and_job():
    st = MetricsState(Inventory.from_dict(INVENTORY))
    msg = discards([{}, {}, {"reason": 258, "in_if": 2, "out_if": 0, "src": "10.0.0.2", "dst": "10.0.1.1"},
                    {"agent": "10.9.9.9", "reason": 5000, "src": "192.0.2.1", "dst": "192.0.2.2"}])
    assert st.add_values("discards", [msg, b"garbage"], now=1.0) == 4
    scrape(st)
    assert values(st, "sflow_port_dropped_packets_total") == {
        ("tor-1", "1", "gpu-1", "no_buffer_space"): 2.0,  # egress drop towards gpu-1: out_if 1, its peer
        ("tor-1", "2", "gpu-2", "acl"): 1.0,  # ingress drop: in_if 2
        ("unknown", "1", "unknown", "other"): 1.0,  # an agent not in the inventory; a reason code the spec lacks
    }
    assert values(st, "node_dropped_packets_total") == {
        ("gpu-3", "tx", "no_buffer_space"): 2.0, ("gpu-1", "rx", "no_buffer_space"): 2.0,
        ("gpu-2", "tx", "acl"): 1.0, ("st-1", "rx", "acl"): 1.0,
    }
    assert values(st, "job_dropped_packets_total") == {
        ("job-a", "no_buffer_space"): 2.0, ("unknown", "acl"): 1.0, ("unknown", "other"): 1.0}
    assert values(st, "fabricflow_metrics_undecodable_messages_total")[("discards", "not_avro")] == 1.0
