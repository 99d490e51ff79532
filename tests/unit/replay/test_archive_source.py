"""Archive round trip: write raw flows/counters with the sinks' writer, replay them, compare with live feeding."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from fabricflow.settings import load_settings
from replay import (
    ReplayError,
    archive_source,
    canonical,
    columns_from_table,
    core_factory_from,
    replay_batches,
)
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, dtype_for
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.layout import HOUR_MS
from tests.support import replay as h
from tests.support.replay_archive import write_archive

PARTITIONS = 4
START = h.T0 + HOUR_MS - 45_000  # the range straddles an hour boundary


@pytest.fixture(scope="module")
def scenario():
    flows = h.traffic(seconds=90, start=START)
    msgs = h.messages(flows, partitions=3, per_message=30)
    return flows, msgs, h.counters(start=START)


@pytest.fixture(scope="module")
def factory():
    return core_factory_from(load_settings(None).processors, inventory=h.inventory())


def test_round_trip_equals_direct_processor_core_output(tmp_path, scenario, factory):
    flows, msgs, counters = scenario
    fs = write_archive(tmp_path / "archive", msgs, counters)
    assert len(fs.find(str(tmp_path / "archive" / "flows_raw"))) == 3 * 2  # 3 partitions x 2 hours
    src = archive_source(fs, str(tmp_path / "archive"), START - 60_000, START + 100_000)
    got = replay_batches(src.flow_batches(), src.counter_batches(), factory, PARTITIONS)
    direct = replay_batches(h.live_order(msgs), [counters], factory, PARTITIONS)
    assert src.rows_read == {"flows_raw": len(flows), "counters_raw": len(counters)}
    assert canonical(got) == canonical(direct)
    kinds = {o.kind for o in got}
    assert {"matrix", "incast", "straggler", "link"} <= kinds
    # and the replay is reproducible, order included
    src2 = archive_source(fs, str(tmp_path / "archive"), START - 60_000, START + 100_000)
    assert replay_batches(src2.flow_batches(), src2.counter_batches(), factory, PARTITIONS) == got


def test_file_chunking_does_not_matter(tmp_path, scenario, factory):
    _flows, msgs, counters = scenario
    fs_a = write_archive(tmp_path / "a", msgs, counters)
    fs_b = write_archive(tmp_path / "b", msgs, counters, max_rows=100)  # many small files per hour
    assert len(fs_b.find(str(tmp_path / "b" / "flows_raw"))) > 20
    runs = []
    for d, fs in (("a", fs_a), ("b", fs_b)):
        src = archive_source(fs, str(tmp_path / d), START, START + 90_000)
        runs.append(replay_batches(src.flow_batches(), src.counter_batches(), factory, PARTITIONS))
    assert runs[0] == runs[1]


def test_range_filters_rows_and_prunes_hours(tmp_path, scenario, factory):
    flows, msgs, counters = scenario
    fs = write_archive(tmp_path / "archive", msgs, counters)
    lo, hi = START + 50_000, START + 80_000  # entirely in the second hour
    src = archive_source(fs, str(tmp_path / "archive"), lo, hi)
    assert all("hour=01" in f for f in src.files["flows_raw"])
    assert len(src.files["flows_raw"]) == 3
    got = replay_batches(src.flow_batches(), src.counter_batches(), factory, PARTITIONS)
    t = flows["time_end_ms"]
    assert src.rows_read["flows_raw"] == int(((t >= lo) & (t < hi)).sum())
    sub = flows[(t >= lo) & (t < hi)]
    ct = counters["time_received_ms"]
    direct = replay_batches([sub], [counters[(ct >= lo) & (ct < hi)]], factory, PARTITIONS)
    assert canonical(got) == canonical(direct)
    assert all(lo - 10_000 <= o.value.window_start_ms < hi for o in got if o.kind == "matrix")


def test_errors_are_one_line(tmp_path, scenario):
    _flows, msgs, counters = scenario
    fs = write_archive(tmp_path / "archive", msgs, counters)
    root = str(tmp_path / "archive")
    cases = [
        ((fs, str(tmp_path / "nowhere"), START, START + 1000), "archive missing"),
        ((fs, root, START + 1000, START), "empty time range"),
        ((fs, root, START, START), "empty time range"),
        ((fs, root, h.T0 + 5 * HOUR_MS, h.T0 + 6 * HOUR_MS), "no raw data between"),
        ((fs, root, "yesterday", START), "cannot read"),
        ((fs, root, None, START), "--from and --to"),
    ]
    for args, needle in cases:
        with pytest.raises(ReplayError) as e:
            archive_source(*args)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    (tmp_path / "other" / "alerts").mkdir(parents=True)
    with pytest.raises(ReplayError, match="no flows_raw or counters_raw"):
        archive_source(fs, str(tmp_path / "other"), START, START + 1000)


def test_counters_only_archive_replays_link_health(tmp_path, factory):
    counters = h.counters(start=START)
    fs = write_archive(tmp_path / "archive", {}, counters)
    src = archive_source(fs, str(tmp_path / "archive"), START, START + 100_000)
    out = replay_batches(src.flow_batches(), src.counter_batches(), factory, PARTITIONS)
    assert out and {o.kind for o in out} == {"link"}


@pytest.mark.parametrize("avsc, dtype", [("flow_record", FLOW_DTYPE), ("counter_sample", COUNTER_DTYPE),
                                         ("flow_enriched", dtype_for("flow_enriched"))])
def test_columns_from_table_inverts_table_from_columns(avsc, dtype):
    rng = np.random.default_rng(1)
    a = np.zeros(50, dtype=dtype)
    for name in dtype.names:
        ft = dtype[name]
        if ft.shape == (16,):
            a[name] = rng.integers(0, 256, size=(50, 16), dtype=np.uint8)
        elif ft == np.dtype(object):
            a[name] = np.array([f"s{i % 7}" for i in range(50)], dtype=object)
        elif ft == np.dtype(bool):
            a[name] = rng.integers(0, 2, 50).astype(bool)
        else:
            a[name] = rng.integers(-1000, 10**6, 50).astype(ft)
    t = table_from_columns(a, avsc)
    for table in (t, t.slice(7, 30), pa.concat_tables([t.slice(0, 20), t.slice(20)])):
        back = columns_from_table(table, avsc)
        n0 = 7 if table.num_rows == 30 else 0
        expect = a[n0 : n0 + table.num_rows]
        for name in dtype.names:
            assert np.array_equal(back[name], expect[name]), name
    with pytest.raises(KeyError):
        columns_from_table(t.drop_columns(["if_index" if avsc == "counter_sample" else "src_addr"]), avsc)
