"""Write, commit, confirm: the archive sink's order of durable files and committed offsets.

A plan's offsets are committed only after its files (and every earlier plan's) are durable, on the consumer
thread; with writer threads (:class:`sinks.archive.write_queue.WriteQueue`) files in flight are never planned twice, and
the first failed write halts the queue, pauses consumption and backs off. docs/archive.md, "Exactly-once
design" and "The archive service", says why this is exactly-once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException, TopicPartition

from fabricflow.logs import RateLimitedLog
from sinks.archive.buffer import ArchiveSink
from sinks.archive.flush import FlushPlan
from sinks.archive.parquet import ParquetWriter
from sinks.archive.metrics import SinkMetrics
from sinks.archive.write_queue import FAILED, OK, WriteJob, WriteQueue

log = logging.getLogger("fabricflow.sink")

#: Steps of writing a plan that ``on_step`` observers see, in order (``in_flight``: queued for the writer thread).
STEPS = ("before_write", "mid_write", "after_write", "after_commit", "in_flight")
COMMIT_INTERVAL_S = 1.0

TP = tuple[str, int]


class CommitLedger:
    """Executes flush plans: writes their files (here or on writer threads), then commits and confirms.

    ``consumer()`` and ``assigned()`` give the service's current consumer and assigned partitions (commits,
    pause/resume). ``committed`` is the next offset to read per partition as committed; ``lost`` the
    partitions never to commit for.
    """

    def __init__(self, writer: ParquetWriter, sink: ArchiveSink, metrics: SinkMetrics, report: dict,
                 topic_of: Callable[[str], str], consumer: Callable[[], object], assigned: Callable[[], set],
                 write_queue_rows: int, ratelog: RateLimitedLog, on_step=None):
        self.writer = writer
        self.sink = sink
        self.metrics = metrics
        self.report = report
        self.topic_of = topic_of  # dataset -> topic
        self.consumer = consumer
        self.assigned = assigned
        self.write_queue_rows = write_queue_rows  # 0: write on the consumer thread
        self.ratelog = ratelog
        self.on_step = on_step  # (step, plan number) observer, e.g. a test that kills the process at one step
        self.committed: dict[TP, int] = {}
        self.lost: set[TP] = set()
        self.wq: WriteQueue | None = None
        self.inflight: set[tuple] = set()  # idents of files queued for the writer thread, not yet reported
        self.plans = 0
        self.retry_at = 0.0
        self._retry_s = 1.0
        self._paused = False
        self._last_commit = 0.0

    def commit(self, offsets: dict[TP, int]) -> bool:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            res = self.consumer().commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            self.metrics.errors.labels("commit").inc()
            self.ratelog.warning("commit", "offset commit failed: %s", e)
            return False
        ok = True
        for tp in res or []:
            if tp.error is not None:
                ok = False
                self.metrics.errors.labels("commit").inc()
                self.ratelog.warning("commit", "offset commit failed for %s[%d]: %s", tp.topic, tp.partition, tp.error)
            else:
                self.committed[(tp.topic, tp.partition)] = tp.offset
        self.metrics.commits.inc()
        self.report["commits"] += 1
        self._last_commit = time.monotonic()
        return ok

    def _commits_of(self, plan: FlushPlan) -> dict[TP, int]:
        commits = {}
        for (dataset, part), off in plan.commit_offsets.items():
            tp = (self.topic_of(dataset), part)
            if off > self.committed.get(tp, -1):
                commits[tp] = off
        return commits

    def execute(self, plan: FlushPlan, force: bool = False) -> bool:
        """Write the plan's files, commit its offsets, confirm it (with the writer thread: queue the
        files not yet queued; :meth:`collect` commits and confirms once they are durable).
        False when a write failed."""
        commits = self._commits_of(plan)
        if not plan.files:  # nothing unconfirmed, nothing in flight: every offset planned is durable
            if commits and (force or time.monotonic() - self._last_commit >= COMMIT_INTERVAL_S):
                self.commit(commits)
            return True
        if self.write_queue_rows > 0:
            return self._submit(plan, commits, force)
        self.plans += 1
        self.report["plans"] += 1
        self._step("before_write")
        for i, f in enumerate(plan.files):
            try:
                self.writer.write(f)
            except Exception as e:
                self._write_error(f, e)
                return False
            self._written(f)
            if i == 0:
                self._step("mid_write")
        self._step("after_write")
        if commits:
            self.commit(commits)  # files are durable: confirm even if the commit failed (re-reads are de-duplicated)
        self._step("after_commit")
        self.sink.confirm(plan)
        self._write_ok()
        return True

    def _step(self, step: str, plan: int | None = None) -> None:
        if self.on_step is not None:
            self.on_step(step, self.plans if plan is None else plan)

    def _written(self, f) -> None:
        self.metrics.files.labels(f.dataset).inc()
        self.metrics.rows.labels(f.dataset).inc(f.num_rows)
        self.report["files_written"] += 1
        self.report["rows_written"] += f.num_rows

    def _write_error(self, f, e: BaseException) -> None:
        self.metrics.errors.labels("write").inc()
        self.ratelog.warning("write", "writing %s failed (nothing committed past it; retrying in %.0fs): %r",
                             f.key(self.writer.root) if f is not None else "?", self._retry_s, e)
        self._write_failed()

    # -- writer thread

    def _queue(self) -> WriteQueue:
        if self.wq is None:
            self.wq = WriteQueue(self.writer.write, max_rows=self.write_queue_rows,
                                 before=lambda job: self._step("before_write", job.seq),
                                 on_file=lambda job, i: i == 0 and self._step("mid_write", job.seq))
        return self.wq

    def _submit(self, plan: FlushPlan, commits: dict, force: bool) -> bool:
        wq = self._queue()
        # No collect() between planning and here: a job reported now would drop its files from
        # inflight while the plan still lists them, and they would be written a second time.
        if wq.halted:  # a write failed: nothing more is queued until every earlier job is reported
            return False
        files = [f for f in plan.files if f.ident not in self.inflight]
        if files:
            job = wq.submit(plan, files, commits)
            self.inflight.update(f.ident for f in files)
            self.plans = job.seq
            self.report["plans"] += 1
            self._step("in_flight", job.seq)
        if force:
            self.drain()
        return not (self.wq.halted or self.retry_at > time.monotonic())

    def collect(self) -> None:
        """Commit and confirm the jobs the writer thread finished, in order; report a failure.

        After a failed write the queue stays halted (later jobs are skipped, not written)
        until every job submitted before is reported here; then it accepts jobs again, and
        the next plan (after the retry delay) queues the failed files anew.
        """
        wq = self.wq
        if wq is None:
            return
        while True:
            jobs = wq.finished()
            for job in jobs:
                self.inflight.difference_update(f.ident for f in job.files)
                if job.status == OK:
                    self._job_written(job)
                elif job.status == FAILED:
                    self._write_error(job.failed_file, job.error)
                    log.debug("write failure", exc_info=job.error)
            if not (wq.halted and wq.pending == 0):
                return
            if not jobs:
                wq.resume()
                return

    def _job_written(self, job: WriteJob) -> None:
        for f in job.files:
            self._written(f)
        self._step("after_write", job.seq)
        commits = {tp: off for tp, off in job.commits.items()
                   if tp not in self.lost and off > self.committed.get(tp, -1)}
        if commits:
            self.commit(commits)  # files are durable: confirm even if the commit failed (re-reads are de-duplicated)
        self._step("after_commit", job.seq)
        self.sink.confirm(FlushPlan(job.files))
        self._write_ok()

    def drain(self) -> None:
        """Wait until every queued file is written (or failed), then commit and confirm."""
        if self.wq is not None:
            self.wq.wait_idle()
            self.collect()

    def close(self) -> None:
        """Stop the writer threads; anything still queued (after an error) is written, never committed."""
        if self.wq is not None:
            self.wq.close()
            self.wq = None

    def _write_failed(self) -> None:
        self.retry_at = time.monotonic() + self._retry_s
        self._retry_s = min(self._retry_s * 2, 30.0)
        consumer, assigned = self.consumer(), self.assigned()
        if not self._paused and consumer is not None and assigned:
            consumer.pause([TopicPartition(t, p) for t, p in assigned])
            self._paused = True

    def _write_ok(self) -> None:
        self._retry_s = 1.0
        consumer = self.consumer()
        if self._paused and consumer is not None:
            consumer.resume([TopicPartition(t, p) for t, p in self.assigned()])
            self._paused = False
