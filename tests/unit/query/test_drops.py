"""`query.drops`: drop reasons per port, node and job from archived dropped-packet notifications, attributed
with the inventory as the metrics sink attributes them."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

from processors.logic.enrich.inventory import Inventory
from query.drops import drop_reasons
from query.reports import ArchiveQuery
from schemas.columns import DISCARD_DTYPE, addr16
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter

T0 = 1_800_000_000_000 // 3_600_000 * 3_600_000
INVENTORY = {
    "nodes": [{"name": "gpu-1", "addresses": ["10.0.0.1"], "group": "gpu"},
              {"name": "gpu-2", "addresses": ["10.0.0.2"], "group": "gpu"},
              {"name": "gpu-3", "addresses": ["10.0.0.3"], "group": "gpu"}],
    "jobs": [{"name": "job-a", "nodes": ["gpu-1", "gpu-3"]}],
    "switches": [{"name": "tor-1", "agents": ["10.0.255.1"], "ports": {1: {"peer": "gpu-1"}, 2: {"peer": "gpu-2"}}}],
}


def archive(root: str, rows: list[dict]) -> None:
    arr = np.zeros(len(rows), DISCARD_DTYPE)
    arr["egress_queue"] = arr["roce_opcode"] = -1
    for i, r in enumerate(rows):
        arr[i]["exporter_addr"] = np.frombuffer(addr16("10.0.255.1"), np.uint8)
        arr[i]["src_addr"] = np.frombuffer(addr16(r.get("src", "10.0.0.3")), np.uint8)
        arr[i]["dst_addr"] = np.frombuffer(addr16(r.get("dst", "10.0.0.1")), np.uint8)
        arr[i]["in_if"], arr[i]["out_if"] = r.get("in_if", 0), r.get("out_if", 1)
        arr[i]["reason"] = r.get("reason", 259)
        arr[i]["bytes"] = 4096
        arr[i]["time_received_ms"] = r.get("t", T0 + 1000)
    buf = HourlyBuffer("discards_raw", 0)
    buf.add(table_from_columns(arr, "discarded_packet"), 0)
    ParquetWriter(fsspec.filesystem("file"), root).write_plan(buf.flush_plan(force=True))


def test_drops_per_port_node_and_job(tmp_path):
    root = str(tmp_path)
    archive(root, [{}, {}, {"reason": 258, "in_if": 2, "out_if": 0, "src": "10.0.0.2", "dst": "10.0.0.9"},
                   {"t": T0 + 3_000_000}])  # the last one after the range
    q = ArchiveQuery(fsspec.filesystem("file"), root)
    inv = Inventory.from_dict(INVENTORY)
    t = drop_reasons(q, inv, T0, T0 + 60_000)
    assert t.to_pylist() == [
        {"switch": "tor-1", "port": "1", "node": "gpu-1", "src_node": "gpu-3", "dst_node": "gpu-1", "job": "job-a",
         "reason": "no_buffer_space", "drops": 2, "bytes": 8192},
        {"switch": "tor-1", "port": "2", "node": "gpu-2", "src_node": "gpu-2", "dst_node": "unknown",
         "job": "unknown", "reason": "acl", "drops": 1, "bytes": 4096}]
    by_job = drop_reasons(q, inv, T0, None, ("job", "reason"))
    assert by_job.to_pylist() == [{"job": "job-a", "reason": "no_buffer_space", "drops": 3, "bytes": 12288},
                                  {"job": "unknown", "reason": "acl", "drops": 1, "bytes": 4096}]
    assert drop_reasons(q, inv, T0 + 10_000, T0 + 20_000).num_rows == 0
    with pytest.raises(ValueError, match="choose from"):
        drop_reasons(q, inv, T0, None, ("rack",))


def test_fabricflow_query_drops(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from cli.main import app

    archive(str(tmp_path / "a"), [{}, {"reason": 258, "in_if": 2, "out_if": 0, "src": "10.0.0.2", "dst": "10.0.0.9"}])
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(INVENTORY))
    env = {"FABRICFLOW_ARCHIVE__URL": f"file://{tmp_path / 'a'}"}
    r = CliRunner().invoke(app, ["query", "drops", "--inventory", str(inv), "--by", "job,reason", "--format", "json"],
                           env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"job": "job-a", "reason": "no_buffer_space", "drops": 1, "bytes": 4096},
                                    {"job": "unknown", "reason": "acl", "drops": 1, "bytes": 4096}]
    bad = CliRunner().invoke(app, ["query", "drops", "--inventory", str(inv), "--by", "rack"], env=env)
    assert bad.exit_code == 2 and "choose from" in bad.output
