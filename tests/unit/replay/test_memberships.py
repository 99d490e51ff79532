"""Replay with live job membership: the archived membership versions (job_memberships) of a range give the
jobs that held the nodes then, so a replay across a job change attributes flows as the live worker did."""

from __future__ import annotations

import json

import fsspec
import numpy as np
import yaml
from typer.testing import CliRunner

from fabricflow.settings import load_settings
from processors.jobsource import LiveJobs
from processors.logic.enrich.inventory import Inventory
from processors.logic.enrich.inventory.membership import Holding
from replay import ShardedCores, core_factory_from, output_records
from replay.memberships import archived_membership_rows, inventory_with_archived_jobs
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_dicts
from schemas.columns import addr16
from sinks.archive.layout import HOUR_MS
from tests.support import replay as h
from tests.support.replay_archive import write_archive
from tests.support.replay_cli import make_app

START = h.T0 + HOUR_MS - 20_000
CHANGE = START + 30_000  # llm-pretrain ends on every node, eval starts on gpu-01..04
ARRIVES = CHANGE + 2_000  # ... and the source reports it 2 s later (flows after it come late, as NetFlow's do)


class _Quiet:
    """A source that reports nothing by itself (the test feeds it)."""

    def run(self, feed, stop):
        stop.wait()


def _base() -> Inventory:
    d = h.inventory_dict()
    d["jobs"] = []
    return Inventory.from_dict(d)


def _live(flows: np.ndarray, counters: np.ndarray, partitions: int):
    """The worker's path: membership applied on its timer, flows enriched as they arrive; returns (outputs,
    the published version rows)."""
    s = load_settings(None, processors={"jobs": {"source": "slurm"}})
    live = LiveJobs(s.processors.jobs, _base(), source=_Quiet(), clock=lambda: START / 1000)
    nodes = tuple(h.gpu(i) for i in range(1, h.N_GPU + 1))
    live.feed.relist([Holding("slurm:1", "llm-pretrain", nodes, START - 600_000)])
    inv = live.poll(START / 1000)
    rows = live.version_rows(START)
    cores = ShardedCores(core_factory_from(s.processors, inventory=inv), partitions)
    out = []
    # arrival order: flows before the change, then (at ARRIVES) the change, then the rest; flows of
    # [CHANGE, ARRIVES) were exported late and arrive after the change was applied
    t, ct = flows["time_start_ms"], counters["time_received_ms"]
    for part, cpart, applied in ((flows[t < CHANGE], counters[ct < CHANGE], False),
                                 (flows[t >= CHANGE], counters[ct >= CHANGE], True)):
        if applied:
            live.feed.relist([Holding("slurm:1", "llm-pretrain", nodes, START - 600_000, CHANGE),
                              Holding("slurm:2", "eval", nodes[:4], CHANGE)])
            inv = live.poll(ARRIVES / 1000)
            for core in [cores.front, *cores.cores]:
                core.set_inventory(inv)
            rows += live.version_rows(ARRIVES)
        for k in range(0, len(part), 40):
            out.extend(cores.flows(cores.enrich(part[k:k + 40])))
        if len(cpart):
            out.extend(cores.counters(cpart))
    out.extend(cores.flush())
    return out, rows


def _sorted(records) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in json.loads(json.dumps(records, default=str)))


def _archive_rows(root, rows) -> None:
    writer = ParquetWriter(fsspec.filesystem("file"), str(root))
    buf = HourlyBuffer("job_memberships", 0)
    for off, r in enumerate(rows):
        buf.add(table_from_dicts([r], "job_membership"), off)
    writer.write_plan(buf.flush_plan(force=True))


def test_replay_after_a_job_change_attributes_flows_as_live_did(tmp_path, monkeypatch):
    flows = h.traffic(seconds=60, start=START, incast_at=(20, 23))
    counters = h.counters(seconds=60, start=START)
    live_out, rows = _live(flows, counters, partitions=2)
    assert {r["key"] for r in rows} == {"slurm:1", "slurm:2"} and rows[0]["snapshot"] and not rows[-1]["snapshot"]
    live_jobs = {o.value.get("job") for o in live_out if o.kind == "straggler"}
    assert {"llm-pretrain", "eval"} <= live_jobs  # the change shows in the outputs

    write_archive(tmp_path / "archive", h.messages(flows, partitions=2), counters)
    _archive_rows(tmp_path / "archive", rows)
    got = archived_membership_rows(None, str(tmp_path / "archive"), START, START + 60_000)
    assert len(got) == len(rows)
    inv = inventory_with_archived_jobs(_base(), got)
    ids = inv.entry_node_id[inv.lookup(np.frombuffer(addr16(h.ip(1)), np.uint8).reshape(1, 16)) + 1]
    assert [str(j) for j in inv.jobs_at(np.repeat(ids, 2), np.array([CHANGE - 1, CHANGE]))] == ["llm-pretrain", "eval"]

    # `fabricflow replay` with the same settings reads the archived versions and gives the live outputs
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({**h.inventory_dict(), "jobs": []}))
    monkeypatch.setenv("FABRICFLOW_PROCESSORS__JOBS__SOURCE", "slurm")
    report = tmp_path / "r.json"
    res = CliRunner().invoke(make_app(), [
        "replay", "--archive", f"file://{tmp_path / 'archive'}", "--inventory", str(tmp_path / "inv.yaml"),
        "--from", str(START - 1000), "--to", str(START + 60_000), "--partitions", "2", "--report", str(report),
        "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    replayed = json.loads(report.read_text())
    assert replayed["replay"]["job_membership_rows"] == len(rows)
    assert _sorted(replayed["outputs"]) == _sorted(output_records(live_out))

    # without the archived versions (the file's jobs: none), the same replay attributes no job
    monkeypatch.setenv("FABRICFLOW_PROCESSORS__JOBS__SOURCE", "file")
    res = CliRunner().invoke(make_app(), [
        "replay", "--archive", f"file://{tmp_path / 'archive'}", "--inventory", str(tmp_path / "inv.yaml"),
        "--from", str(START - 1000), "--to", str(START + 60_000), "--partitions", "2", "--report", str(report),
        "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0
    jobs = {o["value"].get("job") for o in json.loads(report.read_text())["outputs"] if o["kind"] == "straggler"}
    assert not jobs - {""}
