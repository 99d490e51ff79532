"""The layering of the code, checked from the source: no import circles, no import of a higher layer.

Layers, bottom to top (docs/architecture.md, "Layers"): the shared foundation ``fabricflow``
(settings, stream catalog, Kafka clients, logging, service lifecycle) <- ``schemas`` <- ``processors.logic``
(the pure domain library: enrichment, windows, detectors, policy rules) <- ``processors.config_files`` (the
files that library is built from, read and watched) and ``processors.jobsource`` (live job membership) <- the services ``ingest``, ``processors`` (Faust
wiring) and ``sinks`` <- ``query`` (reads the archive the sinks write) <- ``replay`` and ``console`` <-
``devtools`` (embedded stack, demo, runner, simulator, scoring) <- ``cli`` <- ``bench`` (benchmarks) <-
``scripts``. Packages of one layer do not import each other. ``deploy/`` (dashboard builder) and ``docs/``
(examples) stand alone: they import none of our packages and none imports them. Every ``.py`` file outside ``tests/`` must belong to one of these.
Every import counts: one inside a function, and one under ``if TYPE_CHECKING:`` too (a module that names
another's types only to annotate is still tied to it). The pure layer reads no file, no clock and logs
nothing (:func:`test_the_pure_layer_does_no_io`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYERS = {
    "fabricflow": 0,
    "schemas": 1,
    "processors.logic": 2,
    "processors.config_files": 3,
    "processors.jobsource": 3,
    "ingest": 4,
    "processors": 4,
    "sinks": 4,
    "query": 5,
    "replay": 6,
    "console": 6,
    "devtools": 7,
    "cli": 8,
    "bench": 9,
    "scripts": 10,
}
STANDALONE = {"deploy", "docs"}
PACKAGES = sorted({name.split(".")[0] for name in LAYERS} | STANDALONE)
# folders below the root that hold no source of ours (the tests are checked by their own imports at run time)
NOT_SOURCE = {"tests", "build", "dist", "var", "node_modules"}


def package_of(module: str) -> str | None:
    """The entry of LAYERS a module belongs to (the longest matching prefix)."""
    best = None
    for name in LAYERS:
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(best):
                best = name
    return best


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_target(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    """The module a ``from ... import`` in ``module`` (a package's ``__init__`` when ``is_pkg``) reads from."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, module: str, known: set[str] | None = None) -> set[str]:
    """Modules (of our packages) that ``module`` imports. ``from pkg import name`` counts as an import of
    ``pkg.name`` when that is a module in ``known``, else of ``pkg``."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_pkg)
            subs = {f"{target}.{a.name}" for a in node.names}
            mods = subs & known if known is not None else subs
            found.update(mods)
            if len(mods) < len(node.names):  # some names are attributes of the module itself
                found.add(target)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def source_modules() -> dict[str, Path]:
    """Every ``.py`` file below the root but for tests, build output and hidden folders (.venv, .git)."""
    mods = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        if rel[0] in NOT_SOURCE or "__pycache__" in rel or any(p.startswith(".") for p in rel):
            continue
        if len(rel) == 1:
            continue  # a loose file at the root (setup.py and the like) is no package
        mods[_module_name(path)] = path
    return mods


def graph() -> dict[str, set[str]]:
    mods = source_modules()
    g: dict[str, set[str]] = {}
    known = set(mods)
    for mod, path in mods.items():
        g[mod] = {m for m in imports_of(path, mod, known) if m in mods and m != mod}
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_source_module_belongs_to_a_layer():
    mods = source_modules()
    assert {"bench.processors", "devtools.loadgen", "scripts.console-screenshots", "cli.main", "devtools.stack"} <= set(mods)
    assert {m for m in mods if package_of(m) is None and m.split(".")[0] not in STANDALONE} == set()


def test_standalone_folders_import_none_of_ours_and_none_imports_them():
    bad = []
    for mod, targets in graph().items():
        a = mod.split(".")[0]
        for t in sorted(targets):
            b = t.split(".")[0]
            if a != b and (a in STANDALONE or b in STANDALONE):
                bad.append(f"{mod} imports {t}")
    assert bad == []


def test_no_import_circles():
    assert cycles(graph()) == []


def test_no_upward_or_sideways_imports():
    bad = []
    for mod, targets in graph().items():
        a = package_of(mod)
        for t in sorted(targets):
            b = package_of(t)
            if a == b or a is None or b is None:  # the same package, or a standalone folder (its own test)
                continue
            if LAYERS[b] > LAYERS[a] or (LAYERS[b] == LAYERS[a]):
                bad.append(f"{mod} (layer {LAYERS[a]}) imports {t} (layer {LAYERS[b]})")
    assert bad == []


@pytest.mark.parametrize("source, expect", [
    ("from query import reports\n", {"query.reports"}),
    ("from query.reports import ArchiveQuery\n", {"query.reports"}),
    ("def f():\n    import cli.main\n", {"cli.main"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cli.main\n", {"cli.main"}),
])
def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path, source, expect):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imports_of(path, "fabricflow.m", {"query.reports", "cli.main"}) == expect


def test_the_checker_finds_a_circle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert package_of("processors.logic.core") == "processors.logic"
    assert LAYERS[package_of("cli.main")] > LAYERS[package_of("query.reports")]


def test_a_lazy_circle_inside_one_package_fails(tmp_path):
    """settings <-> kafka_security was such a circle: one side imported the other inside a method, the other
    imported it back for its type hints only. Both count, so the checker sees the circle."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def client_config():\n    from .b import librdkafka_config\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import KafkaSettings\n")
    known = {"fabricflow.a", "fabricflow.b"}
    g = {m: imports_of(p, m, known) - {m} for m, p in (("fabricflow.a", a), ("fabricflow.b", b))}
    assert cycles(g) == [["fabricflow.a", "fabricflow.b"]]


# the pure layer: no file, socket or clock access, no logging (docs/architecture.md, "Layers")
PURE = "processors.logic"
IO_MODULES = {"os", "time", "logging", "socket", "shutil", "subprocess", "tempfile", "glob", "faust",
              "confluent_kafka", "s3fs", "fsspec", "urllib", "http", "requests"}
IO_NAMES = {("pathlib", "Path"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("datetime", "now")}
IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "now", "utcnow", "today", "stat", "exists",
            "is_file", "listdir", "scandir"}


def io_uses(path: Path) -> list[str]:
    """What in ``path`` reads or writes files, reads a clock or logs (imports and calls by name)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            root = node.module.split(".")[0]
            out += [f"line {node.lineno}: from {node.module} import {a.name}" for a in node.names
                    if root in IO_MODULES or (root, a.name) in IO_NAMES]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in IO_CALLS:
                out.append(f"line {node.lineno}: {name}()")
    return out


def test_the_pure_layer_does_no_io():
    mods = {m: p for m, p in source_modules().items() if package_of(m) == PURE}
    assert "processors.logic.enrich.inventory.reader" in mods and "processors.logic.rules.config" in mods
    bad = [f"{m}: {use}" for m, p in sorted(mods.items()) for use in io_uses(p)]
    assert bad == []


@pytest.mark.parametrize("source", [
    "from pathlib import Path\n",
    "def f(p):\n    return open(p).read()\n",
    "def f(p):\n    return p.read_bytes()\n",
    "import time\n",
    "from datetime import datetime\ndef f():\n    return datetime.now()\n",
    "import logging\n",
    "def f():\n    import os\n",
])
def test_the_io_check_sees_file_reads_clocks_and_logging(tmp_path, source):
    p = tmp_path / "m.py"
    p.write_text(source)
    assert io_uses(p)
    p.write_text("from pathlib import PurePath\nimport yaml\n\ndef f(text):\n    return yaml.safe_load(text)\n")
    assert io_uses(p) == []
