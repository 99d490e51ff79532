"""tests/unit mirrors the package tree: a newcomer finds the tests of ``ingest/decode/sflow.py`` in
``tests/unit/ingest/decode/test_sflow*.py``, and the tests of a module move with it.

The rule, for every ``tests/unit/<dir>/test_<name>.py``:

- ``<dir>`` is a folder of the repository (a package, or ``bench``, whose scripts have their own tests);
- ``<name>`` is a module of that folder (``.py`` or ``.pyx``, leading underscore dropped: ``_nf_plan`` ->
  ``test_nf_plan*.py``), a subpackage of it, or the folder's own name (the package's API from its
  ``__init__``), optionally followed by ``_<aspect>`` (several files per module where sensible).

Tests of the whole product (layers, sizes, docs, compose, dashboards) are listed in ``CROSS_CUTTING``. Shared
harnesses and datagram builders live in ``tests/support/``: no other module sits in tests/unit.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "tests" / "unit"

CROSS_CUTTING = {
    "bench/test_scripts_start.py",  # every bench script starts (--help)
    "foundation/test_compose.py",  # docker-compose and the settings it passes
    "foundation/test_doc_links.py",
    "foundation/test_layers.py",
    "foundation/test_module_docstrings.py",
    "foundation/test_private_names.py",
    "foundation/test_reference_use.py",
    "foundation/test_sizes.py",
    "foundation/test_test_mirror.py",
    "monitoring/test_dashboards.py",  # deploy/ Grafana dashboards against the metrics the code exports
    "monitoring/test_prometheus_rules.py",  # deploy/ Prometheus rules, likewise
}
SUPPORT_OK = {"__init__.py", "conftest.py"}


def _names(folder: Path) -> set[str]:
    out = {folder.name}
    for p in folder.iterdir():
        if p.is_dir() and (p / "__init__.py").exists():
            out.add(p.name)
        elif p.suffix in (".py", ".pyx") and p.stem != "__init__":
            out.add(p.stem.lstrip("_"))
    return out


def mirror_problems() -> list[str]:
    problems = []
    for f in sorted(UNIT.rglob("*.py")):
        rel = f.relative_to(UNIT).as_posix()
        if rel in CROSS_CUTTING or f.name in SUPPORT_OK:
            continue
        if not f.name.startswith("test_"):
            problems.append(f"{rel}: not a test; shared helpers go to tests/support/")
            continue
        folder = REPO / f.parent.relative_to(UNIT)
        if not folder.is_dir():
            problems.append(f"{rel}: no folder {folder.relative_to(REPO)} in the repository")
            continue
        stem = f.stem[len("test_"):]
        if not any(stem == n or stem.startswith(n + "_") for n in _names(folder)):
            problems.append(f"{rel}: names no module of {folder.relative_to(REPO)}/")
    return problems


def test_every_unit_test_file_names_the_module_it_tests():
    assert mirror_problems() == []


def test_cross_cutting_list_names_existing_files():
    assert sorted(p for p in CROSS_CUTTING if not (UNIT / p).exists()) == []


def test_the_rule_rejects_a_misplaced_test(tmp_path, monkeypatch):
    """The check can fail: a test in a folder the repository does not have, and one naming no module."""
    unit = tmp_path / "tests" / "unit"
    (unit / "nowhere").mkdir(parents=True)
    (unit / "nowhere" / "test_x.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "real.py").write_text("")
    (unit / "pkg").mkdir()
    (unit / "pkg" / "test_real_aspect.py").write_text("")
    (unit / "pkg" / "test_other.py").write_text("")
    (unit / "pkg" / "helpers.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "REPO", tmp_path)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "UNIT", unit)
    got = mirror_problems()
    assert [p.split(":")[0] for p in got] == ["nowhere/test_x.py", "pkg/helpers.py", "pkg/test_other.py"]


def test_no_test_imports_a_bench_script():
    """Harnesses used by tests live in tests/support/ or devtools/; only the tests of bench/ itself import it."""
    own = {REPO / "tests" / "integration" / "test_ingest_bench_peers.py"}  # bench/ingest.py's Kafka peers
    found = []
    for f in sorted((REPO / "tests").rglob("*.py")):
        if f.is_relative_to(UNIT / "bench") or f in own:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{f.relative_to(REPO)}: {m}" for m in mods if m.split(".")[0] == "bench"]
    assert found == []


# The foundation checks share one reader of the source tree (the import graph in test_layers.py): the checker
# machinery itself, not a harness, and it moves with them.
TEST_IMPORTS_OK = {"tests.unit.foundation.test_layers"}


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``test_*.py`` anywhere under tests/) that the module at ``path`` imports."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            mods = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out += [m for m in mods if m.startswith("tests.") and m.rsplit(".", 1)[-1].startswith("test_")]
    return sorted(set(out))


def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/ (or devtools/): a test module imports no other test module."""
    found = []
    for f in sorted((REPO / "tests").rglob("*.py")):
        found += [f"{f.relative_to(REPO)}: {m}" for m in imported_test_modules(f) if m not in TEST_IMPORTS_OK]
    assert found == []


def test_the_import_rule_sees_absolute_and_relative_test_imports(tmp_path, monkeypatch):
    (tmp_path / "tests" / "unit" / "pkg").mkdir(parents=True)
    f = tmp_path / "tests" / "unit" / "pkg" / "test_a.py"
    f.write_text("from .test_b import x\nfrom tests.unit.other.test_c import y\nimport tests.unit.test_d\n"
                 "from tests.support.archive import T0\nfrom . import test_e\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "REPO", tmp_path)
    assert imported_test_modules(f) == ["tests.unit.other.test_c", "tests.unit.pkg.test_b", "tests.unit.pkg.test_e",
                                        "tests.unit.test_d"]
