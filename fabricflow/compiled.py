"""Import a compiled extension module of ours, or fail with one line that names the fix.

The sFlow decoder (``ingest.decode._sflow_compiled``) and the batch codec's column walk
(``schemas._batch_compiled``) are C extension modules built from their ``.pyx`` sources when the wheel,
the image or an editable install (``make venv``) is built; nothing is compiled at run time. A source tree
that was never built has no such module, and one whose ``.pyx`` changed since the build has a stale one:
both raise :class:`NotBuilt`, which the command line prints as one line. Why: docs/architecture.md,
"Compiled decoders".
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

__all__ = ["NotBuilt", "load"]

FIX = "install fabricflow from its wheel, or run `make venv` (pip install -e .) in the source tree; " \
      "building needs a C compiler and the Python headers"


class NotBuilt(ImportError):
    """A compiled module is missing or older than its source."""


def load(name: str) -> ModuleType:
    """The compiled module ``name`` (e.g. ``ingest.decode._sflow_compiled``), checked to be built and current."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        raise NotBuilt(f"the compiled module {name} is not built: {FIX}") from None
    built = Path(module.__file__)
    # present in a source tree, not in a wheel: its .pyx, and the .pxd declarations beside it (cimported ones too)
    sources = [built.parent / (name.rsplit(".", 1)[-1] + ".pyx"), *sorted(built.parent.glob("*.pxd"))]
    try:
        built_at = built.stat().st_mtime
    except OSError:
        return module
    for source in sources:
        try:
            stale = source.stat().st_mtime > built_at
        except OSError:
            continue
        if stale:
            raise NotBuilt(f"the compiled module {name} is older than {source.name}: {FIX}")
    return module
