"""A small cluster with hostile names, its live store and a matching archive, for the console's API tests."""

from __future__ import annotations

from console.layout import Layout
from console.live import LiveStore
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns, table_from_dicts
from tests.support.archive import T0, enriched

EVIL = "<script>alert(1)</script>"  # a valid inventory name (no spaces): must render as text
EVIL2 = "<img/src=x/onerror=alert(2)>"
W = 10_000
WS = T0 + 3_600_000  # 01:00 on the fixture day

INVENTORY = {
    "nodes": [
        {"name": "gpu01", "ips": ["10.0.1.1"], "rack": "r1", "switch": "tor1", "group": "gpu", "capacity": "25G"},
        {"name": "gpu02", "ips": ["10.0.1.2"], "rack": "r1", "switch": "tor1", "group": "gpu", "capacity": "25G"},
        {"name": EVIL, "ips": ["10.0.1.3"], "rack": "r1", "switch": "tor1", "group": "gpu", "capacity": "25G"},
        {"name": "gpu04", "ips": ["10.0.2.1"], "rack": "r2", "switch": "tor2", "group": "gpu", "capacity": "25G"},
        {"name": "stor01", "ips": ["10.0.10.1"], "rack": "r2", "switch": "tor2", "group": "storage", "capacity": "100G"},
    ],
    "switches": [
        {"name": "tor1", "agent": "10.0.255.1", "ports": [
            {"if_index": 1, "node": "gpu01", "speed": "25G"}, {"if_index": 2, "node": "gpu02", "speed": "25G"},
            {"if_index": 3, "node": EVIL, "speed": "25G"}]},
        {"name": "tor2", "agent": "10.0.255.2", "ports": [
            {"if_index": 1, "node": "gpu04", "speed": "25G"}, {"if_index": 17, "node": "stor01", "speed": "100G"}]},
    ],
    "jobs": [{"name": "train-a", "nodes": ["gpu01", "gpu02", EVIL, "gpu04"]}],
}


def layout() -> Layout:
    from processors.logic.enrich.inventory import Inventory

    return Layout.from_inventory(Inventory.from_dict(INVENTORY))


def cell(ws, src, dst, cat, b, level="node", samples=100):
    return {"window_start_ms": ws, "window_end_ms": ws + W, "level": level, "src": src, "dst": dst, "category": cat,
            "bytes_est": b, "packets_est": b // 1000, "flow_records": 3, "samples": samples}


def cells(ws):
    return [cell(ws, "gpu01", "gpu02", "collective", 5_000_000), cell(ws, "gpu02", EVIL, "collective", 4_000_000),
            cell(ws, EVIL, "gpu04", "collective", 1_000_000), cell(ws, "gpu04", "gpu01", "collective", 4_500_000),
            cell(ws, "stor01", "gpu01", "storage", 2_000_000), cell(ws, "gpu01", "gpu02", "storage", 10_000),
            cell(ws, EVIL2, "gpu01", "other", 1234),
            cell(ws, "gpu", "gpu", "collective", 14_500_000, "group"), cell(ws, "storage", "gpu", "storage", 2_000_000, "group")]


INCAST = {"event_id": "gpu02-1", "state": "open", "window_start_ms": WS + 2000, "window_end_ms": WS + 2200,
          "destination": "gpu02", "destination_group": "gpu", "sources": ["gpu01", EVIL, "gpu04"],
          "source_rates_bps": [9e9, 9e9, 9e9], "aggregate_bps": 27e9, "capacity_bps": 25e9, "fraction": 1.08,
          "fraction_low": 0.9, "fraction_high": 1.2, "samples": 120, "sampling_rate": 4096,
          "diagnosis": {"verdict": "switch_buffer_microburst", "title": "switch buffer micro-burst",
                        "summary": f"incast into gpu02: tor1/if2 dropped 9000 packets/s while {EVIL} and 2 more burst",
                        "next_step": "Check tor1's buffer and ECN thresholds on tor1/if2's egress queue",
                        "cannot_tell": "sFlow samples 1 packet in 4096: it cannot see sub-millisecond queue depth",
                        "missing": [], "evidence": [
                            {"signal": "port_out_discards_per_s", "source": "counters", "subject": "tor1/if2 (gpu02's port)",
                             "value": 9000.0, "low": 9000.0, "high": 9000.0, "note": "counter interval 10 s"},
                            {"signal": "ecn_capable_share", "source": "flows", "subject": EVIL2, "value": 0.0,
                             "low": 0.0, "high": 0.03, "note": "120 sampled packets at 1:4096"}]}}


def score(ws, node, sent, straggler=False):
    return {"window_start_ms": ws, "window_end_ms": ws + W, "job": "train-a", "node": node, "sent_bytes": sent,
            "recv_bytes": sent, "peer_median_sent": 5e6, "peer_median_recv": 5e6, "ratio_sent": sent / 5e6,
            "score": -6.0 if straggler else 0.1, "evidence_windows": 3, "straggler": straggler, "peers": 3}


def link(t, switch, idx, kind="sample", speed=25_000_000_000, errors=0.0, detail=""):
    return {"time_ms": t, "interval_ms": 10_000, "kind": kind, "exporter": "10.0.255.1", "switch": switch,
            "if_index": idx, "if_speed": speed, "previous_if_speed": 25_000_000_000, "util_in": 0.2, "util_out": 0.3,
            "in_errors_per_s": errors, "out_errors_per_s": 0.0, "in_discards_per_s": 0.0, "out_discards_per_s": 0.0,
            "oper_up": True, "detail": detail}


ALERT = {"dedup_key": "segmentation|" + EVIL2, "rule": "segmentation", "severity": "critical", "state": "firing",
         "summary": f"segmentation: {EVIL2} -> gpu01", "entities": {"src_node": EVIL2, "dst_node": "gpu01"},
         "window_start_ms": WS, "window_end_ms": WS + W, "first_seen_ms": WS, "last_seen_ms": WS + W,
         "bytes_est": 1234, "flows": 1, "sample_flows": ["6 10.9.9.9:1 -> 10.0.1.1:22"]}


def fill_store(store: LiveStore, windows=3) -> None:
    for k in range(windows):
        ws = WS + k * W
        for c in cells(ws):
            store.add("matrix", c)
        for n, b in (("gpu01", 5e6), ("gpu02", 5e6), (EVIL, 1e6), ("gpu04", 5e6)):
            store.add("straggler", score(ws, n, int(b), straggler=(n == EVIL and k > 0)))
        store.add("link", link(ws + W, "tor1", 1))
        store.add("link", link(ws + W, "tor2", 1, speed=1_000_000_000 if k > 0 else 25_000_000_000))
    store.add("link", link(WS + W + 5000, "tor2", 1, kind="link_downgrade", speed=1_000_000_000,
                           detail="if_speed 25000000000 -> 1000000000 bps"))
    store.add("incast", INCAST)
    store.add("alert", ALERT)


def quality(ws, exporter, lost):
    """An ingest_quality window of an sFlow exporter (``lost`` datagrams of 100 lost in transit)."""
    return {"window_start_ms": ws, "window_end_ms": ws + W, "exporter": exporter, "protocol": "sflow5",
            "ingest_worker": 0, "datagrams": 100, "records": 600, "sequence_unit": "datagrams",
            "sequence_lost": lost, "sequence_received": 100, "loss_ratio": lost / (lost + 100),
            "records_lost_est": lost * 6, "records_without_rate": 0, "duplicates": 0, "restarts": 0,
            "clock_skew_ms": None, "clock_skew_max_ms": None, "sampler_samples": 600, "sampler_drops": 0}


def write_archive(root: str, windows=3) -> None:
    """The same outputs in the archive, plus flows for the drill-down."""
    w = ParquetWriter(None, root)

    def put(dataset, rows, avsc, offset=0):
        b = HourlyBuffer(dataset, 0)
        b.add(table_from_dicts(rows, avsc), offset)
        w.write_plan(b.flush_plan(force=True))

    allcells = [c for k in range(windows) for c in cells(WS + k * W)]
    put("matrix_windows", allcells, "matrix_cell")
    put("incast_events", [INCAST], "incast_event")
    put("straggler_scores", [score(WS + k * W, n, 1_000_000, straggler=(n == EVIL and k > 0))
                             for k in range(windows) for n in ("gpu01", EVIL)], "straggler_score")
    put("link_health", [link(WS + W, "tor2", 1), link(WS + W + 5000, "tor2", 1, kind="link_downgrade",
                                                           speed=1_000_000_000)], "link_health")
    put("alerts", [ALERT], "alert")
    put("ingest_quality", [quality(WS + k * W, exp, lost) for k in range(windows)
                           for exp, lost in (("10.0.255.1", 0), (EVIL, 9))], "ingest_quality")
    flows = []
    for i, src in enumerate(["gpu01", EVIL, "gpu04"]):
        flows.append({"time_end_ms": WS + 2100, "src_node": src, "dst_node": "gpu02", "category": "collective",
                      "bytes": 1500, "packets": 1, "bytes_est": 1500 * 4096 * (i + 1), "packets_est": 4096,
                      "sampling_rate": 4096, "src_addr": f"10.0.1.{i + 1}", "dst_addr": "10.0.1.2",
                      "src_port": 40000 + i, "dst_port": 50051, "ip_protocol": 6,
                      "src_job": "train-a", "dst_job": "train-a", "exporter_addr": "10.0.255.1"})
    flows.append({"time_end_ms": WS + 3000, "src_node": "gpu01", "dst_node": "gpu04", "category": "collective",
                  "bytes": 1500, "packets": 1, "bytes_est": 1000, "packets_est": 1, "sampling_rate": 1,
                  "src_addr": "10.0.1.1", "dst_addr": "10.0.2.1", "src_job": "train-a", "dst_job": "train-a"})
    b = HourlyBuffer("flows_enriched", 0)
    b.add(as_v2(enriched(flows)), 0)
    w.write_plan(b.flush_plan(force=True))


def as_v2(rows):
    """Enriched rows as the archive sink buffers a flows.enriched.v2 message of them (label columns archived as
    dictionary columns from the codes, as in production)."""
    from schemas import codec

    return codec.decode_coded(codec.encode_coded("flow_enriched_batch_v2", rows))


LATER = WS + 2 * 3_600_000  # 03:00 on the fixture day: archived flows only, no live or matrix windows


def write_later_flows(root: str) -> None:
    """Flows in the hour at :data:`LATER` (flows_enriched with its rollups, no matrix windows): a range there is
    answered from the rollups. One duplicate (another exporter saw it) and one NetFlow v9 record."""
    rows = [{"time_end_ms": LATER + 65_000, "src_node": "gpu01", "dst_node": "gpu02", "src_group": "gpu",
             "dst_group": "gpu", "category": "collective", "bytes": 1500, "packets": 2, "bytes_est": 6_000_000,
             "packets_est": 8192},
            {"time_end_ms": LATER + 1_800_000, "src_node": "stor01", "dst_node": "gpu04", "src_group": "storage",
             "dst_group": "gpu", "category": "storage", "bytes": 1500, "packets": 1, "bytes_est": 3_000_000,
             "packets_est": 4096},
            {"time_end_ms": LATER + 70_000, "src_node": "gpu01", "dst_node": "gpu02", "category": "collective",
             "bytes": 1500, "packets": 1, "bytes_est": 6_000_000, "packets_est": 4096, "duplicate": True},
            {"time_end_ms": LATER + 75_000, "src_node": "gpu02", "dst_node": "gpu01", "category": "collective",
             "bytes": 1500, "packets": 1, "bytes_est": 777, "packets_est": 1, "export_protocol": 3}]
    b = HourlyBuffer("flows_enriched", 1)
    b.add(as_v2(enriched(rows)), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))
    # tor1 port 1 (gpu01) for two hours, a sample a minute: half its 25G in, 10 errors a minute
    from tests.support.flows import counters

    samples = [{"exporter": "10.0.255.1", "if_index": 1, "t": LATER + k * 60_000,
                "in_octets": k * 60 * 25_000_000_000 // 8 // 2, "in_errors": 10 * k} for k in range(120)]
    b = HourlyBuffer("counters_raw", 0)
    b.add(table_from_columns(counters(samples), "counter_sample"), 0)
    ParquetWriter(None, root).write_plan(b.flush_plan(force=True))


def archive_root_for(tmp_path_factory) -> str:
    """A module's archive: the windows of :func:`write_archive` and the later flows of :func:`write_later_flows`."""
    root = str(tmp_path_factory.mktemp("archive"))
    write_archive(root)
    write_later_flows(root)
    return root
