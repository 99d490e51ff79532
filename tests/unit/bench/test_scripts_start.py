"""Every benchmark script starts as a script (``python bench/X.py --help``).

Run as a script, ``bench/`` is first on ``sys.path``, so ``bench/processors.py``
or ``bench/ingest.py`` can shadow the packages of the same name; this caught
bench/enrich.py and bench/detectors.py failing with "'processors' is not a
package".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
# helpers: imported by the scripts, no command line of their own
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if p.name not in ("__init__.py", "common.py", "console_run.py") and "__main__" in p.read_text())


def test_scripts_found():
    assert {"ingest.py", "processors.py", "enrich.py", "detectors.py", "codec.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script):
    r = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True, timeout=120,
                       cwd=BENCH.parent)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()
