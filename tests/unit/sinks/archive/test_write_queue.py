"""The archive service's writer thread: job order, halting on a failure, back pressure, and exactly-once
of ArchiveService when a write fails or the process dies while a write is in flight."""

from __future__ import annotations

import threading
import uuid

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest
from confluent_kafka import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricflow.settings import load_settings
from schemas import codec
from sinks.archive import layout
from sinks.archive.flush import FileToWrite, FlushPlan
from sinks.archive.service import ArchiveService
from sinks.archive.write_queue import FAILED, OK, SKIPPED, WriteQueue
from tests.support.archive import T0, FakeConsumer, FakeProducer, Msg, flow_table, flows

HOUR = layout.HOUR_MS
WAIT = 10.0  # seconds: generous bound for thread hand-offs (never a timed assertion)


def file_of(first: int, rows: int = 1) -> FileToWrite:
    return FileToWrite("flows_raw", T0 // HOUR, 0, first, first, [flow_table([T0] * rows)])


# ----------------------------------------------------------------------------- WriteQueue


def test_jobs_finish_in_submission_order_and_a_failure_halts_the_queue():
    written, gate = [], threading.Event()

    def write(f):
        if f.first_offset == 1:
            gate.wait(WAIT)
            raise OSError("disk full")
        written.append(f.first_offset)

    wq = WriteQueue(write, parallel=1)
    jobs = [wq.submit(FlushPlan(), [file_of(o)], {}) for o in (0, 1, 2, 3)]
    gate.set()
    assert wq.wait_idle(WAIT)
    done = wq.finished()
    assert [j.seq for j in done] == [j.seq for j in jobs]
    assert [j.status for j in done] == [OK, FAILED, SKIPPED, SKIPPED]
    assert isinstance(done[1].error, OSError) and done[1].failed_file.first_offset == 1
    assert written == [0]  # one writer thread: nothing after the failed file was even started
    assert wq.halted
    wq.resume()
    wq.submit(FlushPlan(), [file_of(4)], {})
    assert wq.wait_idle(WAIT)
    assert [j.status for j in wq.finished()] == [OK] and written == [0, 4]
    wq.close()


def test_later_jobs_written_in_parallel_are_reported_skipped_after_a_failure():
    gate = threading.Event()
    written = []

    def write(f):
        if f.first_offset == 1:
            gate.wait(WAIT)
            raise OSError("late failure")
        written.append(f.first_offset)
        if f.first_offset == 2:
            gate.set()  # job 3's file is durable before job 2 fails

    wq = WriteQueue(write, parallel=2)
    for o in (0, 1, 2):
        wq.submit(FlushPlan(), [file_of(o)], {})
    assert wq.wait_idle(WAIT)
    done = wq.finished()
    assert 2 in written  # written on the second thread meanwhile ...
    assert [j.status for j in done] == [OK, FAILED, SKIPPED]  # ... but never reported ok (never committed)
    wq.close()


def test_files_of_one_job_are_written_in_parallel_and_one_failure_fails_the_job():
    both_started, lock, running, peak = threading.Barrier(2, timeout=WAIT), threading.Lock(), [0], [0]

    def write(f):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if f.first_offset < 2:
                both_started.wait()  # files 0 and 1 are in flight together
            if f.first_offset == 1:
                raise OSError("boom")
        finally:
            with lock:
                running[0] -= 1

    wq = WriteQueue(write, parallel=2)
    wq.submit(FlushPlan(), [file_of(0), file_of(1), file_of(2)], {})
    wq.submit(FlushPlan(), [file_of(3)], {})
    assert wq.wait_idle(WAIT)
    first, second = wq.finished()
    assert peak[0] == 2
    assert first.status == FAILED and first.failed_file.first_offset == 1 and first.written in (1, 2)
    assert second.status == SKIPPED  # never written, never committed
    wq.close()


def test_resume_refuses_while_jobs_are_unreported():
    wq = WriteQueue(lambda f: (_ for _ in ()).throw(OSError("x")))
    wq.submit(FlushPlan(), [file_of(0)], {})
    assert wq.wait_idle(WAIT)
    with pytest.raises(RuntimeError):
        wq.resume()  # the failure is not reported yet
    assert wq.finished()[0].status == FAILED
    wq.resume()
    wq.close()


def test_submit_blocks_while_the_queue_is_full():
    gate, started = threading.Event(), threading.Event()

    def write(f):
        started.set()
        gate.wait(WAIT)

    wq = WriteQueue(write, max_rows=2)
    wq.submit(FlushPlan(), [file_of(0, rows=3)], {})  # over the limit, but the queue was empty: accepted
    assert started.wait(WAIT)
    submitted = threading.Event()

    def second():
        wq.submit(FlushPlan(), [file_of(1)], {})
        submitted.set()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    assert not submitted.wait(0.3)  # blocked: 3 rows queued > 2
    gate.set()
    assert submitted.wait(WAIT)
    assert wq.wait_idle(WAIT)
    assert [j.status for j in wq.finished()] == [OK, OK]
    wq.close()


# ----------------------------------------------------------------------------- the service with a writer thread


def make_service(fs, root, consumer):
    s = load_settings(None, archive={"grace_s": 60, "idle_flush_s": 1})
    svc = ArchiveService(s, fs=fs, root=root, metrics_port=0, clock=lambda: 1_800_000_000.0, summaries=False)
    assert svc.ledger.write_queue_rows > 0  # the default: a writer thread
    svc.consumer = consumer
    svc.summaries.producer = FakeProducer()
    return svc


def message_log(topic, n_msgs=24, rows=5):
    """Flow batches on partition 0 over 4 event hours; ``in_if`` is a unique row id."""
    msgs, rid = [], 0
    for o in range(n_msgs):
        t = T0 + (o * 4 * HOUR) // n_msgs + np.arange(rows) * 1000
        msgs.append(Msg(topic, 0, o, codec.encode_batch("flow_batch", flows(t, ids=np.arange(rid, rid + rows)))))
        rid += rows
    return msgs, rid


def archived_ids(fs, root) -> list[int]:
    out = []
    for f in fs.find(f"{root}/flows_raw"):
        k = layout.parse_key(f)
        if k is None:
            continue
        with fs.open(f) as fh:
            t = pq.read_table(fh)
        assert (layout.hour_index(t["time_end_ms"].to_numpy()) == k.hour).all()
        out += t["in_if"].to_pylist()
    return out


def committed_of(consumer, tp) -> int:
    return max([c[tp] for c in consumer.commits if tp in c], default=0)


def feed(svc, msgs, start, step=3):
    for i in range(start, len(msgs), step):
        svc.handle(msgs[i:i + step])
        svc.flush()


def memory_service():
    """An archive service on a fresh in-memory filesystem with a fake consumer, and a message log of flows_raw
    partition 0: (fs, root, consumer, service, topic-partition, messages, rows)."""
    fs = fsspec.filesystem("memory")
    root = "/" + uuid.uuid4().hex
    consumer = FakeConsumer()
    svc = make_service(fs, root, consumer)
    tp = (svc.settings.kafka.topics.flows_raw, 0)
    msgs, nrows = message_log(tp[0])
    return fs, root, consumer, svc, tp, msgs, nrows


def test_write_failure_is_reported_retried_and_never_committed_past():
    fs, root, consumer, svc, tp, msgs, nrows = memory_service()
    real = svc.writer.write
    failures, gate = [], threading.Event()

    def flaky(f):
        if f.hour == T0 // HOUR + 1 and not failures:  # the first write of hour 1 fails once, late
            failures.append(f.first_offset)
            gate.wait(WAIT)  # meanwhile the consumer thread queues the files of later hours behind it
            raise OSError("S3 unavailable")
        return real(f)

    svc.writer.write = flaky
    feed(svc, msgs, 0)
    assert len(svc.ledger.inflight) > 1, "later files are queued behind the failing one"
    gate.set()
    svc.drain()
    assert failures, "the failure was injected"
    reg = svc.metrics.registry
    assert reg.get_sample_value("fabricflow_sink_errors_total", {"stage": "write"}) == 1
    # nothing at or after the unwritten file's first offset is committed
    assert all(c.get(tp, 0) <= failures[0] for c in consumer.commits)
    assert svc.ledger.retry_at > 0  # backing off; the files stay planned
    svc.ledger.retry_at = 0.0  # the retry delay has passed
    svc.flush(force=True)
    assert sorted(archived_ids(fs, root)) == list(range(nrows))
    assert committed_of(consumer, tp) == len(msgs)


def test_crash_with_a_write_in_flight_then_restart_archives_every_row_once():
    """Process A dies while one writer thread is inside its 3rd file (the other thread may have written
    later files meanwhile); the consumer thread had gone on decoding. B restarts from A's last commit."""
    fs, root, consumer, a, tp, msgs, nrows = memory_service()
    real = a.writer.write
    calls, in_flight, dead = [], threading.Event(), threading.Event()

    def dying(f):
        calls.append(f.ident)
        if len(calls) == 3:  # inside the job that writes the 3rd file: the process is killed here
            in_flight.set()
            dead.wait(WAIT)
            raise SystemExit("killed")
        return real(f)

    a.writer.write = dying
    a.sink.buffer_kwargs["max_rows"] = 8  # several files per hour: several jobs
    step = 0
    while not in_flight.is_set() and step < len(msgs):
        a.handle(msgs[step:step + 2])
        a.flush()
        step += 2
    assert in_flight.wait(WAIT)
    a.handle(msgs[step:step + 4])  # the consumer thread keeps decoding while the write is in flight
    a.flush()
    committed = committed_of(consumer, tp)
    assert committed < len(msgs)
    dead.set()  # A is killed: its blocked write fails, files not started are skipped ...
    assert a.ledger.wq.wait_idle(WAIT)  # ... and a write under way on its other thread lands before B starts
    assert committed_of(consumer, tp) == committed  # A's results are never collected: nothing more committed

    b = make_service(fs, root, FakeConsumer())
    b.sink.buffer_kwargs["max_rows"] = 8
    feed(b, msgs, committed)
    b.flush(force=True)
    ids = archived_ids(fs, root)
    assert sorted(ids) == list(range(nrows)), "every row exactly once"
    assert committed_of(b.consumer, tp) == len(msgs)


def test_each_file_is_written_once_when_jobs_finish_between_plan_and_queueing():
    fs = fsspec.filesystem("memory")
    root = "/" + uuid.uuid4().hex
    svc = make_service(fs, root, FakeConsumer())
    svc.sink.buffer_kwargs["max_rows"] = 8
    msgs, nrows = message_log(svc.settings.kafka.topics.flows_raw)
    real_write, real_plan = svc.writer.write, svc.sink.flush_plan
    writes = []

    def write(f):
        writes.append(f.ident)
        return real_write(f)

    def plan_then_let_the_writer_finish(*a, **k):
        plan = real_plan(*a, **k)  # lists the files in flight (pending, not confirmed)
        if svc.ledger.wq is not None:
            svc.ledger.wq.wait_idle(WAIT)  # ... which finish now, before the plan is queued
        return plan

    svc.writer.write = write
    svc.sink.flush_plan = plan_then_let_the_writer_finish
    feed(svc, msgs, 0, step=2)
    svc.flush(force=True)
    assert len(writes) == len(set(writes)), "a file was written twice"
    assert svc.report["rows_written"] == nrows
    assert sorted(archived_ids(fs, root)) == list(range(nrows))


def test_revoke_waits_for_files_in_flight_and_commits_before_giving_up():
    fs, root, consumer, svc, tp, msgs, nrows = memory_service()
    real, gate = svc.writer.write, threading.Event()

    def slow(f):
        gate.wait(WAIT)
        return real(f)

    svc.writer.write = slow
    feed(svc, msgs, 0)
    assert svc.ledger.inflight  # closed hours are queued, not written yet
    threading.Timer(0.2, gate.set).start()
    svc._on_revoke(consumer, [TopicPartition(tp[0], 0)])
    assert not svc.ledger.inflight and ("flows_raw", 0) not in svc.sink.buffers
    assert sorted(archived_ids(fs, root)) == list(range(nrows))
    assert consumer.commits[-1] == {tp: len(msgs)}


def test_lost_partition_is_never_committed():
    fs, root, consumer, svc, tp, msgs, _ = memory_service()
    real, gate = svc.writer.write, threading.Event()
    svc.writer.write = lambda f: (gate.wait(WAIT), real(f))[1]
    feed(svc, msgs, 0)
    assert svc.ledger.inflight
    n_commits = len(consumer.commits)
    threading.Timer(0.2, gate.set).start()
    svc._on_lost(consumer, [TopicPartition(tp[0], 0)])
    assert not svc.ledger.inflight  # the files in flight landed before the buffers were dropped
    assert all(tp not in c for c in consumer.commits[n_commits:])


@settings(max_examples=15, deadline=None)
@given(kills=st.sets(st.integers(1, 25), max_size=3), step=st.integers(1, 4), max_rows=st.sampled_from([6, 11, 1000]),
       late=st.booleans())
def test_exactly_once_when_killed_at_random_points_with_writes_in_flight(kills, step, max_rows, late):
    """Kill the service after random flushes (its writer stops; jobs queued but not started never land,
    nothing more is committed), restart from the last commit; every row ends up archived once."""
    fs = fsspec.filesystem("memory")
    root = "/" + uuid.uuid4().hex
    topic = load_settings(None).kafka.topics.flows_raw
    msgs, nrows = message_log(topic)
    if late:  # a message for hour 0 after hour 0 closed
        msgs.insert(20, Msg(topic, 0, 20, codec.encode_batch("flow_batch", flows([T0 + 5, T0 + 6], ids=[nrows, nrows + 1]))))
        msgs = [Msg(topic, 0, o, m.value()) for o, m in enumerate(msgs)]
        nrows += 2
    tp = (topic, 0)
    pending_kills = sorted(kills)
    committed, flushes = 0, 0
    for _ in range(len(kills) + 1):
        svc = make_service(fs, root, FakeConsumer())
        svc.sink.buffer_kwargs["max_rows"] = max_rows
        real, dead = svc.writer.write, threading.Event()

        def write(f, real=real, dead=dead):
            if dead.is_set():
                raise SystemExit("killed")
            return real(f)

        svc.writer.write = write
        killed = False
        for i in range(committed, len(msgs), step):
            svc.handle(msgs[i:i + step])
            svc.flush()
            flushes += 1
            if pending_kills and flushes >= pending_kills[0]:
                pending_kills.pop(0)
                dead.set()
                killed = True
                break
        if killed:
            if svc.ledger.wq is not None:  # a write already under way lands or not; nothing of this process runs later
                svc.ledger.wq.wait_idle(WAIT)
            committed = max(committed, committed_of(svc.consumer, tp))
            continue
        svc.flush(force=True)
        assert committed_of(svc.consumer, tp) == len(msgs)
        break
    assert sorted(archived_ids(fs, root)) == list(range(nrows)), "every row exactly once"
