"""The readable reference decoders are used by tests only: no product module imports them.

``ingest.decode.reference`` (sFlow) and ``schemas.reference`` (batch messages) define what the compiled
decoders must return; production always runs the compiled ones (docs/architecture.md, "Compiled
decoders"). Benchmarks may time a reference beside the production path.
"""

from __future__ import annotations

from .test_layers import graph

REFERENCES = ("ingest.decode.reference", "schemas.reference")


def _is_reference(module: str) -> bool:
    return any(module == r or module.startswith(r + ".") for r in REFERENCES)


def test_no_product_module_imports_a_reference_decoder():
    bad = sorted(f"{mod} imports {t}" for mod, targets in graph().items() for t in targets
                 if _is_reference(t) and not _is_reference(mod) and not mod.startswith("bench."))
    assert bad == []


def test_the_references_exist_where_the_check_looks():
    mods = graph()
    assert {"ingest.decode.reference.sflow", "ingest.decode.reference.packet", "schemas.reference.batch"} <= set(mods)
    assert not any(_is_reference(t) for t in mods["ingest.decode.sflow"] | mods["schemas.codec"])
