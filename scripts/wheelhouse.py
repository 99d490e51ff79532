"""Download the wheels that install fabricflow without the network: its dependencies and its build requirements.

``make test`` (``make wheelhouse``) runs it once: the network is there at install time, never at run time.
The wheels land in ``.venv/wheelhouse`` (``--dest`` to change). ``tests/e2e/test_installed.py`` builds fabricflow's wheel from the
source and installs it into a fresh, read-only prefix from these wheels alone (``pip --no-index``), as a
packager or an air-gapped host would. Re-running adds only what is missing (pip's cache serves the rest).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=str(REPO / ".venv" / "wheelhouse"), help="where the wheels go")
    args = ap.parse_args()
    build_requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", args.dest, str(REPO), *build_requires]
    return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
