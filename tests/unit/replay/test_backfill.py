"""replay/backfill.py: a capture through ingest's pipeline, the processors' cores and the archive sink's code, with
the topics in memory. The same capture gives the same archive, file for file; its windowed outputs are what
replaying its own raw flows gives; running it again adds nothing (the sink's de-duplication) unless the earlier
files are removed first; marks in the capture land in step_marks and changes."""

from __future__ import annotations


import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest

from devtools.simulator.engine import Simulation
from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
from fabricflow.settings import load_settings
from replay import ReplayError, archive_source, replay_batches
from replay.backfill import OFFSET_SPAN, Backfill, capture_base_offset, remove_previous
from replay.config import core_factory_from
from sinks.archive import layout
from tests.support.fixtures_path import REPO
from tests.support.matrix import matrix_cells

INV = str(REPO / "scenarios" / "tuning.yaml")


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    p = tmp_path_factory.mktemp("cap") / "tuning.pcap"
    sim = Simulation("tuning", duration_s=60, kinds={"sflow", "netflow9", "ipfix", "marks"})
    write_pcap(p, sim.run(), sources=DistinctSources())
    return str(p)


@pytest.fixture(scope="module")
def archive(capture, tmp_path_factory):
    """One backfill of the capture (the tests below read it; those that write copy it first)."""
    root = tmp_path_factory.mktemp("backfilled") / "archive"
    progress = []
    _bf, st = _run(capture, root, on_progress=lambda s: progress.append(s.fraction), progress_s=0.0)
    return root, st, progress


def _run(capture, root, **kw):
    s = load_settings(None, archive={"url": f"file://{root}"})
    bf = Backfill(s, capture, root=str(root), core_factory=core_factory_from(s.processors, inventory=INV), **kw)
    return bf, bf.run()


def _contents(root) -> dict:
    """Every data file: its key -> its column names and its rows (sorted), derived datasets included. Rows are
    compared as the repr of their value tuples, built column by column (a JSON line per row dict took a fifth
    of this file's time)."""
    out = {}
    for f in sorted(root.rglob("*.parquet")):
        t = pq.read_table(f)
        rows = zip(*(t.column(n).to_pylist() for n in t.column_names))
        out[str(f.relative_to(root))] = (tuple(t.column_names), sorted(map(repr, rows)))
    return out


def test_same_capture_same_archive(capture, archive, tmp_path):
    root, st, progress = archive
    _run(capture, tmp_path / "b")
    a, b = _contents(root), _contents(tmp_path / "b")
    assert a == b and len(a) >= 10
    datasets = {k.split("/")[0] for k in a}
    assert {"flows_raw", "flows_enriched", "matrix_windows", "patterns", "step_marks", "counters_raw",
            "traffic_1m", "ingest_quality", "summaries_hourly"} <= datasets
    assert st.flow_records > 10_000 and st.mark_datagrams > 40 and progress[-1] == 1.0
    offs = [layout.parse_key(k).first_offset for k in a]
    base = capture_base_offset(capture)
    assert all(base <= o < base + OFFSET_SPAN for o in offs)


def test_windowed_outputs_equal_a_replay_of_its_own_raw_flows(archive):
    root, st, _p = archive
    s = load_settings(None)
    src = archive_source(fsspec.filesystem("file"), str(root), st.first_ms - 60_000, st.last_ms + 3_600_000)
    outs = replay_batches(src.flow_batches(), src.counter_batches(), core_factory_from(s.processors, inventory=INV),
                          s.kafka.partitions)
    replayed = sorted((c["window_start_ms"], c["level"], c["src"], c["dst"], c["category"], c["bytes_est"], c["samples"])
                      for c in matrix_cells(outs))
    archived = []
    for f in sorted(root.rglob("matrix_windows/**/*.parquet")):
        t = pq.read_table(f).to_pydict()
        archived += list(zip(t["window_start_ms"], t["level"], t["src"], t["dst"], t["category"], t["bytes_est"],
                             t["samples"]))
    assert len(archived) > 500 and sorted(archived) == replayed
    scores = sorted((r["window_start_ms"], r["node"], r["score"]) for f in root.rglob("straggler_scores/**/*.parquet")
                    for r in pq.read_table(f).to_pylist())
    assert scores and scores == sorted((o.value["window_start_ms"], o.value["node"], o.value["score"])
                                       for o in outs if o.kind == "straggler")


def test_a_second_run_writes_nothing_and_replace_redoes_it(capture, archive, tmp_path):
    import shutil

    root = tmp_path / "a"
    shutil.copytree(archive[0], root)
    before = _contents(root)
    _bf, again = _run(capture, root)
    assert again.files_written == 0 and _contents(root) == before
    gone = remove_previous(fsspec.filesystem("file"), str(root), capture_base_offset(capture))
    assert gone == len(before)
    _bf, redo = _run(capture, root)
    assert redo.files_written == archive[1].files_written and _contents(root) == before


def test_marks_and_changes_from_the_capture(archive):
    root = archive[0]
    steps = [r for f in root.rglob("step_marks/**/*.parquet") for r in pq.read_table(f).to_pylist()]
    assert {r["job"] for r in steps} == {"train-a", "train-b"}
    assert all(r["time_ms"] == r["received_ms"] and r["source"].startswith("udp:127.0.0.") for r in steps)
    starts = sorted(r["step"] for r in steps if r["job"] == "train-a" and r["event"] == "step_start")
    assert starts == list(range(len(starts))) and len(starts) == 30  # one every 2 s over 60 s
    assert not list(root.glob("changes"))  # the change of this scenario comes at t=200 s


def test_the_change_mark_of_a_longer_capture(tmp_path):
    p = tmp_path / "t.pcap"
    sim = Simulation("tuning", duration_s=210, kinds={"sflow", "netflow9", "ipfix", "marks"})
    write_pcap(p, (d for d in sim.run() if d[1] == "marks" or d[0] % 10 == 0), sources=DistinctSources())
    _run(str(p), tmp_path / "a")
    ch = [r for f in (tmp_path / "a").rglob("changes/**/*.parquet") for r in pq.read_table(f).to_pylist()]
    assert len(ch) == 1 and ch[0]["job"] == "train-b" and ch[0]["time_ms"] == sim.start_ms + 200_000


def test_bad_captures_are_one_line_errors(tmp_path):
    s = load_settings(None)
    with pytest.raises(ReplayError, match="no capture file"):
        Backfill(s, str(tmp_path / "missing.pcap"), root=str(tmp_path / "a"))
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a pcap at all")
    with pytest.raises(ReplayError, match="cannot read"):
        Backfill(s, str(bad), root=str(tmp_path / "a")).run()
    assert np.isscalar(capture_base_offset(str(bad)))


def test_drop_notifications_are_archived_as_discards_raw(tmp_path):
    """sFlow discarded packet samples in a capture land in discards_raw with their reasons, not in flows_raw."""
    from schemas.drop_reasons import reason_names
    from tests.support.discard_seeds import seeds

    t0 = 1_796_133_600_000
    p = tmp_path / "drops.pcap"
    write_pcap(p, [(t0 + 1000 * i, "sflow", d) for i, d in enumerate(seeds().values())])
    root = tmp_path / "archive"
    _bf, st = _run(str(p), root)
    got = pq.read_table([str(f) for f in root.rglob("*.parquet") if "discards_raw" in str(f)]).to_pylist()
    assert sorted(reason_names(np.array([r["reason"] for r in got]))) == [
        "acl", "no_buffer_space", "other", "unknown_buffer"]
    flows = [f for f in root.rglob("*.parquet") if "flows_raw" in str(f)]
    assert sum(pq.read_metadata(f).num_rows for f in flows) == 1  # the one flow sample of the mixed datagram


def test_link_events_name_the_drop_reasons_the_same_in_backfill_and_in_a_replay_of_its_archive(tmp_path):
    """A port's counters at t0 and t0+10 s with 30 ACL drop notifications between: the backfill's link_health
    has the packet_drops event with its reasons, and a replay of the archive (discards_raw included) gives the
    same link events; without the notifications the replay has none of them (the input decides)."""
    from devtools import sflow_build as b

    t0 = 1_796_133_600_000
    agent = "10.254.0.3"

    def counters(seq):
        return b.datagram([b.counter_sample([b.generic_counters(if_index=12, if_speed=25_000_000_000, if_status=3)],
                                            seq=seq, source_index=12)], agent=agent, seq=seq, uptime=1_000 + 10_000 * (seq - 1))

    drops = [b.datagram([b.discard_sample([], seq=i + 1, source_index=12, in_if=11, out_if=12, reason=258)],
                        agent=agent, seq=100 + i, uptime=3_000 + 200 * i) for i in range(30)]
    p = tmp_path / "drops.pcap"
    write_pcap(p, [(t0, "sflow", counters(1))] + [(t0 + 2_000 + 200 * i, "sflow", d) for i, d in enumerate(drops)]
               + [(t0 + 10_000, "sflow", counters(2))])
    root = tmp_path / "archive"
    _bf, st = _run(str(p), root)
    assert st.discard_notifications == 30

    def key(r):
        return (r["time_ms"], r["kind"], r["exporter"], r["if_index"], r["detail"], (r["diagnosis"] or {}).get("verdict"))

    archived = sorted(key(r) for f in root.rglob("link_health/**/*.parquet") for r in pq.read_table(f).to_pylist())
    event = [k for k in archived if k[1] == "packet_drops"]
    assert event == [(t0 + 10_000, "packet_drops", agent, 12,
                      "3.0 dropped-packet notifications/s; dropped-packet notifications: acl 30", "forwarding_drop")]
    s = load_settings(None)
    src = archive_source(fsspec.filesystem("file"), str(root), t0 - 60_000, t0 + 3_600_000)
    factory = core_factory_from(s.processors, inventory=INV)
    outs = replay_batches(src.flow_batches(), src.counter_batches(), factory, s.kafka.partitions,
                          discard_batches=src.discard_batches())
    assert sorted(key(o.value) for o in outs if o.kind == "link") == archived
    blind = replay_batches(src.flow_batches(), src.counter_batches(), factory, s.kafka.partitions)
    assert [o.value["kind"] for o in blind if o.kind == "link"] == ["sample"]
