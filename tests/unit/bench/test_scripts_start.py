"""Every benchmark script starts the way bench/README.md runs it: ``python -m bench.X --help`` from the repository
root (the root first on ``sys.path``, so ``bench/processors.py`` cannot shadow the ``processors`` package and no
script edits ``sys.path``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
# helpers (imported by the scripts) have no command line
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if p.name != "__init__.py" and "__main__" in p.read_text())


def test_scripts_found():
    assert {"ingest.py", "processors.py", "enrich.py", "detectors.py", "codec.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script):
    r = subprocess.run([sys.executable, "-m", f"bench.{script[:-3]}", "--help"], capture_output=True, text=True, timeout=120,
                       cwd=BENCH.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
