"""The policy reuses the detector engine's string codes of a batch: same factorization, same alerts."""

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.config_files import read_inventory
from processors.logic.core import ProcessorCore
from processors.logic.engine import Engine
from processors.logic.enrich.enricher import Enricher
from processors.logic.windows.groupby import factorize, factorize_interned
from processors.logic.windows.interning import Interner
from tests.support.synth import training_batches

INVENTORY = Path(__file__).resolve().parents[3] / "data" / "cluster_inventory.yaml"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["", "gpu", "unknown", "storage", "é-node", "a", "b", "mgmt", "Z"]), max_size=40),
       st.lists(st.text(max_size=3), max_size=5))
def test_factorize_interned_equals_factorize(values, known_first):
    interner = Interner([""] + known_first)  # codes in any order, not sorted
    col = np.array(values, dtype=object)
    (codes,) = interner.codes(col)
    u1, c1 = factorize(col)
    u2, c2 = factorize_interned(codes, interner.strings)
    assert u1.tolist() == u2.tolist() and c1.tolist() == c2.tolist()


def test_alerts_equal_with_and_without_shared_codes(monkeypatch):
    inv = read_inventory(str(INVENTORY))
    batches = [b for _e, b in training_batches(seconds=60, seed=3)]
    shared = ProcessorCore(inv)
    out_shared = [o for b in batches for o in shared.process_raw(b)[1]]
    real = Engine.process_flows

    def no_codes(self, batch, *labels):
        out = real(self, batch, *labels)
        self.last_codes = None
        return out

    monkeypatch.setattr(Engine, "process_flows", no_codes)
    plain = ProcessorCore(inv)
    out_plain = [o for b in batches for o in plain.process_raw(b)[1]]
    assert [o for o in out_shared if o.kind == "alert"], "the input fires alerts"
    assert out_shared == out_plain
    assert shared.snapshot() == plain.snapshot()


def test_detectors_equal_with_and_without_enricher_label_codes(monkeypatch):
    """The engine codes the string columns from the enricher's label codes: same outputs, same state."""
    inv = read_inventory(str(INVENTORY))
    batches = [b for _e, b in training_batches(seconds=60, seed=5)]
    with_labels = ProcessorCore(inv)
    calls = []
    real = Engine._label_codes

    def spy(self, labels):
        got = real(self, labels)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(Engine, "_label_codes", spy)
    out_labels = [o for b in batches for o in with_labels.process_raw(b)[1]] + with_labels.flush()
    assert calls and all(calls)  # label codes used, also for the first batches (strings new to the interner)
    monkeypatch.setattr(Enricher, "label_codes", lambda self, rows: None)
    plain = ProcessorCore(inv)
    out_plain = [o for b in batches for o in plain.process_raw(b)[1]] + plain.flush()
    assert out_labels == out_plain
    assert with_labels.snapshot() == plain.snapshot()


def _labelled(rng, n, tables):
    """An enriched batch whose coded columns are gathers from ``tables``, with its label codes."""
    from processors.logic.engine import CODED_FIELDS
    from schemas.columns import dtype_for

    b = np.zeros(n, dtype=dtype_for("flow_enriched"))
    b["time_end_ms"] = b["time_start_ms"] = 1_000_000 + rng.integers(0, 40_000, n)
    b["bytes_est"] = rng.integers(0, 10**6, n)
    b["packets"] = b["packets_est"] = rng.integers(1, 100, n)
    b["sampling_rate"] = rng.integers(1, 3, n)
    b["dst_addr"][:, 15] = rng.integers(0, 3, n)
    labels = {}
    for f in CODED_FIELDS:
        t = tables["category" if f == "category" else f.split("_")[1]]
        rows = rng.integers(0, len(t.strings), n)
        b[f] = t.strings[rows]
        labels[f] = (rows, t)
    return b, labels


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(0, 60), min_size=1, max_size=6), st.integers(-1, 5),
       st.booleans())
def test_engine_label_codes_equal_plain(seed, sizes, restore_at, with_none):
    """Tables holding strings not yet interned, "" and (or not) None; a restore in between."""
    from schemas.codec import StringTable

    rng = np.random.default_rng(seed)
    tables = {"node": StringTable(["", "n1", "n2", "n3"]), "group": StringTable(["unknown", "gpu", ""]),
              "rack": StringTable(["", "r1", "n1"]),
              "job": StringTable(["", "job-1", None if with_none else "job-2"]),
              "category": StringTable(["rocev2", "collective", "dns"])}
    fast, plain = Engine(), Engine()
    used = []
    real = fast._label_codes
    fast._label_codes = lambda labels: used.append(real(labels)) or used[-1]
    for i, n in enumerate(sizes):
        if i == restore_at:
            fast.restore(fast.snapshot())
        b, labels = _labelled(rng, n, tables)
        assert fast.process_flows(b, labels) == plain.process_flows(b)
        assert (fast.last_codes is None) == (plain.last_codes is None)
        if plain.last_codes is not None:
            got, want = fast.last_codes, plain.last_codes
            assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
        assert fast.interner.strings == plain.interner.strings
    if not with_none and len([n for n in sizes if n > 40]) > 1:
        assert any(u is not None for u in used)  # once every string has a code, the label codes are used
    assert fast.flush() == plain.flush()
    assert fast.snapshot() == plain.snapshot()
