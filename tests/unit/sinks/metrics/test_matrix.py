"""sinks.metrics.matrix: a matrix.windows.v2 window is summed columnar into the same series as its cells one by one,
and as a plain per-cell sum says."""

from __future__ import annotations

from collections import Counter

import numpy as np

from processors.logic.enrich.inventory import Inventory
from schemas.matrix import VALUE_FIELDS, MatrixWindow
from sinks.metrics.matrix import as_window
from sinks.metrics.state import MetricsState

T0 = 1_800_000_000_000
INVENTORY = {"nodes": [{"name": f"gpu-{i}", "addresses": [f"10.0.0.{i}"], "group": "gpu", "rack": "r1"}
                       for i in range(1, 9)],
             "jobs": [{"name": "job-a", "nodes": ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]}]}


def cells(n: int = 300, seed: int = 3, end: int = T0 + 10_000) -> list[dict]:
    rng = np.random.default_rng(seed)
    names = [f"gpu-{i}" for i in range(1, 9)] + ["", "10.9.9.9", "unknown"]
    cats = ["collective", "rocev2", "storage", ""]
    seen, out = set(), []
    while len(out) < n:
        s, d, c = names[rng.integers(len(names))], names[rng.integers(len(names))], cats[rng.integers(len(cats))]
        if (s, d, c) in seen:
            continue
        seen.add((s, d, c))
        v = {f: int(rng.integers(0, 1000)) * int(rng.random() < 0.5) for f in VALUE_FIELDS}
        out.append({"window_start_ms": end - 10_000, "window_end_ms": end, "level": "node", "src": s, "dst": d,
                    "category": c, **v})
    return sorted(out, key=lambda c: (c["src"], c["dst"], c["category"]))


def state() -> MetricsState:
    st = MetricsState()
    st.set_inventory(Inventory.from_dict(INVENTORY, "t"))
    return st


def series(st: MetricsState) -> dict:
    st.roce.visibility.close()
    return {f.name: dict(f.values) for f in st.families if f.values}


def test_a_window_gives_the_series_of_its_cells_one_by_one():
    cs = cells()
    whole, each = state(), state()
    assert whole.add_matrix([MatrixWindow.from_cells(cs)], [b"w"]) == len(cs)
    assert each.add_matrix(cs) == len(cs)
    assert series(whole) == series(each)
    label = lambda x: "unknown" if not x or x[0].isdigit() else x  # noqa: E731
    tx, syn = Counter(), Counter()
    for c in cs:
        tx[(label(c["src"]), c["category"] or "unknown", "tx")] += c["bytes_est"]
        syn[(label(c["src"]), "tx")] += c["syn_packets_est"]
    assert {k: v for k, v in whole.app_bytes.values.items() if k[2] == "tx"} == dict(tx)
    assert {k: v for k, v in whole.syn.values.items() if k[1] == "tx"} == {k: v for k, v in syn.items() if v}
    assert whole.roce.node.values  # the RoCEv2 operations arrive too
    assert whole.matrix_window_ms == T0 + 10_000


def test_the_same_window_again_is_skipped_whole_and_other_shards_add_up():
    cs = cells(20)
    st = state()
    w0, w1 = MatrixWindow.from_cells(cs, shard=0), MatrixWindow.from_cells(cs, shard=1)
    st.add_matrix([w0, w1], [w0.key().encode(), w1.key().encode()])
    once = dict(st.app_bytes.values)
    assert st.add_matrix([w0], [w0.key().encode()]) == 0  # re-emitted after a processor crash
    assert st.app_bytes.values == once
    assert st.skipped.values == {("matrix", "duplicate"): len(cs)}
    single = state()
    single.add_matrix([MatrixWindow.from_cells(cs)])
    assert once == {k: 2 * v for k, v in single.app_bytes.values.items()}


def test_rack_and_group_windows_and_bad_cells():
    st = state()
    rack = [{"window_start_ms": T0, "window_end_ms": T0 + 10_000, "level": "rack", "src": "r1", "dst": s,
             "category": "collective", "bytes_est": 5, "packets_est": 1} for s in ("r1", "r2")]
    st.add_matrix([MatrixWindow.from_cells(rack)])
    assert st.r2r_bytes.values == {("r1", "r1", "collective"): 5, ("r1", "r2", "collective"): 5}
    st.add_matrix([{**rack[0], "bytes_est": "x"}, {**rack[0], "level": "switch"}, 7])
    assert st.undecodable.values == {("matrix", "bad_record"): 3}
    assert len(as_window(rack[0])) == 1
