"""bench/pipeline.py end to end at a tiny rate: one step with one worker per service and one with two, so the
whole-pipeline benchmark cannot rot and its scale-out check (outputs with two workers equal those with one) holds.

Runs the real services on the embedded stack (ports from FABRICFLOW_TEST_CHAOS_PORT_BASE + 100), about 3 minutes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.stack import port_free

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and SO_REUSEPORT")]

REPO = Path(__file__).resolve().parents[2]
PORT_BASE = int(os.environ.get("FABRICFLOW_TEST_CHAOS_PORT_BASE", "23100")) + 100


def test_pipeline_bench_one_and_two_workers(tmp_path):
    if not all(port_free(PORT_BASE + i) for i in range(28)):
        pytest.skip("pipeline bench test ports in use")
    out = tmp_path / "steps.json"
    args = ["--workers", "2", "--start-rate", "3000", "--max-steps", "1", "--step-seconds", "6", "--warm-up", "3",
            "--drain", "120", "--port-base", str(PORT_BASE), "--json", str(out)]
    r = subprocess.run([sys.executable, str(REPO / "bench" / "pipeline.py"), *args], capture_output=True, text=True,
                       timeout=850, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "FF_BENCH_CODE"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    steps = json.loads(out.read_text())["steps"]
    for label in ("this N=1", "this N=2"):
        (st,) = steps[label]
        assert st["problems"] == [], (label, st)
        assert st["sent"] == st["kafka_raw"] == st["kafka_enriched"] == st["archive_raw"] == st["archive_enriched"] > 0
        assert st["cpu"]["ingest"] > 0 and st["cpu"]["processors"] > 0 and st["cpu"]["archive"] > 0
        assert int(st["digests"]["matrix"].split("(")[1].rstrip(")")) > 0  # windows closed and published
    assert "N=2: 3,000 flows/s sustained" in r.stdout and "outputs equal N=1" in r.stdout, r.stdout[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"pipeline: 3000 flows/s sustained, [\d.]+ CPU-s per 1 M flows; baseline - flows/s, - CPU-s "
                        r"per 1 M flows; ratio -", last), last
