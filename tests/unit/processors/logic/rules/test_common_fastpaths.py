"""Fast paths of the policy rules give exactly what the plain definitions give.

Covers the sort-free groups (``DenseGroups``, ``min_max_by``), the lookup-table ``factorize_interned``,
``GroupBy(desc=)``, ``samples_of`` against ``format_tuple``, ``label_ids``, the shared read-only masks, the
checkpoint buckets of far-apart times, and whole engines with and without the caller's string codes.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.policy import CLUSTER, GB, MIN, T0, flow, make_batch

from processors.logic.rules.policy import PolicyEngine
from processors.logic.rules import CheckpointRule, CheckpointConfig
from processors.logic.windows.groupby import DenseGroups, GroupBy, factorize, factorize_interned, min_max_by
from processors.logic.windows.interning import Interner
from processors.logic.rules.common import BatchContext, Networks, format_tuple
from schemas.columns import addr_keys, addr_str, addr_strs

CODED = ("src_node", "dst_node", "src_group", "dst_group", "src_job", "dst_job", "category")


# --------------------------------------------------------------------------- groups without a sort

@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(-(2**40), 2**40)), max_size=60),
       st.sampled_from([13, 50, 2 * 10**9]))
def test_dense_groups_equal_groupby(rows, size):
    key = np.array([r[0] for r in rows], dtype=np.int64)
    if size > 10**9:  # keys beyond the lookup table: the ranked path
        key = key * (10**8)
    vals = np.array([r[1] for r in rows], dtype=np.int64)
    dg, gb = DenseGroups(key, size), GroupBy(key)
    assert dg.ngroups == gb.ngroups
    assert dg.keys.tolist() == key[gb.first].tolist()
    assert dg.first.tolist() == gb.first.tolist()
    assert dg.count().tolist() == gb.count().tolist()
    assert dg.sum(vals).tolist() == gb.sum(vals).tolist()
    assert dg.min(vals).tolist() == gb.min(vals).tolist()
    assert dg.max(vals).tolist() == gb.max(vals).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(-(2**61), 2**61), st.integers(0, 2**61)),
                max_size=50))
def test_min_max_by_equals_groupby_over_both_columns(rows):
    a = np.array([r[0] for r in rows], dtype=np.int32)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    lo = np.array([r[2] for r in rows], dtype=np.int64)
    hi = lo + np.array([r[3] for r in rows], dtype=np.int64)  # lo <= hi row by row, as t_start <= t_end
    mins, maxs = min_max_by([a, b], 7, lo, hi)
    gb = GroupBy(np.concatenate([a, b]).astype(np.int64))
    both_lo, both_hi = np.concatenate([lo, lo]), np.concatenate([hi, hi])
    seen = (mins <= maxs).nonzero()[0]
    assert seen.tolist() == np.concatenate([a, b])[gb.first].tolist()
    assert mins[seen].tolist() == gb.min(both_lo).tolist()
    assert maxs[seen].tolist() == gb.max(both_hi).tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 5)), max_size=50),
       st.integers(1, 4))
def test_groupby_desc_top_equals_top_rows(rows, k):
    a = np.array([r[0] for r in rows], dtype=np.uint64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    w = np.array([r[2] for r in rows], dtype=np.int64)  # many ties: index order must decide
    plain, ranked = GroupBy(a, b), GroupBy(a, b, desc=w)
    assert ranked.starts.tolist() == plain.starts.tolist()
    assert ranked.sum(w).tolist() == plain.sum(w).tolist()
    assert ranked.min(w).tolist() == plain.min(w).tolist()
    assert [t.tolist() for t in ranked.top(k)] == [t.tolist() for t in plain.top_rows(w, k)]
    assert [t.tolist() for t in plain.top_rows(w, k)] == [_top_ref(a, b, w, k, g) for g in _keys(a, b)]


def _keys(a, b):
    return sorted(set(zip(a.tolist(), b.tolist())))


def _top_ref(a, b, w, k, key):
    rows = [i for i in range(len(a)) if (a[i], b[i]) == key]
    return sorted(rows, key=lambda i: (-w[i], i))[:k]


def test_factorize_interned_with_codes_beyond_the_lookup_table():
    interner = Interner([f"s{i:05d}" for i in range(20_000)])  # the column's codes are far above 8 n + 4096
    col = np.array(["gpu", "", "s00007", "gpu", "zz", "s19999"], dtype=object)
    (codes,) = interner.codes(col)
    assert codes.max() > 8 * len(col) + 4096
    u1, c1 = factorize(col)
    u2, c2 = factorize_interned(codes, interner.strings)
    assert u1.tolist() == u2.tolist() and c1.tolist() == c2.tolist()


# --------------------------------------------------------------------------- batch context

ADDRS = ["10.0.1.1", "10.0.0.0", "10.0.2.1", "::", "fd00:1::10", "2001:db8::1", "::ffff:0:0", "::1.2.3.4", "0.0.0.0"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(ADDRS) - 1), st.integers(0, len(ADDRS) - 1),
                          st.sampled_from([0, 6, 17, 58, 250]), st.sampled_from([0, 53, 40000])), max_size=12),
       st.lists(st.lists(st.integers(0, 11), max_size=8), max_size=4), st.integers(1, 5))
def test_samples_of_equals_format_tuple(flows, row_lists, k):
    b = make_batch([flow(ADDRS[s], ADDRS[d], sport=p, dport=p, proto=pr) for s, d, pr, p in flows])
    ctx = BatchContext(b, Networks(CLUSTER))
    row_lists = [np.array([r for r in rl if r < len(b)], dtype=np.int64) for rl in row_lists]
    want = [_samples_ref(b, rows, k) for rows in row_lists]
    assert ctx.samples_of(row_lists, k) == want
    assert [ctx.samples(rows, k) for rows in row_lists] == want


def _samples_ref(b, rows, k):
    out = []
    for i in rows.tolist():
        s = format_tuple(b["ip_protocol"][i], b["src_addr"][i], b["src_port"][i], b["dst_addr"][i], b["dst_port"][i])
        if s not in out and len(out) < k:
            out.append(s)
    return out


def test_addr_keys_and_strs_equal_addr_str():
    b = make_batch([flow(a, a) for a in ADDRS])
    keys = addr_keys(b["src_addr"])
    assert keys == [bytes(b["src_addr"][i]) for i in range(len(b))]
    assert addr_strs(keys) == [addr_str(b["src_addr"][i]) for i in range(len(b))]


def _interned(b, interner):
    return dict(zip(CODED, interner.codes(*(b[c] for c in CODED)))), interner.strings, interner.index


@pytest.mark.parametrize("table", [0, 20_000])
def test_label_ids_name_the_column_values(table):
    b = make_batch([flow("10.0.1.1", "10.0.2.1"), flow("10.0.1.3", "10.0.1.2"), flow("10.0.9.9", "10.0.1.1")])
    interner = Interner([f"x{i}" for i in range(table)])
    for ctx in (BatchContext(b, Networks()), BatchContext(b, Networks(), _interned(b, interner))):
        for names in (("src_job",), ("src_job", "dst_job"), ("category",)):
            ids, labels = ctx.label_ids(*names)
            for name, col in zip(names, ids):
                assert [labels[i] for i in col.tolist()] == b[name].tolist()


def test_isin_masks_are_shared_and_read_only():
    b = make_batch([flow("10.0.1.1", "10.0.2.1"), flow("10.0.9.9", "10.0.1.1")])
    ctx = BatchContext(b, Networks())
    m = ctx.isin("dst_group", ["storage"])
    assert ctx.isin("dst_group", ("storage",)) is m and ctx.eq("dst_group", "storage") is m
    assert m.tolist() == [True, False]
    with pytest.raises(ValueError):
        m &= False
    assert ctx.isin("src_group", ["*"]).tolist() == [True, True]


# --------------------------------------------------------------------------- rules

def test_checkpoint_buckets_far_apart_are_ranked_not_offset():
    rule = CheckpointRule(CheckpointConfig(bucket=0.001))  # 1 ms buckets: the span overflows an id * span key
    times = [5, 2**62, 5, 7]
    b = make_batch([flow("10.0.1.1", "10.0.2.1", nbytes=GB + i, t=t) for i, t in enumerate(times)])
    rule.observe(BatchContext(b, Networks(CLUSTER)), 0)
    assert rule.jobs["job-a"]["pending"] == {5: [2 * GB + 2, 2], 7: [GB + 3, 1], 2**62: [GB + 1, 1]}


HOSTS = ["10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.2.1", "10.0.4.1", "10.0.9.9", "10.0.9.8", "10.0.7.1",
         "203.0.113.9", "198.51.100.7", "fd00:1::10", "fd00:1::99"]
CFG = {
    "segmentation": {"enabled": True, "skip_unknown": True, "allow": [
        {"src": "gpu", "dst": "gpu"}, {"src": "gpu", "dst": "storage", "categories": ["storage"]}]},
    "off_hours_transfer": {"enabled": True, "min_bytes": "1GB"},
    "unregistered_host": {"exclude_cidrs": ["10.0.9.8/32"]},
    "exfiltration": {"min_duration": 0, "authorized_cidrs": ["203.0.113.0/28"]},
    "external_dependency": {"documented_cidrs": ["198.51.100.0/24"]},
    "storage_on_compute": {"compute_interfaces": [{"exporter": "*", "ifindexes": [1]}]},
}
flow_st = st.builds(
    lambda s, d, p, nb, dt, g: flow(HOSTS[s], HOSTS[d], 40000, p, nbytes=nb, t=T0 + dt, dst_group=g),
    st.integers(0, len(HOSTS) - 1), st.integers(0, len(HOSTS) - 1), st.sampled_from([2049, 443, 4791, 22]),
    st.integers(1, 2 * GB), st.integers(0, 30 * MIN), st.sampled_from([None, None, None, "unknown", "gpu"]))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(flow_st, max_size=15), min_size=1, max_size=6), st.sampled_from([0, 20_000]))
def test_engine_same_with_and_without_the_callers_codes(batches, table):
    plain, coded = PolicyEngine(CFG, CLUSTER), PolicyEngine(CFG, CLUSTER)
    interner = Interner([f"x{i}" for i in range(table)])  # a large table: the factorized path of label_ids
    for i, fl in enumerate(batches):
        b = make_batch(sorted(fl, key=lambda f: f["t_end"]))
        now = T0 + (i + 1) * 5 * MIN
        if len(b) == 0:
            assert plain.tick(now) == coded.tick(now)
            continue
        assert plain.process(b, now) == coded.process(b, now, _interned(b, interner))
    assert plain.snapshot() == coded.snapshot()
