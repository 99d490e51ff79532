"""Small modules and short functions, checked from the source of the whole product: no module over
:data:`MAX_MODULE_LINES` lines and no function over :data:`MAX_FUNCTION_LINES` lines (decorators aside).

:data:`TABLES` names the modules exempt because they are generated or table code (none now). :data:`NOT_YET`
names the ones still over a limit and not split yet (issue #30); the test fails once one of them is within
its limit, so the list only shrinks.
"""

from __future__ import annotations

import ast

import pytest

from .test_layers import source_modules

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 150

#: module -> why it is exempt (generated or table code only)
TABLES: dict[str, str] = {}

#: (module, function or None for the module's length) still over the limit: to split (none left)
NOT_YET: set[tuple[str, str | None]] = set()


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")


def oversized() -> set[tuple[str, str | None]]:
    out = set()
    for mod, path in source_modules().items():
        if mod in TABLES:
            continue
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            out.add((mod, None))
        out |= {(mod, name) for name, n in _functions(ast.parse(text, str(path))) if n > MAX_FUNCTION_LINES}
    return out


def test_no_module_or_function_over_the_limits():
    over = oversized()
    assert sorted(over - NOT_YET, key=str) == [], \
        f"over {MAX_MODULE_LINES} lines (module) or {MAX_FUNCTION_LINES} lines (function): split it"
    assert sorted(NOT_YET - over, key=str) == [], "within the limits now: remove from NOT_YET"


@pytest.mark.parametrize("source, expect", [
    ("def f():\n" + "    x = 1\n" * 150, [("f", 151)]),
    ("class C:\n    def m(self):\n        def inner():\n            pass\n", [("C.m", 3), ("C.m.inner", 2)]),
])
def test_functions_are_measured_with_their_qualified_names(source, expect):
    assert list(_functions(ast.parse(source))) == expect
