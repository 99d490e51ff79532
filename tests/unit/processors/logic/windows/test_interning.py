"""The string <-> code table: stable codes, and the codes of a name list (names never seen match nothing)."""

from __future__ import annotations

import numpy as np

from processors.logic.windows.interning import Interner


def test_codes_are_stable_and_known_skips_names_never_interned():
    it = Interner(["", "gpu", "storage"])
    assert [it.code(s) for s in ("gpu", "new", "gpu")] == [1, 3, 1]
    assert it.known(["storage", "absent", "gpu"]) == [2, 1]
    assert it.known(["absent"]) == []
    column = np.array([0, 1, 2, 3, 1], dtype=np.int32)
    assert np.isin(column, it.known(["gpu", "absent"])).tolist() == [False, True, False, False, True]
    assert np.isin(column, it.known(["absent"])).tolist() == [False] * 5
