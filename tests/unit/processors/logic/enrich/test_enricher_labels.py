"""LabeledFlows: the worker's object-free enriched rows must read exactly like the enriched records."""

from __future__ import annotations

import numpy as np
import pytest

from processors.config_files import read_inventory
from processors.logic.core import shard_of
from processors.logic.enrich.enricher import CHUNK, ENRICHED_DTYPE, Enricher, LabeledFlows
from schemas import codec
from schemas.columns import FLOW_DTYPE

from tests.support.enrich import EXAMPLE, assert_same_records, example_batch



def test_enrich_labels_equals_enrich_and_counts_the_same():
    big = example_batch(CHUNK // 2 + 3)  # more than one internal slice
    a, b = Enricher(read_inventory(EXAMPLE)), Enricher(read_inventory(EXAMPLE))
    arr = a.enrich(big)
    lab = b.enrich_labels(big)
    assert isinstance(lab, LabeledFlows) and lab.dtype == ENRICHED_DTYPE and lab.shape == (len(big),)
    assert_same_records(lab, arr)
    out = lab.to_array()
    assert out.dtype == ENRICHED_DTYPE
    assert_same_records(out, arr)
    assert (a.records_total, a.unknown_src_total, a.unknown_dst_total) == (b.records_total, b.unknown_src_total, b.unknown_dst_total)
    assert b.unknown_total > 0  # the batch has unknown addresses: the counts were compared on something
    assert np.array_equal(a.last_unknown_rows, b.last_unknown_rows)


def test_row_selection_by_slice_mask_and_indices():
    f = example_batch(3)
    e = Enricher(read_inventory(EXAMPLE))
    arr = e.enrich(f)
    lab = e.enrich_labels(f)
    mask = np.arange(len(f)) % 3 != 1
    idx = np.array([4, 0, 7, 7, 2])
    for key in (slice(2, 9), slice(None, None, -2), mask, idx, idx.astype(np.uint32)):
        sub = lab[key]
        assert isinstance(sub, LabeledFlows)
        assert_same_records(sub, arr[key])
        for col, (codes, table) in sub.label_codes().items():  # codes follow the rows
            assert table.strings[codes].tolist() == arr[key][col].tolist(), col
    with pytest.raises(IndexError):
        lab[mask[:-1]]
    with pytest.raises(IndexError):
        lab[np.array([0.5])]
    with pytest.raises(ValueError):
        lab["no_such_field"]


def test_flows_in_another_layout_are_copied_by_name():
    f = example_batch()
    names = list(FLOW_DTYPE.names)[::-1]
    other = np.zeros(len(f), dtype=[(n, FLOW_DTYPE.fields[n][0]) for n in names] + [("extra", "i8")])
    for n in names:
        other[n] = f[n]
    lab = Enricher(read_inventory(EXAMPLE)).enrich_labels(other)
    assert lab.flows.dtype == FLOW_DTYPE
    assert_same_records(lab, Enricher(read_inventory(EXAMPLE)).enrich(f))


def test_codec_and_sharding_read_the_codes_with_the_same_result():
    f = example_batch(40)
    e = Enricher(read_inventory(EXAMPLE))
    arr = e.enrich(f)
    lab = e.enrich_labels(f)
    coded = lab.label_codes()
    plain = codec.encode_batch("flow_enriched_batch", arr)
    assert codec.encode_batch("flow_enriched_batch", lab, coded) == plain
    assert codec.encode_batch("flow_enriched_batch", lab) == plain  # without codes: the gathered columns
    assert_same_records(codec.decode_batch(plain), arr)
    for parts in (2, 4, 7):
        assert shard_of(lab, parts).tolist() == shard_of(arr, parts).tolist()


def test_encoding_from_codes_gathers_no_label_column():
    lab = Enricher(read_inventory(EXAMPLE)).enrich_labels(example_batch(2))
    codec.encode_batch("flow_enriched_batch", lab, lab.label_codes())
    shard_of(lab, 4)
    assert lab._columns == {}  # the hot path never builds the string objects


def test_constructor_rejects_mismatched_codes():
    lab = Enricher(read_inventory(EXAMPLE)).enrich_labels(example_batch())
    with pytest.raises(ValueError):
        LabeledFlows(lab.flows[:-1], lab.codes, lab.inventory, lab.tables)
