"""The policy watermark: one exporter whose clock runs ahead does not push it (issue 31, checkpoint_late)."""

import numpy as np

from schemas.columns import addr16
from processors.logic.core import ProcessorCore
from processors.logic.windows.watermark import ExporterWatermark
from tests.support.flows import flows

GB = 1_000_000_000
T = 1_796_000_000_000  # 10 s aligned


def _addrs(*ips):
    return np.stack([np.frombuffer(addr16(ip), np.uint8) for ip in ips])


def test_lower_median_of_live_exporters_ignores_one_clock_ahead():
    wm = ExporterWatermark(stale_ms=300_000)
    assert wm.observe(np.array([T, T + 1000, T + 45_000]), _addrs("10.0.255.1", "10.0.255.2", "10.0.255.10")) == T + 1000
    # two exporters: the one behind
    two = ExporterWatermark()
    assert two.observe(np.array([T, T + 45_000]), _addrs("10.0.255.1", "10.0.255.10")) == T
    # never goes back, and a later batch of the slow ones moves it on
    assert wm.observe(np.array([T - 5000]), _addrs("10.0.255.1")) == T + 1000
    assert wm.observe(np.array([T + 20_000, T + 21_000]), _addrs("10.0.255.1", "10.0.255.2")) == T + 21_000
    # an exporter silent for longer than stale_ms no longer holds it back
    wm2 = ExporterWatermark(stale_ms=300_000)
    wm2.observe(np.array([T, T]), _addrs("10.0.255.1", "10.0.255.2"))
    assert wm2.observe(np.array([T + 301_000]), _addrs("10.0.255.1")) == T + 301_000
    restored = ExporterWatermark()
    restored.restore(wm.snapshot())
    assert restored.snapshot() == wm.snapshot()


def _step(t, checkpoint, part):
    """One batch: half of a 10 s bucket's checkpoint bytes (0.6 GB) from ToR A, background from ToR B and
    from a NetFlow exporter whose clock runs 45 s ahead."""
    rec = [{"src": "gpu1", "dst": "gpu2", "t": t + part * 5000, "exporter": "10.0.255.2", "job": "job-a",
            "bytes": 1000}]
    if part == 0:
        rec.append({"src": "gpu1", "dst": "gpu2", "t": t + 45_000, "exporter": "10.0.255.10", "proto": 3,
                    "job": "job-a", "bytes": 1000})
    if checkpoint:
        rec.append({"src": "gpu1", "dst": "stor1", "t": t + part * 5000 + 1, "exporter": "10.0.255.1",
                    "src_job": "job-a", "dst_group": "storage", "category": "storage", "bytes": 600_000_000,
                    "dst_port": 2049, "ip_protocol": 6})
    return flows(rec)


def test_checkpoints_at_cadence_stay_on_time_while_one_exporter_clock_runs_ahead():
    """Each checkpoint's bytes come in two batches; with the watermark at the skewed exporter's time the first
    half closed its bucket (under ``burst_min_bytes``) and the second half was dropped as late, so no checkpoint
    was ever seen and the configured cadence raised checkpoint_late / missing."""
    policy = {"exfiltration": {"enabled": False}, "external_dependency": {"enabled": False},
              "storage_on_compute": {"enabled": False}, "checkpoint": {"jobs": {"job-a": {"interval": "2m"}}}}
    core = ProcessorCore(policy=policy)
    out = []
    for step in range(0, 90):  # 15 minutes, a checkpoint every 2 minutes lasting 20 s
        t = T + step * 10_000
        cp = (step % 12) in (0, 1)
        for part in (0, 1):
            out += core.process_enriched(_step(t, cp, part))
    rules = sorted({o.value["rule"] for o in out if o.kind == "alert"})
    assert [r for r in rules if r.startswith("checkpoint")] == []
    assert core.watermark_ms == T + 89 * 10_000 + 5000
    assert core.policy.rules[5].expected_ms("job-a") == 120_000
