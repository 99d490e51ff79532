"""UDP listeners: listen URLs, sockets (SO_RCVBUF, SO_REUSEPORT), socket drop counters, and the start-up
receiver that keeps what arrives while the rest of ingest gets ready.

The receive loop itself is a plain non-blocking ``recvfrom_into`` drain per
ready socket (measured ~600k datagrams/s per core here, against ~40k for
asyncio's DatagramProtocol), see :mod:`ingest.service`. This module imports
nothing heavy: ingest binds its sockets (:func:`open_sockets`) before it loads
numpy, the decoders or the Kafka client (:mod:`ingest.start`).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from fabricflow.net import udp_socket_table

log = logging.getLogger("fabricflow.ingest")

SCHEMES = {"sflow": 6343, "netflow": 2055, "ipfix": 4739, "marks": 6344}


class ListenError(ValueError):
    """A listen URL or socket that cannot be used; the message names it."""


@dataclass(frozen=True)
class ListenSpec:
    url: str
    scheme: str  # sflow | netflow | ipfix (what the port is for; datagrams are still told apart by version) | marks
    host: str
    port: int

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET


def parse_listen(url: str) -> ListenSpec:
    """``sflow://0.0.0.0:6343``, ``netflow://[::]:2055``, ``ipfix://127.0.0.1:4739``, ``marks://0.0.0.0:6344``
    (port optional)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ListenError(f"listen URL {url!r}: scheme must be one of {', '.join(SCHEMES)}")
    if parts.path not in ("", "/") or parts.query:
        raise ListenError(f"listen URL {url!r}: expected SCHEME://HOST:PORT")
    try:
        port = parts.port if parts.port is not None else SCHEMES[parts.scheme]
    except ValueError:
        raise ListenError(f"listen URL {url!r}: bad port") from None
    host = parts.hostname or "0.0.0.0"
    return ListenSpec(url, parts.scheme, host, port)


def open_socket(spec: ListenSpec, rcvbuf: int, reuseport: bool = False) -> tuple[socket.socket, int]:
    """Bound non-blocking UDP socket and the receive buffer the kernel actually granted."""
    sock = socket.socket(spec.family, socket.SOCK_DGRAM)
    try:
        if spec.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            # Root may exceed net.core.rmem_max with SO_RCVBUFFORCE.
            sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
        except OSError:
            pass
        granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2  # Linux reports double
        sock.bind((spec.host, spec.port))
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        raise ListenError(f"cannot listen on {spec.url}: {e.strerror or e}") from None
    return sock, granted


Bound = tuple[socket.socket, ListenSpec, int]  # socket, what it listens for, the SO_RCVBUF the kernel granted


def open_sockets(specs: list[ListenSpec], rcvbuf: int, workers: int = 1, reuseport: bool | None = None) -> list[list[Bound]]:
    """Per worker, every listener bound. With ``workers > 1`` (or ``reuseport``) each socket joins its port's
    SO_REUSEPORT group. All or nothing: :class:`ListenError` (the first failure, e.g. a port in use) after
    closing what was bound."""
    reuse = workers > 1 if reuseport is None else reuseport
    out: list[list[Bound]] = []
    try:
        for _ in range(workers):
            mine: list[Bound] = []
            out.append(mine)
            for spec in specs:
                sock, granted = open_socket(spec, rcvbuf, reuseport=reuse)
                mine.append((sock, spec, granted))
    except ListenError:
        for mine in out:
            for sock, _, _ in mine:
                sock.close()
        raise
    return out


def log_bound(bound: list[Bound], requested: int, index: int = 0) -> None:
    """One line per socket, and a warning where the kernel granted less receive buffer than asked for."""
    for sock, spec, granted in bound:
        if granted < requested:
            log.warning("%s: kernel granted SO_RCVBUF %d < requested %d; raise net.core.rmem_max (sysctl) to avoid drops "
                        "under bursts", spec.url, granted, requested)
        log.info("worker %d listening on %s (%s)", index, spec.url, sock.getsockname())


class StartupReceiver:
    """Drains bound sockets into memory while ingest starts (Kafka, topics, decoders), so a datagram that
    arrives then is kept, not dropped by a full socket buffer.

    Holds each datagram with its source address and receive time (ms) until :meth:`take`; at most
    ``max_bytes``: beyond it the thread stops reading and the kernel's socket buffer holds the rest (what
    overflows that is counted in ``fabricflow_ingest_socket_drops_total`` once the worker runs).
    """

    def __init__(self, sockets: list[socket.socket], max_bytes: int, clock=time.time):
        self.sockets = sockets
        self.max_bytes = max_bytes
        self.clock = clock
        self.datas: list[bytes] = []
        self.srcs: list[str] = []
        self.times_ms: list[int] = []
        self.bytes = 0
        self.full = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "StartupReceiver":
        self._thread = threading.Thread(target=self._run, name="ingest-startup-receiver", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for sock in self.sockets:
            sel.register(sock, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                if self.bytes >= self.max_bytes:
                    self.full = True
                    self._stop.wait(0.05)
                    continue
                for key, _ in sel.select(timeout=0.05):
                    self._drain(key.fileobj)
        finally:
            sel.close()

    def _drain(self, sock: socket.socket) -> None:
        now_ms = int(self.clock() * 1000)
        for _ in range(512):
            if self.bytes >= self.max_bytes:
                return
            try:
                data, addr = sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. ICMP-induced errors: the next datagram is still good
                return
            self.datas.append(data)
            self.srcs.append(addr[0])
            self.times_ms.append(now_ms)
            self.bytes += len(data)

    def take(self) -> tuple[list[bytes], list[str], list[int]]:
        """Stop reading (the caller's loop takes the sockets over) and hand over what was kept, oldest first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        out = (self.datas, self.srcs, self.times_ms)
        self.datas, self.srcs, self.times_ms = [], [], []
        return out


def _proc_udp_drops(inode: int) -> int | None:
    key = str(inode)
    return next((int(cols[12]) for cols in udp_socket_table() if cols[9] == key), None)


def socket_drops(sock: socket.socket) -> int | None:
    """Datagrams the kernel dropped for this socket (receive buffer full), from /proc/net/udp*."""
    try:
        inode = os.fstat(sock.fileno()).st_ino
    except OSError:
        return None
    return _proc_udp_drops(inode)
