"""The policy reuses the detector engine's string codes of a batch: same factorization, same alerts."""

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.logic.core import ProcessorCore
from processors.logic.engine import Engine
from processors.logic.inventory import Inventory
from processors.logic.rules.common import factorize, factorize_interned
from processors.logic.windows import Interner
from tests.synth import training_batches

INVENTORY = Path(__file__).resolve().parents[2] / "data" / "cluster_inventory.yaml"


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
    inv = Inventory.load(str(INVENTORY))
    batches = [b for _e, b in training_batches(seconds=60, seed=3)]
    shared = ProcessorCore(inv)
    out_shared = [o for b in batches for o in shared.process_raw(b)[1]]
    real = Engine.process_flows

    def no_codes(self, batch):
        out = real(self, batch)
        self.last_codes = None
        return out

    monkeypatch.setattr(Engine, "process_flows", no_codes)
    plain = ProcessorCore(inv)
    out_plain = [o for b in batches for o in plain.process_raw(b)[1]]
    assert [o for o in out_shared if o.kind == "alert"], "the input fires alerts"
    assert out_shared == out_plain
    assert shared.snapshot() == plain.snapshot()
