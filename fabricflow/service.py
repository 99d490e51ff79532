"""The lifecycle every fabricflow service shares: start, run until stopped, stop in reverse order.

A :class:`Service` holds what a process keeps open (HTTP server, Kafka clients, threads) as a stack
of stop callbacks, turns SIGTERM/SIGINT into a stop request, serves ``/metrics`` and ``/healthz``,
waits for Kafka and the object store at start (:mod:`fabricflow.readiness`), creates the catalog's
topics, and keeps a health flag: ``/healthz`` answers 503 once the loop has not called
:meth:`Service.beat` for ``stall_s`` (or an added check fails). Readiness is separate:
:meth:`Service.mark_ready` logs one ``<name> ready in N s: ...`` line (N: since the process started) and
turns ``/readyz`` from 503 to 200; what "ready" means per service is in docs/operations.md ("Start-up and
readiness"). Typical use::

    svc = Service("ingest", registry=metrics.registry); svc.serve_http(bind, port)
    with svc.signals():
        while not svc.stopping: ...; svc.beat()
    svc.stop()
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .logs import log_ready

log = logging.getLogger("fabricflow.service")

Check = Callable[[], "bool | str | None"]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):  # no access log on stderr
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scrape does not hold /healthz


def serve_http(registry, host: str, port: int, health: Callable[[], tuple[bool, str]], scrape=None,
               ready: Callable[[], tuple[bool, str]] | None = None):
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` in a daemon thread; port 0 takes a free port (``server_port``).

    ``/metrics`` is the Prometheus text of ``registry``, or ``scrape()`` (bytes) when given.
    ``health()`` and ``ready()`` return (ok, reason); without ``ready`` ``/readyz`` answers as ``/healthz``.
    Returns the server (``.shutdown()`` and ``.server_close()`` to stop).
    """
    from prometheus_client import CONTENT_TYPE_LATEST, make_wsgi_app

    if scrape is None:
        metrics_app = make_wsgi_app(registry)
    else:
        def metrics_app(environ, start_response):
            body = scrape()
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
            return [body]

    def app(environ, start_response):
        path = environ.get("PATH_INFO")
        if path == "/healthz":
            ok, reason = health()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            if ok:  # healthy with a note (a degraded but working part, e.g. a job source on its last good data)
                return [f"ok: {reason}\n".encode() if reason else b"ok\n"]
            return [f"unhealthy: {reason}\n".encode()]
        if path == "/readyz":
            ok, reason = (ready or health)()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ready\n" if ok else f"not ready: {reason}\n".encode()]
        if path in ("/metrics", "/"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics, /healthz or /readyz\n"]

    server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


class Service:
    """Start/stop bookkeeping, signals, ``/metrics`` + ``/healthz`` and the health flag of one service."""

    def __init__(self, name: str, registry=None, *, stall_s: float = 30.0, clock=time.monotonic):
        self.name = name
        self.registry = registry
        self.stall_s = stall_s
        self.clock = clock
        self.last_beat = clock()
        self.http = None
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self.not_ready_reason = "starting"
        self._stops: list[tuple[str, Callable[[], object]]] = []
        self._checks: list[tuple[str, Check]] = []
        self._notes: list[tuple[str, Callable[[], str | None]]] = []

    # -- running

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def request_stop(self, *_args) -> None:
        """Ask the service's loop to stop (signal handlers, tests, other threads)."""
        self._stopping.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until a stop is requested (True) or ``timeout`` passes (False)."""
        return self._stopping.wait(timeout)

    def beat(self) -> None:
        """The service's loop is alive (clears a stall)."""
        self.last_beat = self.clock()

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT request a stop while inside (main thread only; elsewhere a no-op)."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self.request_stop)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- health

    def add_check(self, name: str, check: Check) -> None:
        """``check()`` returns True/None when fine, False or a reason text when not."""
        self._checks.append((name, check))

    def add_note(self, name: str, note: Callable[[], str | None]) -> None:
        """``note()`` returns a text when a part runs degraded without making the service unhealthy: ``/healthz``
        then answers 200 ``ok: <name>: <text>``."""
        self._notes.append((name, note))

    def health(self) -> tuple[bool, str]:
        """(healthy, reason when not; else the notes of degraded parts, "" when none)."""
        age = self.clock() - self.last_beat
        if age > self.stall_s:
            return False, f"{self.name} loop stalled for {age:.0f} s"
        for name, check in self._checks:
            r = check()
            if r is False or isinstance(r, str):
                return False, f"{name}: {r}" if isinstance(r, str) else name
        return True, "; ".join(f"{name}: {text}" for name, note in self._notes if (text := note()))

    def healthy(self) -> bool:
        return self.health()[0]

    # -- readiness

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    def mark_ready(self, detail: str) -> bool:
        """The service does its job from now on: log ``<name> ready in N s: <detail>`` once and answer
        ``/readyz`` with 200 (False: it was ready already)."""
        if self._ready.is_set():
            return False
        self._ready.set()
        log_ready(self.name, detail)
        return True

    def readiness(self) -> tuple[bool, str]:
        """(ready and healthy, reason): what ``/readyz`` answers."""
        if not self._ready.is_set():
            return False, self.not_ready_reason
        return self.health()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    # -- resources

    def on_stop(self, fn: Callable[[], object], name: str = "") -> None:
        """Run ``fn`` at :meth:`stop`, after everything registered later (reverse order)."""
        self._stops.append((name or getattr(fn, "__qualname__", "resource"), fn))

    def serve_http(self, bind: str, port: int | None, registry=None, *, scrape=None, required: bool = False) -> bool:
        """Serve ``/metrics`` and ``/healthz`` on ``bind:port`` (port None or 0 with ``required`` = a free port;
        0 otherwise = off). ``scrape``: a callable giving the /metrics body instead of ``registry``'s text.
        False (logged) when the port is taken, unless ``required`` (then OSError)."""
        if not port and not required:
            return False
        try:
            self.http = serve_http(registry or self.registry, bind, port or 0, self.health, scrape, self.readiness)
        except OSError as e:  # e.g. a second worker on the same host: run without metrics, say so
            if required:
                raise
            log.warning("%s: metrics port %s:%d unavailable (%s): running without /metrics", self.name, bind, port, e)
            return False
        port = self.http.server_port
        server = self.http
        self.on_stop(lambda: (server.shutdown(), server.server_close()), "metrics http")
        log.info("%s: metrics on http://%s:%d/metrics", self.name, bind, port)
        return True

    def wait_for_kafka(self, kafka) -> int:
        """Wait for the brokers before connecting for real (:func:`fabricflow.readiness.wait_for_kafka`: one log
        line per attempt, backoff); :class:`~fabricflow.readiness.Unreachable` after ``kafka.wait_timeout_s``."""
        from .readiness import wait_for_kafka

        return wait_for_kafka(kafka, log=log)

    def wait_for_object_store(self, archive, fs=None) -> int:
        """Wait for the archive's object store (``s3://`` only; :func:`fabricflow.readiness.wait_for_object_store`);
        :class:`~fabricflow.readiness.Unreachable` after ``archive.wait_timeout_s``."""
        from .readiness import wait_for_object_store

        return wait_for_object_store(archive, log=log, fs=fs)

    def ensure_topics(self, kafka, required: bool = True) -> None:
        """Create the catalog's topics; ``required=False``: log and go on when that fails (managed elsewhere)."""
        from .kafka import ensure_topics

        try:
            ensure_topics(kafka)
        except Exception as e:
            if required:
                raise
            log.warning("%s: cannot ensure topics exist: %s", self.name, e)

    def stop(self) -> None:
        """Stop everything registered, newest first; a failing stop is logged and the rest still run."""
        self._stopping.set()
        while self._stops:
            name, fn = self._stops.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - stopping goes on
                log.warning("%s: stopping %s failed: %s", self.name, name, e)
