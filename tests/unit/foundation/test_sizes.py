"""Small modules and short functions, checked from the source of the whole product: no module over
:data:`MAX_MODULE_LINES` lines and no function over :data:`MAX_FUNCTION_LINES` lines (decorators aside).
The Cython sources (``.pyx``: the compiled decoders) are held to the same limits; their functions are
measured from the text (:func:`pyx_functions`), as ``ast`` cannot read them.

:data:`TABLES` names the modules exempt because they are generated or table code (none now). :data:`NOT_YET`
names the ones still over a limit and not split yet (issue #30); the test fails once one of them is within
its limit, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .test_layers import NOT_SOURCE, ROOT, source_modules

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


_PYX_DEF = re.compile(r"(?:cdef|cpdef|def)\s+(?:inline\s+)?(?:[\w.*\[\]]+\s+)*?(\w+)\s*\(")


def pyx_functions(text: str):
    """(name, lines) of every top-level ``def``/``cdef``/``cpdef`` function of a Cython source: from its
    ``def`` line to its last non-blank line before the next line at column 0, a comment too (structs and enums are no
    functions)."""
    lines = text.splitlines()
    starts = [(i, m.group(1)) for i, line in enumerate(lines)
              if (m := _PYX_DEF.match(line)) and not re.match(r"cdef\s+(packed\s+)?(struct|enum|class)\b", line)]
    for i, name in starts:
        end = i
        for j in range(i + 1, len(lines)):
            line = lines[j]
            if line.strip() and not line[0].isspace() and not line.startswith(")"):
                break
            if line.strip():
                end = j
        yield name, end - i + 1


def pyx_modules() -> dict[str, Path]:
    """Every ``.pyx`` source of the product, by module name."""
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted(ROOT.rglob("*.pyx"))
            if p.relative_to(ROOT).parts[0] not in NOT_SOURCE and not any(x.startswith(".") for x in p.parts)}


def oversized() -> set[tuple[str, str | None]]:
    out = set()
    for mod, path in source_modules().items():
        if mod in TABLES:
            continue
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            out.add((mod, None))
        out |= {(mod, name) for name, n in _functions(ast.parse(text, str(path))) if n > MAX_FUNCTION_LINES}
    for mod, path in pyx_modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            out.add((mod, None))
        out |= {(mod, name) for name, n in pyx_functions(text) if n > MAX_FUNCTION_LINES}
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


def test_the_compiled_decoders_are_measured_too():
    mods = pyx_modules()
    assert {"ingest.decode._sflow_compiled", "ingest.decode._sflow_packet", "schemas._batch_compiled"} <= set(mods)
    walk = dict(pyx_functions(mods["ingest.decode._sflow_compiled"].read_text()))
    assert {"walk", "_datagram", "_flow_sample", "_counter_row", "capacity", "_fail"} <= set(walk)
    assert "Out" not in walk and "FlowRow" not in walk


def test_pyx_functions_end_at_the_next_top_level_line():
    src = ("cdef enum:\n    A = 1\n\n\ncdef inline int64_t _u(const uint8_t* b,\n        Py_ssize_t p) noexcept nogil:\n"
           "    return b[p]\n\n\ncdef struct S:\n    int x\n\n\ndef walk(list d):\n    x = 1\n\n"
           "    return x\n\n# trailing comment\n")
    assert list(pyx_functions(src)) == [("_u", 3), ("walk", 4)]
