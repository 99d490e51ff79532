"""``fabricflow backfill`` writes what the live pipeline writes for the same datagrams.

The ``tuning`` scenario (with its step marks) goes through a fresh local pipeline (embedded broker, ``fabricflow
ingest`` with ``ingest.capture_path`` set, ``process``, ``sink archive``) at 10x. Ingest's capture holds every
datagram it received, stamped with the receive time it used; backfilling that capture with the same settings into
another archive must give the same rows, dataset by dataset:

- flows_raw, flows_enriched, counters_raw, matrix_windows, straggler_scores, link_health, patterns, incast_events,
  step_marks, ingest_quality: the same multiset of rows. File names and row order within files may differ (live
  files are cut by wall-clock timers and Kafka's message batches), the rows may not. This holds because no record
  reached the live processors after its window had closed (checked: the processors' too-late gauges are 0), so
  every window got all of its records, as backfill's in-order batches give them.
- alerts: the same alerts by identity (dedup key, rule, severity, state, entities); the running figures in a
  firing message count the records up to the batch it fired in, and live batches are Kafka messages taken
  together by consumer timing (docs/replay.md, "Determinism").
- ingest_quality: ingest publishes its last (partial) quality windows as it stops; the local pipeline stops
  ingest first and gives the archive sink time to read them (devtools/runner.py, ``LocalPipeline.stop``).
- summaries_hourly: not compared. Live produces an hour's summary once event time has passed the hour's end by
  archive.grace_s, which this short run never reaches; backfill closes every hour at the end of its capture.

Ports: ``FABRICFLOW_TEST_E2E_PORT_BASE`` (default 31700) .. +40. About 2 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from devtools.scenario_run import run_scenario
from devtools.runner import PipelineError, PipelinePorts
from devtools.stack import port_free

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

BASE = int(os.environ.get("FABRICFLOW_TEST_E2E_PORT_BASE", "31700"))
PORTS = PipelinePorts(kafka=BASE, s3=BASE + 1, s3_base=BASE + 10, sflow=BASE + 20, netflow=BASE + 21,
                      ipfix=BASE + 22, marks=BASE + 23, ingest_metrics=BASE + 24, processors_web=BASE + 25,
                      archive_metrics=BASE + 26, processors_metrics=BASE + 27, flow_metrics=BASE + 28,
                      console=BASE + 29, console_metrics=BASE + 30)
REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"
SAME_ROWS = ("flows_raw", "flows_enriched", "counters_raw", "matrix_windows", "straggler_scores", "link_health",
             "patterns", "incast_events", "step_marks", "ingest_quality")
ALERT_IDENTITY = ("dedup_key", "rule", "severity", "state", "entities")


def _rows(root: Path, dataset: str) -> list[str]:
    out = []
    for f in sorted((root / dataset).rglob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            r.pop("dt", None)
            r.pop("hour", None)
            out.append(json.dumps(r, sort_keys=True, default=lambda b: b.hex() if isinstance(b, bytes) else str(b)))
    return sorted(out)


def _too_late(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r'^fabricflow_processors_too_late_records\{[^}]*\} (\S+)$', text,
                                                      re.M))


def test_backfill_of_the_live_capture_equals_the_live_archive(tmp_path):
    from fabricflow.settings import load_settings
    from replay.backfill import Backfill
    from replay.config import core_factory_from

    if not (port_free(PORTS.kafka) and port_free(PORTS.s3)):
        pytest.skip(f"ports {PORTS.kafka}/{PORTS.s3} in use")
    state = tmp_path / "live"
    cap = tmp_path / "ingest.pcap"
    late: list[float] = []
    try:
        run_scenario("tuning", state, speed=10.0, ports=PORTS, duration_s=90, archive=True, log=lambda *_: None,
                     extra={"ingest": {"capture_path": str(cap)}},
                     on_drained=lambda pipe, _w: late.append(_too_late(PORTS.processors_metrics)))
    except PipelineError as e:
        if REQUIRE or "exited with status" in str(e):
            raise
        pytest.skip(f"local pipeline unavailable: {e}")
    assert late == [0.0], "records came too late for their live windows: the comparison below would not hold"
    live = state / "archive"
    settings = load_settings(state / "pipeline.yaml")
    back = tmp_path / "backfill"
    st = Backfill(settings, str(cap), root=str(back), core_factory=core_factory_from(settings.processors)).run()
    assert st.datagrams > 3000 and st.mark_datagrams > 50
    for d in SAME_ROWS:
        a, b = _rows(live, d), _rows(back, d)
        assert a == b, (d, len(a), len(b), sorted(set(a) ^ set(b))[:3])
    assert _rows(live, "flows_raw") and _rows(live, "matrix_windows") and _rows(live, "step_marks")
    ident = [sorted(json.dumps({k: json.loads(r)[k] for k in ALERT_IDENTITY}, sort_keys=True) for r in _rows(root, "alerts"))
             for root in (live, back)]
    assert ident[0] == ident[1]
