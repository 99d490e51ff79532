"""No module reaches into another module's private names, checked from the source of the whole product.

A name with one leading underscore belongs to the module that defines it; a module whose own name starts
with an underscore (``ingest/decode/_nf_plan.py``) belongs to the package that holds it. So, in every
source module (the files ``tests/unit/foundation/test_layers.py`` checks; tests are free to look inside):

* ``from x import _name`` / ``from . import _name``, where ``x._name`` is not a module, is a reach into
  ``x``'s private name; ``x._name`` where ``x`` is a module of ours (``import x``, ``import x as y``,
  ``from p import x``; attribute chains ``p.x._name`` too) likewise;
* a private module (``_mod``, or any module below one) is imported only from inside its own package.

Names with two leading and trailing underscores (``__version__``, ``__all__``) are public.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .test_layers import import_target, source_modules


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner(module: str) -> str | None:
    """The package a private module belongs to (the parent of its first private part), else None."""
    parts = module.split(".")
    for i, p in enumerate(parts):
        if _private(p):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".") or package == ""


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"] when the expression is a chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def reaches(path: Path, module: str, known: set[str]) -> list[str]:
    """One line per place ``module`` (source at ``path``) uses a private name of another module of ours."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    ours = {m.split(".")[0] for m in known}
    bound: dict[str, str] = {}  # local name -> module of ours it is bound to
    symbols: dict[str, str] = {}  # local name -> "module.name" of a class or function imported from ours
    out: list[str] = []

    def check_module(target: str, line: int) -> None:
        owner = _owner(target)
        if owner is not None and not _inside(module, owner):
            out.append(f"{module}:{line} imports private module {target}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in ours:
                    continue
                check_module(a.name, node.lineno)
                if a.asname:
                    bound[a.asname] = a.name
                else:
                    bound.setdefault(a.name.split(".")[0], a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            target = import_target(node, module, is_pkg)
            if target.split(".")[0] not in ours:
                continue
            check_module(target, node.lineno)
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in known:
                    check_module(sub, node.lineno)
                    bound[a.asname or a.name] = sub
                elif _private(a.name) and target != module:
                    out.append(f"{module}:{node.lineno} imports {a.name} from {target}")
                else:
                    symbols[a.asname or a.name] = sub
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        chain = _chain(node.value)
        if chain and len(chain) == 1 and chain[0] in symbols:
            out.append(f"{module}:{node.lineno} uses {symbols[chain[0]]}.{node.attr}")
            continue
        if not chain or chain[0] not in bound:
            continue
        target = ".".join([bound[chain[0]], *chain[1:]])
        if target in known and target != module and f"{target}.{node.attr}" not in known:
            out.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names():
    mods = source_modules()
    known = set(mods)
    bad = [line for mod, path in sorted(mods.items()) for line in reaches(path, mod, known)]
    assert bad == [], "private names used across modules (make them public where they are defined):\n" + \
        "\n".join(bad)


@pytest.mark.parametrize("module, source, expect", [
    ("pkg.b", "from pkg.a import _hidden\n", ["pkg.b:1 imports _hidden from pkg.a"]),
    ("pkg.b", "from .a import _hidden, shown\n", ["pkg.b:1 imports _hidden from pkg.a"]),
    ("pkg.b", "from pkg import a\nx = a._hidden\n", ["pkg.b:2 uses pkg.a._hidden"]),
    ("pkg.b", "import pkg.a\nx = pkg.a._hidden\n", ["pkg.b:2 uses pkg.a._hidden"]),
    ("pkg.b", "def f():\n    import pkg.a as m\n    return m._hidden\n", ["pkg.b:3 uses pkg.a._hidden"]),
    ("pkg.b", "from pkg import _impl\nfrom . import _impl as i\nx = _impl.f\n", []),  # own package's private module
    ("other.c", "from pkg import _impl\n", ["other.c:1 imports private module pkg._impl"]),
    ("other.c", "from pkg._impl import f\n", ["other.c:1 imports private module pkg._impl"]),
    ("pkg.b", "from pkg.a import __all__\nimport os\nx = os._exit\ny = self._state\n", []),
    ("pkg.a", "from pkg.a import _hidden\n", []),
    ("pkg.b", "from pkg.a import Thing\nThing._cache.clear()\n", ["pkg.b:2 uses pkg.a.Thing._cache"]),
])
def test_the_check_sees_each_kind_of_reach(tmp_path, module, source, expect):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert reaches(path, module, {"pkg", "pkg.a", "pkg.b", "pkg._impl", "other", "other.c"}) == expect
