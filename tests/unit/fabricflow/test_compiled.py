"""Nothing is compiled when a decoder is imported or first used, and nothing is written anywhere.

The sFlow decoder and the batch codec's column walk are C extension modules built with the wheel (or image,
or editable install): docs/architecture.md, "Compiled decoders". Here the three packages they live in are
copied as a wheel holds them (built modules, no ``.pyx``/``.c``, no ``__pycache__``) and imported in a fresh
interpreter with no home directory, no bytecode writing and a minimal environment; both decoders then run.
The copy must be byte for byte unchanged afterwards and no JIT compiler may have been loaded (numba's
on-disk cache made the first start compile for 15-40 s, or fail on a read-only install). The full
packaged-install test (wheel, read-only prefix, unprivileged user, every service) is
tests/integration/test_packaged_install.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fabricflow.compiled import NotBuilt, load

PACKAGES = ("fabricflow", "schemas", "ingest")

PROBE = r"""
import sys, time
t0 = time.perf_counter()
from ingest.decode import TemplateCache, decode
from schemas import codec
from schemas.columns import empty_flows
import ingest.decode._sflow_compiled as s, schemas._batch_compiled as b
assert all(m.__file__.startswith(sys.argv[1]) for m in (s, b, codec)), (s.__file__, codec.__file__)
assert s.__file__.endswith(".so") and b.__file__.endswith(".so")
d = bytes.fromhex(sys.argv[2])
r = decode(d, "192.0.2.1", 1, TemplateCache())
assert len(r.flows) == 1 and len(codec.decode_batch(codec.encode_batch("flow_batch", r.flows))) == 1
jit = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite"))
assert not jit, jit
print(f"ready in {time.perf_counter() - t0:.3f} s")
"""


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _wheel_like_copy(dest: Path) -> None:
    for name in PACKAGES:
        src = Path(importlib.util.find_spec(name).origin).parent
        shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyx", "*.c", "*.pyc"))
    for d in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        d.chmod(0o555)


def test_decoders_import_and_run_without_compiling_or_writing(tmp_path):
    from devtools import sflow_build as b

    root = tmp_path / "site"
    root.mkdir()
    _wheel_like_copy(root)
    before = _listing(root)
    datagram = b.datagram([b.flow_sample([b.raw_header(b.tcp_frame())])])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
    try:
        run = subprocess.run([sys.executable, "-c", PROBE, str(root), datagram.hex()], cwd=root, env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ready in" in run.stdout
    assert _listing(root) == before


def test_a_missing_or_stale_compiled_module_is_one_clear_error(tmp_path, monkeypatch):
    with pytest.raises(NotBuilt, match=r"ingest\.decode\._gone is not built: .*make venv.*C compiler"):
        load("ingest.decode._gone")
    pkg = tmp_path / "stalepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_mod.py").write_text("X = 1\n")  # stands in for the built module
    (pkg / "_mod.pyx").write_text("X = 2\n")
    os.utime(pkg / "_mod.py", (1_000_000, 1_000_000))  # built before its source changed
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NotBuilt, match=r"stalepkg\._mod is older than _mod\.pyx: .*make venv"):
        load("stalepkg._mod")
    os.utime(pkg / "_mod.pyx", (500_000, 500_000))
    assert load("stalepkg._mod").X == 1
    (pkg / "_shared.pxd").write_text("cdef struct S:\n    int x\n")  # declarations it cimports changed since
    with pytest.raises(NotBuilt, match=r"stalepkg\._mod is older than _shared\.pxd"):
        load("stalepkg._mod")
    os.utime(pkg / "_shared.pxd", (500_000, 500_000))
    assert load("stalepkg._mod").X == 1
