"""The ingest service: sockets -> receive loop -> pipeline -> Kafka (or stdout).

Process model: ``ingest.workers`` processes, each binding every listener with
SO_REUSEPORT. The kernel hashes each datagram's (source address, source port)
to one socket, so one exporter's datagrams always reach the same worker and its
NetFlow v9/IPFIX templates stay on that worker. An exporter that changes its
source port per datagram would scatter across workers and lose templates: run
``workers: 1`` for such exporters (docs/operations.md). Worker ``i`` serves its
metrics on ``metrics_port + i``.

The receive loop drains each ready socket (at most ``DRAIN_MAX`` datagrams per
pass) and hands the datagrams to the pipeline in groups of ``HOLD_MIN`` or once
the oldest has waited ``HOLD_MAX_S`` (at most a tenth of
``ingest.batch_max_delay_ms``), so sFlow is decoded many datagrams per call.
While fewer are held, the loop sleeps out the hold and then drains what
arrived meanwhile: at moderate rates one pass (select, flush check, producer
poll) per hold instead of one per datagram.
"""

from __future__ import annotations

import logging
import selectors
import time

from fabricflow.service import Service
from fabricflow.settings import Settings

from .listener import ListenSpec, StartupReceiver, log_bound, open_sockets, socket_drops
from .metrics import IngestMetrics
from .pipeline import IngestPipeline
from .publish import KafkaSink, StdoutSink
from .template_files import restore_templates, worker_template_path

log = logging.getLogger("fabricflow.ingest")

DRAIN_MAX = 512  # datagrams read from one socket before looking at the others
HOLD_MIN = 128  # received datagrams are handed to the pipeline in groups of at least this many ...
HOLD_MAX_S = 0.005  # ... or once the oldest has waited this long (at most a tenth of batch_max_delay_ms)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def tune_allocator(mmap_threshold: int = 16 << 20, trim_threshold: int = 64 << 20) -> bool:
    """Keep freed batch-sized buffers in the heap (glibc only; False elsewhere).

    A flush allocates a few arrays of ~1 MB (4,096 rows of 252 bytes). glibc
    serves allocations >= 128 kB with a fresh mmap, or trims the heap top on
    free, so each flush page-faulted ~400 times (measured ~0.4 ms, a third of
    the flush). With these thresholds the memory is reused; the resident size
    stays at the worker's peak working set (a few batches).
    """
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))


class IngestWorker:
    """One worker: its sockets, the receive loop, the pipeline and the sink (Kafka or stdout).

    ``bound``: sockets opened before the worker was built (:func:`ingest.listener.open_sockets`, as
    :mod:`ingest.start` does); ``startup``: the :class:`~ingest.listener.StartupReceiver` that read them
    meanwhile, whose datagrams :meth:`run` handles first. Without them :meth:`open` binds ``specs`` itself.
    """

    def __init__(self, settings: Settings, specs: list[ListenSpec], stdout: bool = False, index: int = 0, sink=None,
                 ready=None, bound: list | None = None, startup: StartupReceiver | None = None):
        self.settings = settings
        self.specs = specs
        tune_allocator()
        self.index = index
        self.metrics = IngestMetrics()
        cfg = settings.ingest
        self.sink = sink or (StdoutSink(self.metrics) if stdout else KafkaSink(settings.kafka, cfg.producer, self.metrics))
        # Templates: this worker's own file, all workers' files restored at start (ingest/template_files.py)
        self.pipeline = IngestPipeline(cfg.model_copy(update={"template_path": None}), self.sink, self.metrics)
        if cfg.template_path:
            restore_templates(self.pipeline.templates, cfg.template_path)
            self.pipeline.templates.path = worker_template_path(cfg.template_path, index, cfg.workers)
        self._templates_saved = time.monotonic()
        if self.pipeline.quality is not None:
            self.pipeline.quality.worker = index
        self.service = Service(f"ingest worker {index}", self.metrics.registry, stall_s=10.0)
        self.service.add_check("kafka", lambda: not getattr(self.sink, "fatal", None) or "producer failed fatally")
        self.sockets = []
        self._bound = bound
        self.startup = startup
        self._ready = ready
        self._drops: dict[str, int] = {}
        self.marks = None  # MarkReceiver of the marks:// listeners (ingest/marks.py)
        if any(s.scheme == "marks" for s in specs):
            from .marks import MarkReceiver

            self.marks = MarkReceiver(self.sink, self.metrics.registry, allowlist=cfg.marks_allowlist,
                                      max_per_s=cfg.marks_max_per_s, max_per_source_per_s=cfg.marks_max_per_source_per_s)
        self.capture = None  # PcapWriter of ingest.capture_path (ingest/pcapwrite.py)
        if cfg.capture_path:
            from .pcapwrite import PcapWriter

            path = cfg.capture_path if cfg.workers <= 1 else _worker_file(cfg.capture_path, index, ".pcap")
            self.capture = PcapWriter(path, cfg.capture_max_bytes)

    def open(self) -> None:
        """Bind the listeners (unless bound before) and serve /metrics."""
        cfg = self.settings.ingest
        bound = self._bound
        self._bound = None
        if bound is None:
            bound = open_sockets(self.specs, cfg.rcvbuf_bytes, reuseport=cfg.workers > 1)[0]
            log_bound(bound, cfg.rcvbuf_bytes, self.index)
        for sock, spec, granted in bound:
            self.sockets.append((sock, spec))
            self.metrics.rcvbuf.labels(spec.url).set(granted)
        if cfg.metrics_port:
            self.service.serve_http(cfg.metrics_bind, cfg.metrics_port + self.index)
        if not cfg.allowlist:
            log.warning("ingest.allowlist is empty: datagrams from any source are accepted (spoofed UDP can inject flows)")

    @property
    def stopping(self) -> bool:
        return self.service.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:  # tests and benches stop the loop this way
        if value:
            self.service.request_stop()

    def save_templates_if_due(self, now: float) -> bool:
        """Write this worker's template file every ``ingest.template_save_s`` (atomic); False when not due."""
        cache = self.pipeline.templates
        if not cache.path or now - self._templates_saved < self.settings.ingest.template_save_s:
            return False
        self._templates_saved = now
        try:
            cache.save()
        except OSError as e:
            log.warning("could not save templates to %s: %s", cache.path, e)
            return False
        return True

    def _update_socket_drops(self) -> None:
        for sock, spec in self.sockets:
            d = socket_drops(sock)
            if d is None:
                continue
            prev = self._drops.get(spec.url, 0)
            if d > prev:
                self.metrics.socket_drops.labels(spec.url).inc(d - prev)
            self._drops[spec.url] = d

    def run(self, max_seconds: float | None = None) -> dict:
        if not self.sockets:
            self.open()
        if self._ready is not None:
            self._ready.set()
        sel = selectors.DefaultSelector()
        for sock, spec in self.sockets:
            sel.register(sock, selectors.EVENT_READ, spec)
        buf = bytearray(65536)
        mv = memoryview(buf)
        handle_many = self.pipeline.handle_many
        self._take_startup(handle_many)
        # Datagrams are received into `held` and handled together (sFlow decoded by one
        # columnar call, whose fixed cost pays off from ~40 datagrams): when HOLD_MIN are
        # held or the oldest has waited `hold_s`. Latency added: at most hold_s.
        hold_s = min(HOLD_MAX_S, self.settings.ingest.batch_max_delay_ms / 10_000)
        held: list[bytes] = []
        held_src: list[str] = []
        held_ms: list[int] = []
        held_since = 0.0
        deadline = time.monotonic() + max_seconds if max_seconds else None
        last_housekeeping = 0.0
        try:
            while not self.stopping:
                timeout = 0.05
                if held:  # wait out the hold with datagrams gathering in the socket buffers: one pass per
                    timeout = 0.0  # hold, not one per datagram (a select would return at the next one)
                    wait = held_since + hold_s - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                events = sel.select(timeout=timeout)
                now_ms = int(time.time() * 1000)
                was_held = len(held)
                for key, _ in events:
                    sock = key.fileobj
                    if key.data.scheme == "marks":
                        self._drain_marks(sock, buf, mv, now_ms)
                        continue
                    capture = self.capture
                    for _ in range(DRAIN_MAX):
                        try:
                            n, addr = sock.recvfrom_into(buf)
                        except BlockingIOError:
                            break
                        except OSError as e:  # e.g. ICMP-induced errors: count and go on
                            log.debug("recv error: %s", e)
                            break
                        held.append(bytes(mv[:n]))
                        held_src.append(addr[0])
                        if capture is not None:
                            capture.write(now_ms, addr[0], key.data.port, held[-1], addr[1])
                if len(held) > was_held:
                    held_ms.extend([now_ms] * (len(held) - was_held))
                    if not was_held:
                        held_since = time.monotonic()
                if held and (len(held) >= HOLD_MIN or time.monotonic() - held_since >= hold_s):
                    handle_many(held, held_src, held_ms)
                    held, held_src, held_ms = [], [], []
                self.pipeline.maybe_flush()
                self.sink.poll()
                mono = time.monotonic()
                self.service.beat()
                if mono - last_housekeeping > 1.0:
                    self._update_socket_drops()
                    self.save_templates_if_due(mono)
                    if self.capture is not None:
                        self.capture.flush()
                    last_housekeeping = mono
                if deadline and mono > deadline:
                    break
        finally:
            sel.close()
            if held:
                handle_many(held, held_src, held_ms)
        return self.close()

    def _drain_marks(self, sock, buf, mv, now_ms: int) -> None:
        """Mark lines of a marks:// socket: parsed, bounded and published at once (a few per second)."""
        for _ in range(DRAIN_MAX):
            try:
                n, addr = sock.recvfrom_into(buf)
            except BlockingIOError:
                return
            except OSError as e:
                log.debug("recv error: %s", e)
                return
            data = bytes(mv[:n])
            self.marks.handle(data, addr[0], now_ms)
            if self.capture is not None:
                self.capture.write(now_ms, addr[0], sock.getsockname()[1], data, addr[1])

    def _take_startup(self, handle_many) -> None:
        """The datagrams the start-up receiver kept, handled first (with their receive times); then ready."""
        kept = 0
        if self.startup is not None:
            datas, srcs, times = self.startup.take()
            self.startup = None
            kept = len(datas)
            for i in range(0, kept, DRAIN_MAX):
                handle_many(datas[i:i + DRAIN_MAX], srcs[i:i + DRAIN_MAX], times[i:i + DRAIN_MAX])
        where = "stdout" if isinstance(self.sink, StdoutSink) else "Kafka"
        self.service.mark_ready(f"decoding and publishing to {where} ({kept} datagrams kept while starting)")

    def close(self) -> dict:
        self.pipeline.close()
        if self.capture is not None:
            self.capture.close()
        report = self.sink.close()
        for sock, _ in self.sockets:
            sock.close()
        self.sockets = []
        self.service.stop()
        return report


def _worker_file(path: str, index: int, suffix: str) -> str:
    """``NAME.wi.SUFFIX`` beside ``path`` for worker ``i`` of several."""
    base = path[: -len(suffix)] if path.endswith(suffix) else path
    return f"{base}.w{index}{suffix}"
