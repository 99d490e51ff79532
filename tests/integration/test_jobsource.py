"""Live job sources against a fake API server with recorded responses: Kubernetes (official client, list +
watch, bookmarks, 410 Gone, deletes, errors) and Slurm (fake ``squeue`` on PATH, slurmrestd v0.0.40)."""

from __future__ import annotations

import os
import stat
import threading
import time
from datetime import datetime, timezone

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from fabricflow.jobs_settings import JobsSettings
from processors.jobsource import LiveJobs
from processors.jobsource.feed import Feed, SourceMetrics
from processors.jobsource.slurm import SlurmPollError, SlurmSource
from processors.logic.enrich.inventory import Inventory
from schemas.columns import addr16
from tests.support.fake_scheduler_api import DATA, FakeSchedulerAPI, load

BASE = Inventory.from_dict({
    "nodes": [{"name": f"gpu0{i}", "addresses": [f"10.0.0.{i}"], "group": "gpu"} for i in range(1, 5)],
})


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def job_at(inv: Inventory, addr: str, when: str) -> str:
    idx = inv.lookup(np.array([list(addr16(addr))], dtype=np.uint8))
    return str(inv.jobs_at(inv.entry_node_id[idx + 1], np.array([ms(when)]))[0])


def wait_for(live: LiveJobs, cond, timeout_s: float = 20.0):
    """Poll the live source (as the worker's timer does) until ``cond(inventory)``; bounded in time."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        live.poll()
        if live.inventory is not None and cond(live.inventory):
            return live.inventory
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout_s} s; last error: {live.last_error}")


def wait_for_error(live: LiveJobs, timeout_s: float = 20.0) -> None:
    """Poll until the source reported an error (bounded in time)."""
    end = time.monotonic() + timeout_s
    while live.last_error is None and time.monotonic() < end:
        live.poll()
        time.sleep(0.05)


def sample(reg: CollectorRegistry, name: str, **labels) -> float:
    return reg.get_sample_value(name, labels) or 0.0


@pytest.fixture()
def api():
    with FakeSchedulerAPI() as srv:
        yield srv


def k8s_live(api: FakeSchedulerAPI, tmp_path, reg, **kw) -> LiveJobs:
    settings = JobsSettings(source="kubernetes", backoff_max_s=1, kubernetes={
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")), "namespace": kw.get("namespace"),
        "watch_timeout_s": 10})
    return LiveJobs(settings, BASE, registry=reg)


def test_kubernetes_list_watch_410_relist_delete(api, tmp_path):
    api.lists = [load("k8s_podlist_1.json"), load("k8s_podlist_2.json")]
    api.watches = [load("k8s_watch_1.jsonl"), load("k8s_watch_2.jsonl")]
    reg = CollectorRegistry()
    live = k8s_live(api, tmp_path, reg)
    live.start()
    try:
        inv = wait_for(live, lambda inv: job_at(inv, "10.0.0.4", "2026-12-05T10:45:00Z") == "ft"
                       and job_at(inv, "10.0.0.2", "2026-12-05T10:49:59Z") == "")
    finally:
        live.stop()
    # gpu01: llm until its pod finished, then eval from the second pod's start (event times, not receive times)
    assert job_at(inv, "10.0.0.1", "2026-12-05T10:29:59Z") == "llm"
    assert job_at(inv, "10.0.0.1", "2026-12-05T10:30:02Z") == ""
    assert job_at(inv, "10.0.0.1", "2026-12-05T10:30:05Z") == "eval"
    # gpu02: llm until the deleted pod's container finished (10:49:58), not its deletion (10:50:00)
    assert job_at(inv, "10.0.0.2", "2026-12-05T10:49:57Z") == "llm"
    assert job_at(inv, "10.0.0.2", "2026-12-05T10:49:58Z") == ""
    # the pending pod without a node holds nothing; the hostNetwork pod holds gpu04 and adds no address
    assert job_at(inv, "10.0.0.3", "2026-12-05T10:45:00Z") == ""
    assert job_at(inv, "10.0.0.4", "2026-12-05T10:45:00Z") == "ft"
    # a running pod's IP is an address of its node
    assert job_at(inv, "10.244.1.9", "2026-12-05T10:45:00Z") == "eval"
    assert job_at(inv, "10.244.2.5", "2026-12-05T10:45:00Z") == ""  # its pod is gone
    watches = api.watch_requests()
    assert watches[0]["resourceVersion"] == "1000" and watches[0]["allowWatchBookmarks"] == "true"
    assert watches[1]["resourceVersion"] == "1100"  # after 410 Gone: re-listed, watched from the new list
    assert len(api.list_requests()) >= 2 and api.list_requests()[0]["labelSelector"] == "batch.kubernetes.io/job-name"
    assert sample(reg, "fabricflow_inventory_source_watch_restarts_total", source="kubernetes", reason="expired") == 1
    for kind, n in (("ADDED", 1), ("MODIFIED", 2), ("DELETED", 1), ("BOOKMARK", 1), ("list", 2)):
        assert sample(reg, "fabricflow_inventory_source_events_total", source="kubernetes", type=kind) == n, kind
    assert sample(reg, "fabricflow_inventory_source_last_sync_timestamp_seconds", source="kubernetes") > 0
    assert live.note() is None


def test_kubernetes_namespace_and_errors_keep_last_membership(api, tmp_path):
    api.lists = [load("k8s_podlist_1.json")]
    reg = CollectorRegistry()
    live = k8s_live(api, tmp_path, reg, namespace="training")
    live.start()
    try:
        wait_for(live, lambda inv: job_at(inv, "10.0.0.1", "2026-12-05T10:10:00Z") == "llm")
        assert api.list_requests() and all(p == "/api/v1/namespaces/training/pods" for p, _, _ in api.requests)
        api.fail_next(403, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "pods is forbidden: User \"system:serviceaccount:ff:ff\" cannot watch resource "
                            "\"pods\"", "reason": "Forbidden", "code": 403})
        wait_for_error(live)
    finally:
        live.stop()
    assert live.last_error is not None and "403" in live.last_error and "\n" not in live.last_error
    assert "using the last good membership" in live.note()
    assert job_at(live.inventory, "10.0.0.1", "2026-12-05T10:10:00Z") == "llm"
    assert sample(reg, "fabricflow_inventory_source_errors_total", source="kubernetes") >= 1


def test_kubernetes_unreachable_says_so(tmp_path):
    with FakeSchedulerAPI() as srv:
        cfg = srv.kubeconfig(tmp_path / "kubeconfig")
    settings = JobsSettings(source="kubernetes", backoff_max_s=1, kubernetes={"kubeconfig": str(cfg)})
    live = LiveJobs(settings, BASE)
    live.start()
    try:
        wait_for_error(live)
    finally:
        live.stop()
    assert live.inventory is None and "no live jobs yet" in live.note() and "\n" not in live.note()


@pytest.fixture()
def fake_squeue(tmp_path, monkeypatch):
    """A fake ``squeue`` on PATH printing the file named by $FAKE_SQUEUE_JSON (its exit status: $FAKE_SQUEUE_RC)."""
    exe = tmp_path / "bin" / "squeue"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\n[ "${FAKE_SQUEUE_RC:-0}" = 0 ] || { echo "squeue: error: Unable to contact slurm '
                   'controller (connect failure)" >&2; exit "$FAKE_SQUEUE_RC"; }\ncat "$FAKE_SQUEUE_JSON"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return exe


def _feed():
    reg = CollectorRegistry()
    return Feed(SourceMetrics(reg, "slurm")), reg


def test_slurm_squeue_json_polls(fake_squeue, monkeypatch):
    settings = JobsSettings(source="slurm", slurm={"poll_s": 1})
    live = LiveJobs(settings, BASE)
    expect = {
        "squeue_json_1.json": [("10.0.0.1", "2026-12-05T10:00:00Z", "llm-pretrain-4412"),
                               ("10.0.0.2", "2026-12-05T11:00:00Z", "llm-pretrain-4412"),
                               ("10.0.0.3", "2026-12-05T09:30:00Z", "eval-4410"),
                               ("10.0.0.3", "2026-12-05T09:55:00Z", "")],  # ended at its end_time (09:55)
        "squeue_json_2.json": [("10.0.0.1", "2026-12-05T10:59:59Z", "llm-pretrain-4412"),
                               ("10.0.0.1", "2026-12-05T11:00:00Z", ""),
                               ("10.0.0.4", "2026-12-05T11:00:10Z", "llm-finetune-4414")],
    }
    for fixture, cases in expect.items():
        monkeypatch.setenv("FAKE_SQUEUE_JSON", str(DATA / fixture))
        live.source.poll(live.feed)
        inv = live.poll()
        assert [job_at(inv, a, t) for a, t, _ in cases] == [j for _, _, j in cases], fixture
    monkeypatch.setenv("FAKE_SQUEUE_RC", "1")
    with pytest.raises(SlurmPollError, match="exited with status 1: squeue: error: Unable to contact"):
        live.source.poll(live.feed)


def test_slurm_command_missing_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    src = SlurmSource(JobsSettings(source="slurm").slurm)
    with pytest.raises(SlurmPollError, match="squeue: command not found"):
        src.poll(_feed()[0])


def test_slurmrestd_v0040_with_token(api, tmp_path):
    api.slurm_doc = load("slurmrestd_v0.0.40_jobs.json")
    api.slurm_token = "jwt-secret"
    token_file = tmp_path / "jwt"
    token_file.write_text("jwt-secret\n")
    feed, _ = _feed()
    src = SlurmSource(JobsSettings(source="slurm", slurm={"mode": "rest", "url": api.url, "user": "ff",
                                                            "token_file": str(token_file)}).slurm)
    src.poll(feed)
    op = feed.q.get_nowait()
    assert op[0] == "relist" and {h.job for h in op[1]} == {"llm-pretrain-4412", "eval-4410"}
    path, _, headers = api.requests[-1]
    headers = {k.lower(): v for k, v in headers.items()}
    assert path == "/slurm/v0.0.40/jobs" and headers["x-slurm-user-name"] == "ff"
    assert headers["x-slurm-user-token"] == "jwt-secret"
    token_file.write_text("wrong\n")
    with pytest.raises(SlurmPollError, match="answered 401"):
        src.poll(feed)


def test_slurm_source_thread_reports_errors_and_recovers(fake_squeue, monkeypatch):
    monkeypatch.setenv("FAKE_SQUEUE_JSON", str(DATA / "squeue_json_1.json"))
    monkeypatch.setenv("FAKE_SQUEUE_RC", "1")
    reg = CollectorRegistry()
    live = LiveJobs(JobsSettings(source="slurm", backoff_max_s=1, slurm={"poll_s": 1}), BASE, registry=reg)
    live.start()
    try:
        wait_for_error(live)
        assert "Unable to contact" in live.note()
        monkeypatch.setenv("FAKE_SQUEUE_RC", "0")
        wait_for(live, lambda inv: job_at(inv, "10.0.0.1", "2026-12-05T10:00:00Z") == "llm-pretrain-4412")
    finally:
        live.stop()
    assert live.note() is None and sample(reg, "fabricflow_inventory_source_errors_total", source="slurm") >= 1
    assert threading.active_count() >= 1
