"""ArchiveService loop without a broker: fake consumer/producer, in-memory archive filesystem."""

from __future__ import annotations

import sys
import uuid

import fsspec
import pyarrow.parquet as pq
import pytest
from confluent_kafka import TopicPartition

from fabricflow.settings import load_settings
from schemas import codec
from sinks.archive import layout
from sinks.archive.fs import ArchiveUrlError, archive_filesystem
from sinks.archive.summary_emitter import PARTIAL_METRIC
from sinks.archive.service import ArchiveService, routes_for
from tests.support.archive import T0, FakeConsumer, FakeProducer, Msg, enriched, flows
from tests.support.matrix import window_message

HOUR = layout.HOUR_MS


@pytest.fixture(params=["writer_thread", "synchronous"], autouse=True)
def write_mode(request, monkeypatch):
    """Every service test runs with the background writer thread and with writes on the consumer thread."""
    monkeypatch.setattr(sys.modules[__name__], "WRITE_QUEUE_ROWS", 0 if request.param == "synchronous" else None)
    return request.param


WRITE_QUEUE_ROWS = None


def service(**archive):
    s = load_settings(None, archive={"grace_s": 60, "idle_flush_s": 1, **archive})
    fs = fsspec.filesystem("memory")
    root = "/" + uuid.uuid4().hex
    svc = ArchiveService(s, fs=fs, root=root, metrics_port=0, clock=lambda: 1_800_000_000.0,
                         write_queue_rows=WRITE_QUEUE_ROWS)
    svc.consumer = FakeConsumer()
    svc.summaries.producer = FakeProducer()
    return svc


def flushed(svc, force=False):
    """flush(), then wait for the writer thread (a no-op when writing synchronously)."""
    svc.flush(force=force)
    svc.drain()


def rows_of(svc, dataset):
    files = [f for f in svc.fs.find(f"{svc.root}/{dataset}") if layout.parse_key(f)]
    return [pq.read_table(svc.fs.open(f)) for f in files], files


def test_records_are_batched_bad_messages_skipped_and_committed():
    svc = service()
    t = svc.settings.kafka.topics
    cell = {"window_start_ms": T0, "window_end_ms": T0 + 10_000, "level": "node", "src": "a", "dst": "b",
            "category": "other", "bytes_est": 1, "packets_est": 1, "flow_records": 1, "samples": 0}
    msgs = [Msg(t.matrix, 0, o, b"junk" if o == 2 else window_message([{**cell, "samples": o}])) for o in range(6)]
    svc.handle(msgs)
    svc.flush(force=True)
    tables, files = rows_of(svc, "matrix_windows")
    assert sorted(x for tb in tables for x in tb["samples"].to_pylist()) == [0, 1, 3, 4, 5]
    assert len(files) == 1  # consecutive messages of a partition and hour -> one file
    assert svc.report["undecodable"] == 1
    assert svc.consumer.commits[-1] == {(t.matrix, 0): 6}  # past the bad message too


def test_flow_batches_by_hour_and_wrong_schema():
    svc = service()
    t = svc.settings.kafka.topics
    early = flows([T0 + 1000, T0 + HOUR + 5])
    later = flows([T0 + 2 * HOUR + 61_000 + i for i in range(3)])
    msgs = [Msg(t.flows_raw, 1, 0, codec.encode_batch("flow_batch", early)),
            Msg(t.flows_raw, 1, 1, codec.encode_record("matrix_cell", {
                "window_start_ms": 0, "window_end_ms": 0, "level": "node", "src": "", "dst": "", "category": "",
                "bytes_est": 0, "packets_est": 0, "flow_records": 0, "samples": 0})),
            Msg(t.flows_raw, 1, 2, codec.encode_batch("flow_batch", later))]
    svc.handle(msgs)
    flushed(svc)  # hours 0 and 1 are closed by the watermark (hour 2 + grace): written, commit held by hour 2
    _, files = rows_of(svc, "flows_raw")
    assert sorted(layout.parse_key(x).hour - T0 // HOUR for x in files) == [0, 1]
    assert svc.consumer.commits == [{(t.flows_raw, 1): 2}]  # hour 2 still buffered at offset 2
    svc.flush(force=True)
    assert svc.consumer.commits[-1] == {(t.flows_raw, 1): 3}
    reg = svc.metrics.registry
    assert reg.get_sample_value("fabricflow_sink_undecodable_messages_total",
                                {"dataset": "flows_raw", "reason": "wrong_schema"}) == 1
    assert reg.get_sample_value("fabricflow_sink_rows_written_total", {"dataset": "flows_raw"}) == 5
    assert reg.get_sample_value("fabricflow_sink_messages_total", {"dataset": "flows_raw"}) == 3
    assert reg.get_sample_value("fabricflow_sink_rows_received_total", {"dataset": "flows_raw"}) == 5


def test_revoke_flushes_commits_and_drops():
    svc = service()
    t = svc.settings.kafka.topics
    svc.handle([Msg(t.flows_raw, 0, 7, codec.encode_batch("flow_batch", flows([T0, T0 + 1])))])
    assert ("flows_raw", 0) in svc.sink.buffers
    svc._on_revoke(svc.consumer, [TopicPartition(t.flows_raw, 0)])
    assert ("flows_raw", 0) not in svc.sink.buffers
    assert svc.consumer.commits == [{(t.flows_raw, 0): 8}]
    assert len(rows_of(svc, "flows_raw")[1]) == 1


def test_revoke_while_the_object_store_is_down_gives_the_partitions_up_uncommitted(monkeypatch):
    """An exception out of the rebalance callback ended the sink (chaos s3-stop); now it is counted and the
    partitions are given up uncommitted, like lost ones: the next owner re-reads them."""
    svc = service()
    t = svc.settings.kafka.topics
    svc.handle([Msg(t.flows_raw, 0, 7, codec.encode_batch("flow_batch", flows([T0, T0 + 1])))])

    def down(*_a, **_kw):
        raise ConnectionError("Could not connect to the endpoint URL")

    monkeypatch.setattr(svc.fs, "ls", down)  # fsspec's memory filesystem is one shared instance: undo after
    monkeypatch.setattr(svc.fs, "find", down)
    monkeypatch.setattr(svc.writer, "write", down)
    svc._on_revoke(svc.consumer, [TopicPartition(t.flows_raw, 0)])  # must not raise
    assert ("flows_raw", 0) not in svc.sink.buffers
    assert svc.consumer.commits == []
    assert svc.metrics.registry.get_sample_value("fabricflow_sink_errors_total", {"stage": "write"}) >= 1


def test_summaries_emitted_once_and_flagged_partial_after_resume():
    svc = service()
    t = svc.settings.kafka.topics
    svc.consumer = FakeConsumer(committed={(t.flows_enriched, 0): 10})
    svc._on_assign(svc.consumer, [TopicPartition(t.flows_enriched, 0)])
    e0 = enriched([{"time_end_ms": T0 + 1000, "bytes_est": 5}, {"time_end_ms": T0 + 2000, "bytes_est": 7}])
    e1 = enriched([{"time_end_ms": T0 + HOUR + 10, "bytes_est": 1}])
    e2 = enriched([{"time_end_ms": T0 + 2 * HOUR + 2 * 60_000, "bytes_est": 1}])
    svc.handle([Msg(t.flows_enriched, 0, 10, codec.encode_batch("flow_enriched_batch", e0)),
                Msg(t.flows_enriched, 0, 11, codec.encode_batch("flow_enriched_batch", e1)),
                Msg(t.flows_enriched, 0, 12, codec.encode_batch("flow_enriched_batch", e2))])
    svc.flush()
    sent = svc.summaries.producer.sent
    assert [(k, r["flow_records"], r["bytes_est"]) for _, k, r in sent] == [
        (str(T0).encode(), 2, 12), (str(T0 + HOUR).encode(), 1, 1)]
    assert sent[0][2]["quality"] == [{"metric": PARTIAL_METRIC, "exporter": "", "value": 1.0}]  # resumed in hour 0
    assert sent[1][2]["quality"] == []
    late = enriched([{"time_end_ms": T0 + 5, "bytes_est": 1}])
    svc.handle([Msg(t.flows_enriched, 0, 13, codec.encode_batch("flow_enriched_batch", late))])
    svc.flush()
    assert len(svc.summaries.producer.sent) == 2 and svc.summaries.book.late_rows == 1  # never a second summary of hour 0


def test_routes_cover_archived_topics_only():
    s = load_settings(None)
    r = routes_for(s.kafka)
    t = s.kafka.topics
    assert t.dlq not in r and t.shuffle not in r and t.patterns in r
    assert {x.dataset for x in r.values()} == {d.name for d in layout.DATASETS.values() if d.derived_from is None}
    for x in r.values():
        want = codec.record_of(x.schema) if x.batch else "matrix_cell" if x.schema == "matrix_window_v2" else x.schema
        assert layout.spec(x.dataset).avsc == want


def test_on_step_sees_every_step_of_each_plan_in_order(write_mode):
    """The step observer (the crash tests kill the sink at one step) sees each plan's steps in order."""
    svc = service()
    seen = []
    svc.ledger.on_step = lambda step, plan: seen.append((step, plan))
    t = svc.settings.kafka.topics
    svc.handle([Msg(t.flows_raw, 0, 0, codec.encode_batch("flow_batch", flows([T0, T0 + 1])))])
    flushed(svc, force=True)
    svc.handle([Msg(t.flows_raw, 0, 1, codec.encode_batch("flow_batch", flows([T0 + 2])))])
    flushed(svc, force=True)
    if write_mode == "synchronous":
        want = [(s, n) for n in (1, 2) for s in ("before_write", "mid_write", "after_write", "after_commit")]
    else:  # in_flight on the consumer thread as the job is queued; the writer thread's steps follow
        want = [(s, n) for n in (1, 2) for s in ("in_flight", "before_write", "mid_write", "after_write", "after_commit")]
    assert seen == want


def test_archive_filesystem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_settings(None, archive={"url": "file://var/arch"})
    fs, root = archive_filesystem(s.archive)  # a reader: nothing created
    assert root == str(tmp_path / "var" / "arch") and not (tmp_path / "var").exists()
    fs, root = archive_filesystem(s.archive, write=True)  # the writer creates it
    assert root == str(tmp_path / "var" / "arch") and (tmp_path / "var" / "arch").is_dir()
    fs, root = archive_filesystem(load_settings(None, archive={"url": "memory://x/y"}).archive)
    assert root == "/x/y" and "memory" in fs.protocol
    fs, root = archive_filesystem(load_settings(None, archive={
        "url": "s3://bucket/pre/fix/", "s3_endpoint": "http://127.0.0.1:1", "s3_access_key": "k",
        "s3_secret_key": "s"}).archive)
    assert root == "bucket/pre/fix" and fs.client_kwargs["endpoint_url"] == "http://127.0.0.1:1"
    with pytest.raises(ArchiveUrlError):
        archive_filesystem(load_settings(None, archive={"url": "s3://"}).archive)


def test_ingest_quality_is_archived_from_avro():
    """ingest.quality.v1 carries Avro IngestQuality records; the catalog routes them to the ingest_quality dataset."""
    from schemas import records

    s = load_settings(None)
    route = routes_for(s.kafka)[s.kafka.topics.quality]
    assert (route.dataset, route.schema, route.batch) == ("ingest_quality", "ingest_quality", False)
    r = {"window_start_ms": 1_767_225_600_000, "window_end_ms": 1_767_225_660_000, "exporter": "10.0.0.1",
         "protocol": "netflow9", "ingest_worker": 0, "datagrams": 10, "records": 300, "sequence_unit": "datagrams",
         "sequence_lost": 2, "sequence_received": 10, "loss_ratio": 2 / 12, "records_lost_est": 60,
         "records_without_rate": 0, "duplicates": 0, "restarts": 0, "clock_skew_ms": 12.5, "clock_skew_max_ms": None}
    value = records.encode_records("ingest_quality", [r])[0]
    r.update(dict.fromkeys(("sampler_samples", "sampler_drops", "sampler_loss_ratio", "sampler_pool",
                            "sampler_samples_expected", "sampler_worst_source", "sampler_worst_loss_ratio")))
    assert codec.decode_record(value, expect=route.schema) == r
    from sinks.archive.arrow_schema import table_from_dicts

    t = table_from_dicts([r], layout.spec(route.dataset).avsc)
    assert t.column("clock_skew_max_ms").to_pylist() == [None] and t.column("clock_skew_ms").to_pylist() == [12.5]


def test_object_store_down_while_reading_the_index_ends_the_run_with_one_line(monkeypatch):
    """The written index is read while messages are added; a failure there cannot be retried in place (the
    consumer moved on), so run() ends with ArchiveUnavailable (exit 1) instead of a traceback."""
    from sinks.archive.fs import ArchiveUnavailable

    svc = service()
    t = svc.settings.kafka.topics

    class OneBatch(FakeConsumer):
        def __init__(self):
            super().__init__()
            self.sent = False

        def subscribe(self, *_a, **_kw):
            pass

        def consume(self, _n, timeout=0):
            if self.sent:
                return []
            self.sent = True
            return [Msg(t.flows_raw, 0, 7, codec.encode_batch("flow_batch", flows([T0])))]

        def close(self):
            pass

    def down(*_a, **_kw):
        raise ConnectionRefusedError(111, "Connect call failed")

    monkeypatch.setattr(svc.fs, "ls", down)
    monkeypatch.setattr("sinks.archive.service.Consumer", lambda _conf: OneBatch())
    monkeypatch.setattr("fabricflow.readiness.wait_for_kafka", lambda *a, **kw: 1)
    monkeypatch.setattr("fabricflow.kafka.ensure_topics", lambda *a, **kw: {})
    monkeypatch.setattr("sinks.archive.service.ArchiveService._consumer_config", lambda self: {})
    with pytest.raises(ArchiveUnavailable, match="did not answer while reading the archive index"):
        svc.run(max_seconds=5)


def test_summaries_gather_enriched_rows_in_chunks_and_add_them_before_their_hour_closes(monkeypatch):
    from sinks.archive import summary_emitter

    monkeypatch.setattr(summary_emitter, "CHUNK_ROWS", 3)
    svc = service()
    t = svc.settings.kafka.topics
    svc._on_assign(svc.consumer, [TopicPartition(t.flows_enriched, 0)])
    msg = lambda off, rows: Msg(t.flows_enriched, 0, off, codec.encode_batch("flow_enriched_batch", enriched(rows)))  # noqa: E731
    svc.handle([msg(0, [{"time_end_ms": T0 + 1000, "bytes_est": 5}, {"time_end_ms": T0 + 2000, "bytes_est": 7}])])
    assert svc.summaries.book.hours == {}  # 2 rows < a chunk: gathered, not yet aggregated
    svc.handle([msg(1, [{"time_end_ms": T0 + 3000, "bytes_est": 1}])])
    assert list(svc.summaries.book.hours) == [T0 // HOUR]  # a full chunk: aggregated
    svc.handle([msg(2, [{"time_end_ms": T0 + 4000, "bytes_est": 2}])])
    assert svc.summaries._pending_rows == 1
    svc.flush()
    assert svc.summaries.producer.sent == []  # hour 0 still open: the row may stay gathered
    svc.handle([msg(3, [{"time_end_ms": T0 + HOUR + 2 * 60_000, "bytes_est": 1}])])  # watermark past hour 0 + grace
    svc.flush()
    sent = svc.summaries.producer.sent
    assert [(k, r["flow_records"], r["bytes_est"]) for _, k, r in sent] == [(str(T0).encode(), 4, 15)]
    assert svc.summaries.book.late_rows == 0


def test_max_file_age_writes_files_while_rows_keep_coming_each_with_its_own_offsets():
    # the demo's setting: a steady stream (never idle, far from 1 M rows, hour open) still gets a file a minute
    now = [1_800_000_000.0]
    s = load_settings(None, archive={"grace_s": 60, "idle_flush_s": 3600, "max_file_age_s": 60})
    svc = ArchiveService(s, fs=fsspec.filesystem("memory"), root="/" + uuid.uuid4().hex, metrics_port=0,
                         clock=lambda: now[0], write_queue_rows=WRITE_QUEUE_ROWS)
    svc.consumer = FakeConsumer()
    svc.summaries.producer = FakeProducer()
    t = svc.settings.kafka.topics
    files_at = []
    for step in range(8):  # a message every 20 s for 160 s, flushing after each
        svc.handle([Msg(t.flows_raw, 0, step, codec.encode_batch("flow_batch", flows([T0 + step * 20_000], ids=[step])))])
        flushed(svc)
        files_at.append(len(rows_of(svc, "flows_raw")[1]))
        now[0] += 20
    # the first file once its rows waited 60 s (t=60), the next 60 s after its own first rows (t=80 -> t=140)
    assert files_at == [0, 0, 0, 1, 1, 1, 1, 2]
    flushed(svc, force=True)
    tables, files = rows_of(svc, "flows_raw")
    ranges = sorted((k.first_offset, k.last_offset) for k in map(layout.parse_key, files))
    assert ranges == [(0, 3), (4, 7)]  # contiguous offset ranges: each key names its own rows, none twice
    assert sorted(x for tb in tables for x in tb["in_if"].to_pylist()) == list(range(8))


def test_the_summaries_producer_is_configured_like_every_other_producer():
    """The summaries' producer takes :func:`fabricflow.kafka.producer_config` (acks=all, the murmur2 partitioner,
    the message size bound, ingest.producer's bounds) and only adds its client id and linger."""
    from fabricflow.kafka import producer_config

    svc = service()
    conf = svc.summaries._producer_config()
    k = svc.settings.kafka
    assert conf == producer_config(k, svc.settings.ingest.producer, **{"client.id": f"{k.client_id}-archive-summaries",
                                                                       "linger.ms": 5})
    assert conf["partitioner"] == "murmur2_random" and conf["acks"] == "all"
