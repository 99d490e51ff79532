"""Fast paths of the processors (group-by key, shard_of, interner, deferred window aggregation, matrix cells,
policy membership on codes) give exactly what the straightforward implementations give."""

import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.config_files import read_inventory
from processors.logic.core import shard_of
from processors.logic.detectors.incast import KEYS, MAXES, SUMS, IncastAggregator
from processors.logic.windows.matrix import KEY_COLUMNS, UNKNOWN, VALUE_COLUMNS, CellAggregator, MatrixConfig, matrix_cells
from processors.logic.rules.common import BatchContext, Networks
from processors.logic.windows.groupby import GroupBy, group_reduce, reduce_runs
from processors.logic.windows.interning import Interner, RowInterner
from processors.logic.windows.tumbling import WindowConfig, WindowManager
from schemas.columns import addr_str, dtype_for
from tests.support.windows import PlainStateAgg

ENRICHED = dtype_for("flow_enriched")


# --------------------------------------------------------------------------- group_reduce

def _group_reduce_ref(keys, sums=(), maxes=()):
    """Plain dict-based group-by, groups sorted by key tuple."""
    acc: dict[tuple, list] = {}
    for i in range(len(keys[0])):
        k = tuple(int(c[i]) for c in keys)
        a = acc.setdefault(k, [[0] * len(sums), [None] * len(maxes)])
        for j, v in enumerate(sums):
            a[0][j] += int(v[i])
        for j, v in enumerate(maxes):
            a[1][j] = int(v[i]) if a[1][j] is None else max(a[1][j], int(v[i]))
    ks = sorted(acc)
    return ks, [acc[k][0] for k in ks], [acc[k][1] for k in ks]


_key_dtypes = st.sampled_from([np.int32, np.int64, np.uint64, np.int8, np.bool_])


def _draw_keys(n, specs, data):
    keys = []
    for dt, span in specs:
        if dt is np.bool_:
            keys.append(np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
            continue
        info = np.iinfo(dt)
        lo = max(int(info.min), -span)
        hi = min(int(info.max), span)
        vals = data.draw(st.lists(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi])), min_size=n, max_size=n))
        keys.append(np.array(vals, dtype=dt))
    return keys


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 60), st.lists(st.tuples(_key_dtypes, st.sampled_from([2, 50, 2**31, 2**62, 2**63 - 1])),
                                     min_size=1, max_size=7), st.data())
def test_group_reduce_equals_reference(n, specs, data):
    keys = _draw_keys(n, specs, data)
    sums = [np.array(data.draw(st.lists(st.integers(-10**12, 10**12), min_size=n, max_size=n)), dtype=np.int64)]
    maxes = [np.array(data.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), dtype=np.int64)]
    uk, us, um = group_reduce(keys, sums, maxes)
    rk, rs, rm = _group_reduce_ref(keys, sums, maxes)
    assert [tuple(int(c[g]) for c in uk) for g in range(len(uk[0]))] == rk
    assert [[int(us[0][g])] for g in range(len(rk))] == rs
    assert [[int(um[0][g])] for g in range(len(rk))] == rm
    assert all(u.dtype == k.dtype for u, k in zip(uk, keys))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 60), st.lists(st.tuples(_key_dtypes, st.sampled_from([2, 50, 2**31, 2**62, 2**63 - 1])),
                                     min_size=1, max_size=5), st.booleans(), st.data())
def test_groupby_rows_in_lexsort_order(n, specs, ranked, data):
    """GroupBy sorts on one combined key where the key ranges allow it: the rows come in the order of a
    lexsort on the key columns (and ``desc``), whichever path it takes."""
    keys = _draw_keys(n, specs, data)
    desc = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), dtype=np.float64) if ranked else None
    gb = GroupBy(*keys, desc=desc)
    sort_keys = tuple(k.astype(np.int64) if k.dtype == bool else k for k in reversed(keys))
    want = np.lexsort(sort_keys if desc is None else (-desc, *sort_keys))
    assert gb.order.tolist() == want.tolist()
    rows = [tuple(int(k[i]) for k in keys) for i in want.tolist()]
    starts = [i for i in range(n) if i == 0 or rows[i] != rows[i - 1]]
    assert gb.starts.tolist() == starts
    assert gb.first.tolist() == want[starts].tolist()
    assert [tuple(int(k[i]) for k in keys) for i in range(n)] == [rows[starts[g]] for g in gb.gid.tolist()]


def test_group_reduce_falls_back_when_dense_ranks_overflow_too():
    # small columns (span 500) then one of range ~2^61: the dense rank of the first ones times 2^61 still overflows
    rng = np.random.default_rng(9)
    keys = [rng.integers(0, 5, 9).astype(np.int32), rng.integers(0, 2, 9).astype(bool),
            rng.integers(0, 50, 9).astype(np.int32),
            np.array([0, 2**61, 5, 2**61, 0, 7, 2**61 - 1, 3, 0], dtype=np.int64)]
    sums = [np.arange(9, dtype=np.int64)]
    uk, us, _ = group_reduce(keys, sums)
    rk, rs, _ = _group_reduce_ref(keys, sums)
    assert [tuple(int(c[g]) for c in uk) for g in range(len(uk[0]))] == rk
    assert us[0].tolist() == [r[0] for r in rs]


def test_group_reduce_wide_keys_are_densified():
    # 5 columns of ~2^20 distinct-ish values each overflow a plain mixed radix: ranks are taken on the way
    rng = np.random.default_rng(5)
    keys = [rng.integers(0, 2**20, 3000).astype(np.int64) for _ in range(5)]
    keys[1][:1500] = keys[1][1500:]  # some equal rows
    for k in keys:
        k[:1500] = k[1500:]
    sums = [rng.integers(0, 100, 3000)]
    uk, us, _ = group_reduce(keys, sums)
    rk, rs, _ = _group_reduce_ref(keys, sums)
    assert [tuple(int(c[g]) for c in uk) for g in range(len(uk[0]))] == rk
    assert us[0].tolist() == [r[0] for r in rs]


# --------------------------------------------------------------------------- shard_of

def _shard_of_ref(enriched, partitions):
    """The original per-row definition."""
    out = []
    for r in enriched:
        job, node = r["dst_job"], r["dst_node"]
        key = job if job != "" else (node if node != "" else None)
        if key is None:
            out.append(zlib.crc32(r["dst_addr"].tobytes()) % partitions)
        else:
            out.append(zlib.crc32(str(key).encode()) % partitions)
    return out


_labels = st.sampled_from(["", "", "job-1", "job-2", "node-7", "ü-rack", None])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_labels, _labels, st.integers(0, 3)), max_size=40), st.sampled_from([1, 2, 4, 7]))
def test_shard_of_equals_reference(rows, partitions):
    b = np.zeros(len(rows), dtype=ENRICHED)
    b["dst_job"] = [r[0] for r in rows]
    b["dst_node"] = [r[1] for r in rows]
    b["dst_addr"][:, 15] = [r[2] for r in rows]
    b["dst_addr"][:, 10:12] = 0xFF
    want = _shard_of_ref(b, partitions) if partitions > 1 else [0] * len(rows)
    assert shard_of(b, partitions).tolist() == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3)), max_size=40), st.sampled_from([2, 4, 7]))
def test_shard_of_from_label_codes_equals_reference(rows, partitions):
    """With the enricher's label codes the keys come from per-code tables: same shards as the string columns."""
    from schemas.codec import StringTable

    jobs = StringTable(["", "job-1", "job-2", "", "ü-job", None, "job-3"])
    nodes = StringTable(["", "node-7", "", "n2", "é", "n5", None])
    jc = np.array([r[0] for r in rows], dtype=np.intp)
    nc = np.array([r[1] for r in rows], dtype=np.intp)
    b = np.zeros(len(rows), dtype=ENRICHED)
    b["dst_job"] = jobs.strings[jc]
    b["dst_node"] = nodes.strings[nc]
    b["dst_addr"][:, 15] = [r[2] for r in rows]
    labels = {"dst_job": (jc, jobs), "dst_node": (nc, nodes)}
    assert shard_of(b, partitions, labels).tolist() == _shard_of_ref(b, partitions)


def test_shard_of_with_enricher_codes_equals_plain():
    from processors.logic.enrich.enricher import Enricher
    from tests.support.synth import training_batches

    inv = read_inventory(Path(__file__).parents[3] / "data" / "cluster_inventory.yaml")
    e = Enricher(inv)
    for _exp, batch in training_batches(seconds=3):
        enriched = e.enrich(batch)
        for parts in (2, 5):
            assert shard_of(enriched, parts, e.label_codes(enriched)).tolist() == shard_of(enriched, parts).tolist()


def test_shard_of_non_str_labels_use_general_path():
    b = np.zeros(3, dtype=ENRICHED)
    b["dst_job"] = ["", 17, "job-1"]
    b["dst_node"] = ["n", "", ""]
    assert shard_of(b, 5).tolist() == _shard_of_ref(b, 5)


# --------------------------------------------------------------------------- Interner

@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["", "a", "b", "é", "unknown", None]), min_size=3, max_size=3), max_size=30),
       st.lists(st.sampled_from(["a", "b", "é", "x"]), max_size=4))
def test_interner_fast_path_equals_arrow_path(rows, known):
    cols = [np.array([r[i] for r in rows], dtype=object) for i in range(3)]
    fast = Interner([""] + known)
    slow = Interner([""] + known)
    slow.index = dict(slow.index)
    got = fast.codes(*cols)
    got_again = fast.codes(*cols)  # now every string is known: the dict fast path
    # reference: one code per value in first-seen order of the arrow path, None as ""
    ref = []
    for c in cols:
        ref.append([slow.code("" if v is None else v) for v in c.tolist()])
    assert [g.tolist() for g in got_again] == [g.tolist() for g in got]
    assert [fast.strings[x] for g in got for x in g.tolist()] == [slow.strings[x] for r in ref for x in r]
    assert all(g.dtype == np.int32 for g in got_again)


# --------------------------------------------------------------------------- window aggregators

def _cell_rows(rng, n):
    rows = {k: rng.integers(0, 4, n).astype(np.int32) for k in KEY_COLUMNS}
    rows.update({v: rng.integers(0, 1000, n).astype(np.int64) for v in VALUE_COLUMNS})
    return rows


@pytest.mark.parametrize("compact_rows", [1, 10, 50_000])
def test_cell_aggregator_result_independent_of_batching(compact_rows):
    rng = np.random.default_rng(1)
    parts = [_cell_rows(rng, int(rng.integers(0, 30))) for _ in range(12)]
    agg = CellAggregator(compact_rows)
    st_ = agg.initialize()
    for i, p in enumerate(parts):
        st_ = agg.agg(st_, p, 0)
        if i == 5:
            mid = agg.dump(st_)  # a snapshot in between keeps the same contents
            assert agg.dump(agg.load(mid)) == mid
    res = agg.result(st_, 0, 10)
    allrows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    keys, sums, _ = group_reduce([allrows[k] for k in KEY_COLUMNS], [allrows[v] for v in VALUE_COLUMNS])
    for k, col in zip(KEY_COLUMNS, keys):
        assert res[k].tolist() == col.tolist()
    for v, col in zip(VALUE_COLUMNS, sums):
        assert res[v].tolist() == col.tolist()


def test_incast_aggregator_result_independent_of_batching():
    rng = np.random.default_rng(2)
    parts = []
    for _ in range(20):
        n = int(rng.integers(0, 15))
        p = {k: rng.integers(0, 3, n).astype(np.int32) for k in KEYS}
        p.update({k: rng.integers(0, 10**9, n).astype(np.int64) for k in (*SUMS, *MAXES)})
        parts.append(p)
    agg = IncastAggregator()
    st_ = agg.initialize()
    for p in parts:
        st_ = agg.agg(st_, p, 0)
    before = agg.dump(list(st_))
    res = agg.result(st_, 0, 1000)
    allrows = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    keys, sums, maxes = group_reduce([allrows[k] for k in KEYS], [allrows[k] for k in SUMS],
                                     [allrows[k] for k in MAXES])
    assert [res[k].tolist() for k in KEYS] == [k.tolist() for k in keys]
    assert [res[k].tolist() for k in SUMS] == [s.tolist() for s in sums]
    assert [res[k].tolist() for k in MAXES] == [m.tolist() for m in maxes]
    assert agg.dump(agg.load(before)) == before


# --------------------------------------------------------------------------- matrix cells

def _matrix_cells_ref(cells, interner, ws, we, config):
    """Group on codes, name, sort by text, merge "" with "unknown" (the original algorithm)."""
    out = []
    for level, (ks, kd) in (("node", ("sn", "dn")), ("group", ("sg", "dg"))):
        if level not in config.levels or len(cells["sn"]) == 0:
            continue
        keys, sums, _ = group_reduce([cells[ks], cells[kd], cells["cat"]], [cells[v] for v in VALUE_COLUMNS])
        for i in range(len(keys[0])):
            c = {"window_start_ms": ws, "window_end_ms": we, "level": level,
                 "src": interner.strings[keys[0][i]] or UNKNOWN, "dst": interner.strings[keys[1][i]] or UNKNOWN,
                 "category": interner.strings[keys[2][i]]}
            c.update({v: int(s[i]) for v, s in zip(VALUE_COLUMNS, sums)})
            out.append(c)
    out.sort(key=lambda c: (c["level"], c["src"], c["dst"], c["category"]))
    merged = []
    for c in out:
        if merged and all(merged[-1][k] == c[k] for k in ("level", "src", "dst", "category")):
            for v in VALUE_COLUMNS:
                merged[-1][v] += c[v]
        else:
            merged.append(c)
    return [c for c in merged if c["bytes_est"] >= config.min_bytes_est]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**31), st.sampled_from([0, 500, 1500]),
       st.sampled_from([("node", "group"), ("group",), ("node",)]))
def test_matrix_cells_equal_reference(n, seed, min_bytes, levels):
    interner = Interner(["", "unknown", "b-node", "a-node", "Zed", "gpu", "", "collective", "other", "é"])
    rng = np.random.default_rng(seed)
    cells = {k: rng.integers(0, len(interner.strings), n).astype(np.int32) for k in KEY_COLUMNS}
    cells.update({v: rng.integers(0, 1000, n).astype(np.int64) for v in VALUE_COLUMNS})
    cfg = MatrixConfig(levels=levels, min_bytes_est=min_bytes)
    assert matrix_cells(cells, interner, 0, 10_000, cfg) == _matrix_cells_ref(cells, interner, 0, 10_000, cfg)


# --------------------------------------------------------------------------- policy membership on codes

def test_batch_context_isin_on_codes_equals_strings():
    rng = np.random.default_rng(3)
    words = np.array(["", "gpu", "storage", "unknown", "é"], dtype=object)
    b = np.zeros(50, dtype=ENRICHED)
    for f in ("src_group", "dst_group", "category"):
        b[f] = words[rng.integers(0, len(words), 50)]
    interner = Interner(["", "zzz"])
    names = ("src_group", "dst_group", "category")
    codes = dict(zip(names, interner.codes(*(b[f] for f in names))))
    plain = BatchContext(b, Networks())
    shared = BatchContext(b, Networks(), (codes, interner.strings, interner.index))
    legacy = BatchContext(b, Networks(), (codes, interner.strings))  # two-element form still accepted
    for name in codes:
        for values in (["gpu"], ["gpu", "storage"], ["nope"], [], ["*"], [""], ["é", "unknown", "x"]):
            want = plain.isin(name, values).tolist()
            assert shared.isin(name, values).tolist() == want
            assert legacy.isin(name, values).tolist() == want


def test_addr_str_cached_gives_the_same_text():
    a = np.zeros(16, dtype=np.uint8)
    a[10:12] = 0xFF
    a[12:] = [10, 1, 2, 3]
    v6 = np.arange(16, dtype=np.uint8)
    for x, want in ((a, "10.1.2.3"), (v6, "1:203:405:607:809:a0b:c0d:e0f"), (a.tobytes(), "10.1.2.3"),
                    (bytearray(v6.tobytes()), "1:203:405:607:809:a0b:c0d:e0f")):
        assert addr_str(x) == want == addr_str(x)  # the second call reads the cache


# --------------------------------------------------------------------------- categories: port table look-ups

def _port_side_ref(proto, port, specs):
    from processors.logic.enrich.categories import parse_port_match

    out = np.zeros(len(port), dtype=bool)
    l4 = (proto == 6) | (proto == 17) | (proto == 132)
    for p, lo, hi in (parse_port_match(s) for s in specs):
        out |= (l4 if p < 0 else (proto == p)) & (port >= lo) & (port <= hi)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1, 0, 1, 6, 17, 47, 132, 256, 262, 273]),
                          st.one_of(st.integers(-3, 70_000),
                                    st.sampled_from([0, 22, 53, 1023, 1024, 2049, 4791, 65535]))),
                min_size=1, max_size=40),
       st.lists(st.sampled_from(["tcp/22", "udp/53", "any/53", "tcp/1024-65535", "sctp/0-10", "udp/4791", "any/0-65535",
                                 "tcp/65535"]), min_size=1, max_size=4))
def test_port_table_equals_compares(rows, specs):
    from processors.logic.enrich.categories import _port_side, _side_index

    proto = np.array([r[0] for r in rows], dtype=np.int32)
    port = np.array([r[1] for r in rows], dtype=np.int32)
    assert _port_side(_side_index(proto, port), tuple(specs)).tolist() == _port_side_ref(proto, port, specs).tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.floats(-10, 10), st.sampled_from([0.0, -0.0, 1e-300, float("nan")])), max_size=5))
def test_straggler_median_equals_numpy(values):
    import warnings

    from processors.logic.detectors.straggler import _median

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = float(np.median(values))
        got = _median(values)
    assert (got == want) or (got != got and want != want)


# --------------------------------------------------------------------------- RowInterner

_LABELS = st.sampled_from(["", "a", "b", "é", "unknown", None, "job-1"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(_LABELS, _LABELS, _LABELS), max_size=12), min_size=1, max_size=6),
       st.lists(st.sampled_from(["a", "b", "x"]), max_size=3), st.sampled_from([1, 3, 1 << 18]))
def test_row_interner_equals_interner(batches, known, limit):
    """Batch after batch: the same codes as Interner.codes, and the same strings in the same code order."""
    plain = Interner([""] + known)
    rows = RowInterner(Interner([""] + known), limit=limit)
    for batch in batches:
        cols = [np.array([r[i] for r in batch], dtype=object) for i in range(3)]
        want = plain.codes(*cols)
        got = rows.codes(*cols)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert all(g.dtype == np.int32 for g in got)
        assert rows.interner.strings == plain.strings


def test_row_interner_other_column_count_and_unhashable():
    rows = RowInterner(Interner([""]))
    a = np.array(["x", "y", "x"], dtype=object)
    assert [c.tolist() for c in rows.codes(a, a)] == [[1, 2, 1]] * 2
    assert [c.tolist() for c in rows.codes(a)] == [[1, 2, 1]]  # another column count: its own rows
    bad = np.empty(1, dtype=object)
    bad[0] = ["list"]
    with pytest.raises(Exception):
        Interner([""]).codes(bad)
    with pytest.raises(Exception):
        rows.codes(bad)


# ------------------------------------------------------------------ group_reduce: several value columns, dtypes

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40),
       st.sampled_from([[np.int64, np.int64, np.int64], [np.int64, np.int32], [np.int32, np.int32], [np.int64]]),
       st.integers(0, 2**31))
def test_group_reduce_several_value_columns(n, dtypes, seed):
    rng = np.random.default_rng(seed)
    keys = [rng.integers(0, 4, n).astype(np.int32), rng.integers(-3, 3, n)]
    vals = [rng.integers(-10**9, 10**9, n).astype(dt) for dt in dtypes]
    uk, us, um = group_reduce(keys, vals, vals)
    rk, rs, rm = _group_reduce_ref(keys, vals, vals)
    assert [tuple(int(c[g]) for c in uk) for g in range(len(uk[0]))] == rk
    assert [[int(s[g]) for s in us] for g in range(len(rk))] == rs
    assert [[int(m[g]) for m in um] for g in range(len(rk))] == rm
    # the dtypes of a reduceat per column
    assert [s.dtype for s in us] == [np.add.reduceat(v, [0]).dtype for v in vals]
    assert [m.dtype for m in um] == [np.maximum.reduceat(v, [0]).dtype for v in vals]


# --------------------------------------------------------------------------- WindowManager.process

class _Recorder(PlainStateAgg):
    """Aggregator keeping every ``agg`` call (window start, rows as lists): shows the exact split."""

    def initialize(self):
        return []

    def agg(self, state, rows, window_start):
        return state + [(window_start, {k: v.tolist() for k, v in sorted(rows.items())})]


def _process_ref(wm, times, rows, observed_max_ms=None):
    """WindowManager.process as first written: per-row window starts, late mask, one split per window."""
    times = np.asarray(times, dtype=np.int64)
    wm_before = wm.watermark_ms
    if observed_max_ms is not None:
        wm.max_event_ms = max(wm.max_event_ms, int(observed_max_ms))
    size = wm.config.size_ms
    if len(times):
        starts = times - np.mod(times, size)
        ok = ((starts + size) > wm.closed_upto_ms) & ((starts + size) > wm_before)
        wm.too_late += int(len(times) - np.count_nonzero(ok))
        starts, kept = starts[ok], {k: v[ok] for k, v in rows.items()}
        wm.accepted += len(starts)
        if len(starts):
            wm.max_event_ms = max(wm.max_event_ms, int(times.max()))
            for ws in np.unique(starts).tolist():
                wm._agg(ws, {k: v[starts == ws] for k, v in kept.items()})
    return wm._close_upto(wm.watermark_ms)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 7, 200, 10_000]), st.sampled_from([0, 5, 300, 30_000]),
       st.lists(st.tuples(st.lists(st.integers(-1_000, 70_000), max_size=25), st.booleans()), max_size=8),
       st.booleans(), st.booleans())
def test_window_manager_process_equals_reference(size, lateness, batches, flush_midway, in_order):
    """Also with batches already in time order (the split then keeps the rows as they are)."""
    cfg = WindowConfig(size_ms=size, lateness_ms=lateness)
    fast, ref = WindowManager(cfg, _Recorder()), WindowManager(cfg, _Recorder())
    for i, (ts, observed) in enumerate(batches):
        times = np.array(sorted(ts) if in_order else ts, dtype=np.int64)
        rows = {"v": np.arange(len(ts), dtype=np.int64) * 3, "w": np.arange(len(ts), dtype=np.int32)}
        obs = (max(ts) + 17 if ts else 5) if observed else None
        assert fast.process(times, rows, obs) == _process_ref(ref, times, rows, obs)
        assert fast.snapshot() == ref.snapshot()
        if flush_midway and i == 1:
            assert fast.flush() == ref.flush()
    assert fast.flush() == ref.flush()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(1, 3), st.integers(0, 2**31))
def test_reduce_runs_equals_group_reduce_on_sorted_rows(n, nkeys, seed):
    rng = np.random.default_rng(seed)
    keys = [rng.integers(0, 3, n).astype(np.int32) for _ in range(nkeys)]
    order = np.lexsort(tuple(keys[::-1]))
    keys = [k[order] for k in keys]
    sums = [rng.integers(-10**9, 10**9, n), rng.integers(0, 5, n)]
    maxes = [rng.integers(-5, 5, n)]
    got, want = reduce_runs(keys, sums, maxes), group_reduce(keys, sums, maxes)
    for g, w in zip(got, want):
        assert [x.tolist() for x in g] == [x.tolist() for x in w]
        assert [x.dtype for x in g] == [x.dtype for x in w]
