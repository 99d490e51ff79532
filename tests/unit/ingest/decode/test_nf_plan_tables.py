"""The per-plan gather tables of ``_nf_plan.Plan`` are bounded in size, all plans together.

Found by fuzzing the IPFIX target (RSS kept growing): every distinct template layout got a cached
(records x row size) offset table of up to 1 MB, and the plan cache holds 4,096 layouts, so an exporter
redefining a template with ever new layouts (4,096 biflow layouts, ~400 records each) made ingest hold
5.9 GB. Tables now stop at 128 rows and at a budget for all plans; past either, the column kernel gives
the same rows.
"""

from __future__ import annotations

import gc

import numpy as np

from ingest.decode import _nf_plan as P
from ingest.decode.batch import _gather_bytes

CONST = P.const_block(4, bytes(range(16)), 7, 1_700_000_000_000, 1_700_000_000_500, 3)


def _reference(plan: P.Plan, body: bytes, n: int) -> bytes:
    return _gather_bytes(plan, CONST, body, None, 1, n).tobytes()


def test_tables_stay_within_the_budget_and_rows_stay_right(monkeypatch):
    gc.collect()
    start = P._TABLES[0]
    monkeypatch.setattr(P, "_TABLE_BUDGET", start + (2 << 20))
    rng = np.random.default_rng(5)
    plans = [P.Plan([(210, 0, 1 + i), (8, 0, 4), (12, 0, 4), (1, 0, 8), (2, 0, 4)], "ipfix") for i in range(120)]
    for i, plan in enumerate(plans):
        n = (1, 30, 128, 129, 600)[i % 5]
        body = rng.integers(0, 256, n * plan.rec_len, dtype=np.uint8).tobytes()
        assert plan.gather(body, n, CONST).tobytes() == _reference(plan, body, n)
        assert P._TABLES[0] <= P._TABLE_BUDGET
        assert plan._table is None or len(plan._table) <= P.TABLE_ROWS
    assert any(p._table is None for p in plans[-20:])  # the budget was reached: later plans use the column kernel
    del plans, plan
    gc.collect()
    assert P._TABLES[0] == start  # a plan's table is given back when the plan goes
