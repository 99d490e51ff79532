"""A worker with a live job source: membership applied on the timer without a restart, flows attributed at
their event time, versions published to inventory.jobs.v1, the file's other contents still reloaded."""

from __future__ import annotations

import os
import stat
from datetime import datetime
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from fabricflow.settings import load_settings
from processors.worker import Processors
from schemas.columns import FLOW_DTYPE, addr16
from schemas.registry import decode_record
from tests.support.fake_scheduler_api import DATA
from tests.support.worker import NoBrokerProducer

INVENTORY = """\
nodes:
%s
jobs:
  - {name: from-file, nodes: [gpu01, gpu02]}
"""


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _inventory(path: Path, n_nodes: int) -> None:
    nodes = "\n".join(f"  - {{name: gpu0{i}, addresses: [10.0.0.{i}], group: gpu}}" for i in range(1, n_nodes + 1))
    st = path.stat() if path.exists() else None
    path.write_text(INVENTORY % nodes)
    if st is not None:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.fixture()
def worker(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "squeue"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\ncat "$FAKE_SQUEUE_JSON"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    inv = tmp_path / "inv.yaml"
    _inventory(inv, 4)
    s = load_settings(None, kafka={"bootstrap_servers": "127.0.0.1:9", "partitions": 2}, processors={
        "datadir": str(tmp_path / "d"), "metrics_port": 0, "web_port": 0, "inventory_reload_s": 0,
        "inventory": str(inv), "jobs": {"source": "slurm"}})
    with mock.patch("processors.worker.publish.Producer", NoBrokerProducer):
        p = Processors(s)
    p.sent = []
    p.publisher.produce = lambda topic, key, value, **kw: p.sent.append((topic, key, decode_record(value)))
    p.state = {}
    p.inv_path = inv
    return p


def _jobs(p: Processors, addrs: list[str], when: list[str]) -> list[str]:
    flows = np.zeros(len(addrs), dtype=FLOW_DTYPE)
    for i, (a, t) in enumerate(zip(addrs, when)):
        flows["src_addr"][i] = np.frombuffer(addr16(a), dtype=np.uint8)
        flows["dst_addr"][i] = np.frombuffer(addr16("10.0.0.4"), dtype=np.uint8)
        flows["time_start_ms"][i] = flows["time_end_ms"][i] = ms(t)
    return [str(j) for j in p.prepare.core.enricher.enrich(flows)["src_job"]]


def _poll(p: Processors, fixture: str, monkeypatch, now: str) -> None:
    monkeypatch.setenv("FAKE_SQUEUE_JSON", str(DATA / fixture))
    p.live_jobs.source.poll(p.live_jobs.feed)
    p.on_tick(ms(now))


def test_live_jobs_switch_at_event_time_without_restart(worker, monkeypatch):
    p = worker
    # before the first complete view the file's jobs stay in use, and nothing is published
    p.on_tick(ms("2026-12-05T10:00:00Z"))
    assert _jobs(p, ["10.0.0.1"], ["2026-12-05T10:00:00Z"]) == ["from-file"] and p.sent == []
    assert p.service.health() == (True, "jobs source: slurm: waiting for the first listing; no live jobs yet")

    _poll(p, "squeue_json_1.json", monkeypatch, "2026-12-05T10:30:00Z")
    assert _jobs(p, ["10.0.0.1", "10.0.0.1", "10.0.0.3"], ["2026-12-05T09:59:59Z", "2026-12-05T10:00:00Z",
                                                             "2026-12-05T09:30:00Z"]) == ["", "llm-pretrain-4412", "eval-4410"]
    assert all(core.inventory is p.inventory for core in [p.prepare.core])
    snap = [r for t, _, r in p.sent if t == "inventory.jobs.v1"]
    assert {r["key"] for r in snap} == {"slurm:4412", "slurm:4410"} and all(r["snapshot"] for r in snap)
    assert p.service.health() == (True, "")

    # the job ends at 11:00 and another starts at 11:00:10; the poll comes at 11:02 (later than the flows):
    # flows at 10:59:59 and 11:00:10 are still attributed to the job that held the node then
    p.sent.clear()
    _poll(p, "squeue_json_2.json", monkeypatch, "2026-12-05T11:02:00Z")
    assert _jobs(p, ["10.0.0.1", "10.0.0.1", "10.0.0.3", "10.0.0.4"],
                 ["2026-12-05T10:59:59Z", "2026-12-05T11:00:00Z", "2026-12-05T11:00:10Z", "2026-12-05T11:00:10Z"]
                 ) == ["llm-pretrain-4412", "", "llm-finetune-4414", "llm-finetune-4414"]
    changed = {r["key"]: r for _, _, r in p.sent}
    assert set(changed) == {"slurm:4412", "slurm:4414"}  # 4410 had ended already: leaving the list changes nothing
    assert changed["slurm:4412"]["end_ms"] == ms("2026-12-05T11:00:00Z") and not changed["slurm:4412"]["snapshot"]
    assert changed["slurm:4414"]["end_ms"] == -1 and changed["slurm:4414"]["nodes"] == ["gpu03", "gpu04"]

    # the file is reloaded (a node removed): the live jobs are applied to the new file, not lost
    _inventory(p.inv_path, 3)
    p.on_tick(ms("2026-12-05T11:03:00Z"))
    assert _jobs(p, ["10.0.0.3", "10.0.0.4"], ["2026-12-05T11:00:10Z"] * 2) == ["llm-finetune-4414", ""]
    assert p.live_jobs.unknown_hosts == ["gpu04"]


def test_config_check_names_missing_job_source_files(tmp_path, monkeypatch):
    from processors.config_files import check_config_files

    monkeypatch.setenv("PATH", str(tmp_path))
    s = load_settings(None, processors={"jobs": {"source": "slurm", "slurm": {"token_file": str(tmp_path / "jwt")}}})
    assert check_config_files(s.processors) == [
        f"processors.jobs.slurm.token_file: {tmp_path / 'jwt'}: no such file",
        "processors.jobs.slurm.command: squeue: command not found"]
    s = load_settings(None, processors={"jobs": {"source": "kubernetes", "kubernetes": {"kubeconfig": "/nope"}}})
    assert check_config_files(s.processors) == ["processors.jobs.kubernetes.kubeconfig: /nope: no such file"]
    with pytest.raises(Exception, match="url is required with mode rest"):
        load_settings(None, processors={"jobs": {"source": "slurm", "slurm": {"mode": "rest"}}})


def test_kubernetes_source_without_its_client_is_a_one_line_error(monkeypatch):
    """The Kubernetes client is an extra (fabricflow[kubernetes]): without it the source says how to get it."""
    import importlib.util

    import pytest

    from fabricflow.jobs_settings import JobsSettings
    from processors.jobsource.live import make_source

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kubernetes" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'fabricflow\[kubernetes\]'"):
        make_source(JobsSettings(source="kubernetes"))
