"""Run the console: the live reader, the archive checker and uvicorn, in-process.

    svc = ConsoleServer(settings).start()   # returns once the port is bound
    print(f"console: {svc.url}")
    ...
    svc.stop()

Its lifecycle is the shared :class:`fabricflow.service.Service`: stops in reverse order,
``/metrics`` and ``/healthz`` on ``console.metrics_port``, a health flag the live reader's loop (else
the archive checker's) keeps up. ``fabricflow console`` runs it in the foreground until SIGTERM/SIGINT;
``fabricflow demo`` and the tests start and stop it beside the pipeline.
"""

from __future__ import annotations

import logging
import threading
import time

import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fabricflow.net import is_loopback
from fabricflow.service import Service

from .app import ConsoleState, create_app
from .closedloop import mark_storer
from .history import History
from .layout import Layout, load_layout
from .live import LiveStore

log = logging.getLogger(__name__)


class ConsoleConfigError(Exception):
    """The console cannot start with these settings (one line naming the setting)."""


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConsoleConfigError(f"console.listen: {listen!r} is not HOST:PORT")
    return host, int(port)


def check_listen(listen: str, token) -> tuple[str, int]:
    """(host, port); refuses a non-loopback address without an access token."""
    host, port = split_listen(listen)
    if not is_loopback(host) and not (token and token.get_secret_value()):
        raise ConsoleConfigError(
            f"console.listen {listen!r} is not a loopback address: set console.token "
            "(FABRICFLOW_CONSOLE__TOKEN) to require an access token, or listen on 127.0.0.1")
    return host, port


class ConsoleServer:
    def __init__(self, settings, listen: str | None = None, live: bool = True, archive: bool = True,
                 layout: Layout | None = None):
        c = settings.console
        self.settings = settings
        self.host, self.port = check_listen(listen or c.listen, c.token)
        inv = c.inventory or settings.processors.inventory
        self.layout = layout if layout is not None else load_layout(inv)
        self.store = LiveStore(self.layout, c.live_windows, c.live_events, c.live_port_samples)
        self.feed = None
        if live:
            from .feed import KafkaFeed

            self.feed = KafkaFeed(settings, self.store)
        self.history = History.from_settings(settings) if archive else None
        ing = settings.ingest
        self.state = ConsoleState(self.layout, self.store, self.history, self.feed,
                                  c.token.get_secret_value() if c.token else None,
                                  int(c.query_max_range_s * 1000),
                                  store_marks=mark_storer(settings, live, archive), accept_marks=c.accept_marks,
                                  marks_per_s=ing.marks_max_per_s, marks_per_source_per_s=ing.marks_max_per_source_per_s,
                                  window_ms=int(settings.processors.window_s * 1000))
        if self.feed is not None:
            self.feed.marks = self.state.marks
        self.app = create_app(self.state)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        registry = CollectorRegistry()
        registry.register(_ConsoleCollector(self))
        # the loop that beats: the live reader's, else the archive checker's (every 10 s); neither = nothing stalls
        stall_s = 30.0 if (self.feed is not None or self.history is not None) else float("inf")
        self.service = Service("console", registry, stall_s=stall_s)
        self.service.add_check("http", lambda: self._thread is None or self._thread.is_alive() or "server stopped")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self, timeout: float = 15.0) -> ConsoleServer:
        svc, c = self.service, self.settings.console
        svc.serve_http(c.metrics_bind, c.metrics_port)
        if self.feed is not None:
            self.feed.beat = svc.beat
            self.feed.start()
            svc.on_stop(self.feed.stop, "live reader")
        if self.history is not None:
            threading.Thread(target=self._watch_archive, name="console-archive", daemon=True).start()
        svc.on_stop(self._stop.set, "archive checker")
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # the caller owns signals
        self._thread = threading.Thread(target=self._server.run, name="console-http", daemon=True)
        self._thread.start()
        svc.on_stop(self._stop_http, "http server")
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ConsoleConfigError(f"console: cannot serve on {self.host}:{self.port} (in use, or not an "
                                         "address of this machine)")
            time.sleep(0.05)
        if self.port == 0:  # an ephemeral port: read back the bound one
            self.port = self._server.servers[0].sockets[0].getsockname()[1]
        sources = [what for what, on in (("live from Kafka", self.feed is not None),
                                         ("history from the archive", self.history is not None)) if on]
        svc.mark_ready(f"serving {self.url} ({', '.join(sources) or 'no data sources'})")
        return self

    def _watch_archive(self) -> None:
        while not self._stop.is_set():
            self.history.check()
            if self.feed is None:
                self.service.beat()
            self._stop.wait(10.0)

    def _stop_http(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def stop(self) -> None:
        """Stop what :meth:`start` started, newest first (the HTTP server, the archive checker, the live reader,
        /metrics)."""
        self.service.stop()

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`Service.request_stop`) or until the HTTP server ends; then stop."""
        try:
            with self.service.signals():
                while not self.service.wait(0.5):
                    if self._thread is None or not self._thread.is_alive():
                        break
        finally:
            self.stop()


class _ConsoleCollector:
    """The console's /metrics: the live reader's messages and whether it reaches the broker."""

    def __init__(self, server: ConsoleServer):
        self.server = server

    def collect(self):
        feed = self.server.feed
        up = GaugeMetricFamily("fabricflow_console_live_reader_up",
                               "1 when the live reader reaches the brokers (0 when it does not or is off)")
        up.add_metric([], 1.0 if feed is not None and feed.ok else 0.0)
        msgs = CounterMetricFamily("fabricflow_console_live_messages", "Kafka messages the live reader took",
                                   labels=["result"])
        msgs.add_metric(["ok"], float(feed.messages - feed.bad_messages) if feed is not None else 0.0)
        msgs.add_metric(["undecodable"], float(feed.bad_messages) if feed is not None else 0.0)
        yield up
        yield msgs
