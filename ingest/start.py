"""``fabricflow ingest`` as a process: bind first, keep what arrives, then get the slow parts ready.

Order, and why: an exporter does not wait for us, and every datagram that reaches a closed port is gone. So
the listen sockets are bound before anything slow happens (this module imports only the standard library,
the settings and :mod:`ingest.listener`); a :class:`~ingest.listener.StartupReceiver` reads them into memory
while Kafka is awaited, the topics are checked and the decoders and the Kafka client are loaded; the worker's
receive loop then decodes those datagrams first, with their receive times. "ingest ready" (one log line,
docs/operations.md "Start-up and readiness") is logged once every socket is bound.

Several workers (``ingest.workers``): this process binds every worker's sockets (SO_REUSEPORT), then starts
the workers with their sockets; each one reads its own sockets from its first instant (the kernel holds what
arrives before that) and waits for this process to have found Kafka and the topics.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

from fabricflow.logs import log_ready
from fabricflow.settings import Settings

from .listener import Bound, ListenSpec, StartupReceiver, log_bound, open_sockets, parse_listen

log = logging.getLogger("fabricflow.ingest")


def _listening(bound: list[Bound]) -> str:
    return "listening on " + ", ".join(f"{spec.scheme}://{_addr(sock.getsockname())}" for sock, spec, _ in bound)


def _addr(name) -> str:
    host, port = name[0], name[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run_ingest(settings: Settings, listen: list[str] | None = None, stdout: bool = False) -> int:
    """Run ingest until SIGTERM/SIGINT; 1 when Kafka does not answer within ``kafka.wait_timeout_s``.

    Raises :class:`~ingest.listener.ListenError` (a bad URL, a port in use) and ``ValueError`` (a bad TLS file)
    before anything connects; the CLI turns both into one line and exit status 2.
    """
    cfg = settings.ingest
    specs = [parse_listen(u) for u in (listen or cfg.listen)]  # validate before binding
    if stdout and cfg.workers > 1:
        log.warning("--stdout uses one worker")
    n = 1 if stdout else cfg.workers
    if cfg.template_path:
        from pathlib import Path

        from fabricflow.statedir import writable_dir

        writable_dir(Path(cfg.template_path).parent, "ingest.template_path")  # StateDirError (a ValueError): exit 2
    if not stdout:
        from fabricflow.kafka_security import check_files

        check_files(settings.kafka)  # SecurityFileError (a ValueError): exit 2 naming the setting and file
    bound = open_sockets(specs, cfg.rcvbuf_bytes, n)  # ListenError: exit 2
    for i, mine in enumerate(bound):
        log_bound(mine, cfg.rcvbuf_bytes, i)
    stop = _StopRequest()  # SIGTERM/SIGINT from now on: the start ends early, what was received is still handled
    if n > 1:
        return _run_workers(settings, bound, specs, stop)
    startup = StartupReceiver(_export_sockets(bound[0]), cfg.startup_buffer_mb << 20).start()
    log_ready("ingest", _listening(bound[0]) + "; datagrams are kept from now on")
    if not stdout and not _kafka_ready(settings, stop):
        _lost(startup)
        return 0 if stop.is_set() else 1
    from .service import IngestWorker  # numpy, the decoders, the Kafka client: after the sockets are bound

    w = IngestWorker(settings, specs, stdout=stdout, bound=bound[0], startup=startup)
    with w.service.signals():
        if stop.is_set():
            w.service.request_stop()  # run() hands what was kept to Kafka, flushes and returns
        w.open()
        _report(w.run(), 0)
    return 0


class _StopRequest(threading.Event):
    """Set by SIGTERM/SIGINT while ingest starts (the worker's own handlers take over once it runs)."""

    def __init__(self):
        super().__init__()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.set())

    def sleep(self, seconds: float) -> None:
        """A pause between attempts to reach Kafka that a stop request ends."""
        if self.wait(seconds):
            raise _Stopped


class _Stopped(Exception):
    pass


def _kafka_ready(settings: Settings, stop: _StopRequest) -> bool:
    """Wait for the brokers and create the catalog's topics (every worker publishes at once); False (logged)
    when the brokers do not answer in time or a stop was requested."""
    from fabricflow.readiness import Unreachable, wait_for_kafka
    from fabricflow.kafka import ensure_topics

    try:
        wait_for_kafka(settings.kafka, log=log, sleep=stop.sleep)
    except Unreachable as e:
        log.error("%s", e)
        return False
    except _Stopped:
        log.info("stopped while waiting for Kafka")
        return False
    ensure_topics(settings.kafka)
    return not stop.is_set()


def _lost(startup: StartupReceiver) -> None:
    datas, _, _ = startup.take()
    if datas:
        log.error("%d datagrams received while waiting for Kafka were not published", len(datas))


def _report(report: dict, index: int) -> None:
    undelivered = report.get("undelivered_records", 0)
    msg = f"worker {index} stopped: " + ", ".join(f"{k}={v}" for k, v in report.items())
    (log.warning if undelivered else log.info)(msg)
    if undelivered:
        log.warning("worker %d: %d records were NOT delivered to Kafka before the flush deadline", index, undelivered)


def _worker_main(settings: Settings, bound: list[Bound], specs: list[ListenSpec], index: int, go, parent: int) -> None:
    """A worker process: read its sockets at once, load the pipeline, wait for ``go`` (Kafka found), run."""
    for sock, _, _ in bound:
        sock.setblocking(False)
    startup = StartupReceiver(_export_sockets(bound), settings.ingest.startup_buffer_mb << 20).start()
    from fabricflow.logs import setup_logging

    setup_logging(settings.log_level)
    from .service import IngestWorker

    w = IngestWorker(settings, specs, index=index, bound=bound, startup=startup)
    with w.service.signals():
        while not go.wait(0.2):
            if w.stopping or os.getppid() != parent:  # stopped, or the parent is gone: it will never say go
                return
        w.open()
        _report(w.run(), index)


def _run_workers(settings: Settings, bound: list[list[Bound]], specs: list[ListenSpec], stop: _StopRequest) -> int:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_worker_main, args=(settings, mine, specs, i, go, os.getpid()), name=f"ingest-{i}")
             for i, mine in enumerate(bound)]

    def forward(signum=None, _frame=None):
        stop.set()
        for p in procs:
            if p.pid is not None and p.is_alive():
                p.terminate()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    listening = _listening(bound[0])  # before the sockets are closed here: a closed socket has no name
    for p in procs:
        p.start()  # the worker's sockets go with it (their descriptors are passed at spawn)
    for mine in bound:
        for sock, _, _ in mine:
            sock.close()  # the workers hold them now
    log_ready("ingest", f"{len(procs)} workers {listening}; datagrams are kept from now on")
    if stop.is_set() or not _kafka_ready(settings, stop):
        stopped = stop.is_set()
        forward()
        for p in procs:
            p.join()
        return 0 if stopped else 1
    go.set()
    rc = 0
    for p in procs:
        p.join()
        rc = rc or (p.exitcode or 0)
    return rc


def _export_sockets(bound: list[Bound]) -> list:
    """The export sockets the start-up receiver drains; marks:// sockets wait in the kernel for the worker's loop."""
    return [sock for sock, spec, _ in bound if spec.scheme != "marks"]
