"""Module docstrings say what the module is for in a few lines; design facts live in docs/, figures in
docs/performance.md. Fails on a module docstring longer than MAX_LINES in any source module (the files
tests/unit/foundation/test_layers.py checks)."""

from __future__ import annotations

import ast

from .test_layers import source_modules

MAX_LINES = 20


def docstring_lines(path) -> int:
    """Lines the module docstring spans in the file (quotes included), 0 without one."""
    tree = ast.parse(path.read_text(), str(path))
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return 0
    return first.end_lineno - first.lineno + 1


def test_module_docstrings_are_short():
    long = sorted(f"{name}: {n} lines" for name, path in source_modules().items()
                  if (n := docstring_lines(path)) > MAX_LINES)
    assert not long, (f"module docstrings over {MAX_LINES} lines (say what the module is for; move design "
                      f"facts to docs/, measurements to docs/performance.md): " + ", ".join(long))


def test_the_check_sees_a_long_docstring(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""Title.\n\n' + "detail\n" * MAX_LINES + '"""\n\nX = 1\n')
    assert docstring_lines(p) == MAX_LINES + 3
    p.write_text("X = 1\n")
    assert docstring_lines(p) == 0
