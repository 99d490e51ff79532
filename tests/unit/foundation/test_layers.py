"""The layering of the code, checked from the source: no import circles, no import of a higher layer.

Layers, bottom to top (docs/architecture.md, "Layers"): the shared foundation ``fabricflow``
(settings, stream catalog, logging, service lifecycle) <- ``schemas`` <- ``processors.logic`` (the pure
domain library: inventory, categories, windows, detectors, policy) <- the services ``ingest``,
``processors`` (Faust wiring) and ``sinks`` <- ``query`` (reads the archive the sinks write) <- ``replay``
and ``console`` <- ``devtools`` (embedded stack, demo, runner, simulator, scoring) <- ``cli`` <- ``bench``
(benchmarks) <- ``scripts``. Packages of one layer do not import each other. ``deploy/`` (dashboard
builder) and ``docs/`` (examples) stand alone: they import none of our packages and none imports them.
Every ``.py`` file outside ``tests/`` must belong to one of these. Every import counts, also one inside a
function; only ``if TYPE_CHECKING:`` blocks are left out.
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
    "ingest": 3,
    "processors": 3,
    "sinks": 3,
    "query": 4,
    "replay": 5,
    "console": 5,
    "devtools": 6,
    "cli": 7,
    "bench": 8,
    "scripts": 9,
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


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports_of(path: Path, module: str, known: set[str] | None = None) -> set[str]:
    """Modules (of our packages) that ``module`` imports. ``from pkg import name`` counts as an import of
    ``pkg.name`` when that is a module in ``known``, else of ``pkg``."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
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
    assert {"bench.common", "scripts.console-screenshots", "cli.main", "devtools.stack"} <= set(mods)
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
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cli.main\n", set()),
])
def test_the_checker_sees_lazy_imports_and_skips_type_checking(tmp_path, source, expect):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imports_of(path, "fabricflow.m", {"query.reports", "cli.main"}) == expect


def test_the_checker_finds_a_circle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert package_of("processors.logic.core") == "processors.logic"
    assert LAYERS[package_of("cli.main")] > LAYERS[package_of("query.reports")]
