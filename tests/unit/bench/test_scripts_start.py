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


# no bench file is pending any more: bench/processors.py and bench/decode_netflow.py run themselves again with
# PYTHONPATH and -P where they need another checkout's code first
SYS_PATH_PENDING: set[str] = set()


def sys_path_edits(text: str) -> list[int]:
    """Lines of ``text`` that change ``sys.path`` (assign, insert, append, extend, remove, slice)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(text)):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            target = next((t.value if isinstance(t, ast.Subscript) else t for t in targets), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("insert", "append", "extend", "remove", "pop", "clear"):
                target = node.func.value
        if isinstance(target, ast.Attribute) and target.attr == "path" and getattr(target.value, "id", "") == "sys":
            out.append(node.lineno)
    return sorted(set(out))


def test_no_bench_file_edits_sys_path():
    found = {p.name: sys_path_edits(p.read_text()) for p in sorted(BENCH.glob("*.py")) if p.name not in SYS_PATH_PENDING}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_sys_path_check_sees_every_kind_of_edit():
    text = ("import sys\nsys.path.insert(0, 'x')\nsys.path[:] = []\nsys.path.append('y')\nsys.path = ['z']\n"
            "sys.path += ['w']\nprint(sys.path)\npaths = list(sys.path)\n")
    assert sys_path_edits(text) == [2, 3, 4, 5, 6]
