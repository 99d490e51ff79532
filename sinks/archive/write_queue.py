"""Background writer threads of the archive service: planned files are written off the consumer thread.

:class:`WriteQueue` writes each job's files on ``parallel`` threads and reports jobs strictly in
submission order; the first failed write halts it until the consumer thread, which alone commits
offsets, has seen every report and resumes it; :meth:`WriteQueue.submit` blocks while more than
``max_rows`` rows wait. The ordering rules the exactly-once argument relies on are in
docs/archive.md, "The archive service".
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sinks.archive.flush import FileToWrite, FlushPlan

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"


@dataclass(eq=False)
class WriteJob:
    """The files of one flush plan to write; ``status`` and ``error`` are set when it is reported."""

    seq: int
    plan: FlushPlan
    files: list[FileToWrite]
    commits: dict = field(default_factory=dict)  # (topic, partition) -> Kafka commit value, once written
    status: str | None = None
    error: BaseException | None = None
    failed_file: FileToWrite | None = None
    written: int = 0  # files of this job written
    skipped: int = 0  # files not attempted (queue halted)
    started: bool = False
    errors: dict = field(default_factory=dict)  # file index -> exception

    def __post_init__(self) -> None:
        self.remaining = len(self.files)

    @property
    def rows(self) -> int:
        return sum(f.num_rows for f in self.files)


class WriteQueue:
    """Writer threads, jobs reported in order, halts on the first failure (see the module docstring).

    ``before(job)`` is called on a writer thread before a job's first file, ``on_file(job, index)``
    after each durable file (the crash test hooks use them).
    """

    def __init__(self, write: Callable[[FileToWrite], object], *, max_rows: int = 1_000_000,
                 before: Callable[[WriteJob], None] | None = None,
                 on_file: Callable[[WriteJob, int], None] | None = None, name: str = "archive-writer",
                 parallel: int = 2) -> None:
        self._write = write
        self.max_rows = max_rows
        self._before = before
        self._on_file = on_file
        self._cv = threading.Condition()
        self._jobs: deque[WriteJob] = deque()  # submitted, not yet reported, in order
        self._files: deque[tuple[WriteJob, int]] = deque()  # files not started yet, in order
        self._done: deque[WriteJob] = deque()  # reported, not yet collected
        self._queued_rows = 0
        self._halted = False  # a write failed: start nothing more
        self._failed = False  # a failed job was reported: report every later job skipped
        self._closed = False
        self._seq = 0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, parallel))]
        for t in self._threads:
            t.start()

    # -- consumer thread

    def submit(self, plan: FlushPlan, files: list[FileToWrite], commits: dict) -> WriteJob:
        """Queue ``files`` (of ``plan``, with its commit offsets); blocks while the queue is full."""
        with self._cv:
            while self._queued_rows > self.max_rows and self._jobs and not self._closed:
                self._cv.wait(0.5)
            if self._closed:
                raise RuntimeError("write queue is closed")
            self._seq += 1
            job = WriteJob(self._seq, plan, list(files), dict(commits))
            self._jobs.append(job)
            self._files.extend((job, i) for i in range(len(job.files)))
            self._queued_rows += job.rows
            self._report()  # a job without files is done at once
            self._cv.notify_all()
            return job

    def finished(self) -> list[WriteJob]:
        """Jobs reported since the last call, in submission order (never blocks)."""
        with self._cv:
            out = list(self._done)
            self._done.clear()
            return out

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every submitted job was reported; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._jobs, timeout)

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet reported."""
        with self._cv:
            return len(self._jobs)

    @property
    def halted(self) -> bool:
        with self._cv:
            return self._halted or self._failed

    def resume(self) -> None:
        """Accept writes again after a failure; call only once every job submitted so far was collected."""
        with self._cv:
            if self._jobs or self._done:
                raise RuntimeError("resume() with jobs not yet reported")
            self._halted = self._failed = False

    def close(self, timeout: float = 60.0) -> None:
        """Finish the queued files, then stop the threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join(timeout)

    # -- writer threads

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._files and not self._closed:
                    self._cv.wait()
                if not self._files:
                    return
                job, i = self._files.popleft()
                skip = self._halted
                first = not job.started
                job.started = True
            err = None
            if not skip:
                try:
                    if first and self._before is not None:
                        self._before(job)
                    self._write(job.files[i])
                    if self._on_file is not None:
                        self._on_file(job, i)
                except BaseException as e:  # noqa: BLE001 - reported to the consumer thread, which fails loudly
                    err = e
            with self._cv:
                if skip:
                    job.skipped += 1
                elif err is not None:
                    job.errors[i] = err
                    self._halted = True
                else:
                    job.written += 1
                job.remaining -= 1
                self._report()
                self._cv.notify_all()

    def _report(self) -> None:
        """Move finished jobs at the head of the queue to ``_done`` (lock held)."""
        while self._jobs and self._jobs[0].remaining == 0:
            job = self._jobs.popleft()
            self._queued_rows -= job.rows
            if job.errors:
                first = min(job.errors)
                job.status, job.error, job.failed_file = FAILED, job.errors[first], job.files[first]
                self._failed = True
            elif self._failed or job.skipped:
                job.status = SKIPPED
                self._failed = True
            else:
                job.status = OK
            self._done.append(job)
