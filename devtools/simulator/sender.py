"""UDP sender: paces simulator datagrams onto loopback targets (a thin layer over ``generate``).

Datagram *i* with event time ``t_i`` is sent at ``wall0 + (t_i - t_0) / speed`` (``speed`` <= 0:
as fast as the rate bound allows). NetFlow v9 / IPFIX carry event time in their records, so an
accelerated run still stamps scenario time; sFlow has no timestamps (collectors use receive
time), so pacing proportional to ``speed`` is what keeps sFlow's time axis a scaled copy of the
scenario's. Bounds: ``max_pps`` (datagrams per wall second) and ``max_datagrams`` (total).
Targets must be loopback (127.0.0.0/8, ::1, localhost) unless ``allow_remote`` is set.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from fabricflow.net import is_loopback

KINDS = ("sflow", "netflow9", "ipfix")
#: Kinds sent only to a target given for them by name (``marks=HOST:PORT``): never to a default, never by ``all``.
OPTIONAL_KINDS = ("marks",)
DEFAULT_TARGETS = {"sflow": "127.0.0.1:6343", "netflow9": "127.0.0.1:2055", "ipfix": "127.0.0.1:4739"}


class TargetError(ValueError):
    """A target is malformed or not allowed."""


def parse_hostport(text: str) -> tuple[str, int]:
    """``127.0.0.1:6343``, ``[::1]:6343``, ``localhost:6343`` -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise TargetError(f"target {text!r} is not host:port")
    host = host.strip("[]")
    p = int(port)
    if not 0 < p < 65536:
        raise TargetError(f"bad port in {text!r}")
    return host, p


def parse_targets(targets: dict[str, str] | list[str] | None, allow_remote: bool = False) -> dict[str, tuple[str, int]]:
    """Targets per kind. Dict ``{kind|"all": "host:port"}`` or list of ``kind=host:port`` / ``host:port``
    (a bare ``host:port`` means every export kind). Export kinds not given use the default ports on 127.0.0.1;
    ``marks`` (step and change mark lines) is sent only where a ``marks=host:port`` target says."""
    items: list[tuple[str, str]] = []
    if isinstance(targets, dict):
        items = list(targets.items())
    else:
        for t in targets or []:
            kind, sep, hp = t.partition("=")
            items.append((kind.strip(), hp) if sep else ("all", t))
    out: dict[str, tuple[str, int]] = {}
    for kind, hp in items:
        kinds = KINDS if kind in ("all", "*") else (kind,)
        for k in kinds:
            if k not in KINDS + OPTIONAL_KINDS:
                raise TargetError(f"unknown target kind {k!r}; use one of {KINDS + OPTIONAL_KINDS} or all")
            out[k] = parse_hostport(hp)
    for k in KINDS:
        out.setdefault(k, parse_hostport(DEFAULT_TARGETS[k]))
    for k, (host, _) in out.items():
        if not allow_remote and not is_loopback(host):
            raise TargetError(f"target {host} for {k} is not loopback; refusing (allow_remote to override)")
    return out


@dataclass
class SendStats:
    sent: int = 0
    errors: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    first_event_ms: int | None = None
    last_event_ms: int | None = None


class UdpSender:
    """One socket per (exporter, address family); with ``distinct_sources`` each exporter sends
    from its own 127.0.0.x address (IPv4 loopback targets only), as separate devices would."""

    def __init__(self, targets: dict[str, tuple[str, int]], distinct_sources: bool = True):
        self.targets = {}
        for k, (host, port) in targets.items():
            info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            self.targets[k] = (info[0], info[4])
        self.distinct = distinct_sources
        self.socks: dict[tuple[str, int], socket.socket] = {}
        self.source_of: dict[str, str] = {}
        self.skipped: dict[str, int] = {}  # datagrams of a kind without a target (marks), not sent

    def _sock(self, exporter: str, family: int) -> socket.socket:
        key = (exporter if self.distinct else "", family)
        s = self.socks.get(key)
        if s is None:
            s = socket.socket(family, socket.SOCK_DGRAM)
            if self.distinct and family == socket.AF_INET:
                src = f"127.0.0.{10 + len(self.source_of) % 240}"
                try:
                    s.bind((src, 0))
                    self.source_of[exporter] = src
                except OSError:
                    pass
            self.socks[key] = s
        return s

    def send(self, kind: str, data: bytes, exporter: str = "") -> None:
        if kind not in self.targets:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            return
        family, addr = self.targets[kind]
        if family == socket.AF_INET and self.distinct:
            dst_is_loop = ipaddress.ip_address(addr[0]).is_loopback
            sock = self._sock(exporter, family) if dst_is_loop else self._sock("", family)
        else:
            sock = self._sock("", family)
        sock.sendto(data, addr)

    def close(self) -> None:
        for s in self.socks.values():
            s.close()
        self.socks.clear()


def pace_and_send(
    datagrams: Iterable,
    send: Callable[[str, bytes, str], None],
    speed: float = 1.0,
    max_pps: float = 5000.0,
    max_datagrams: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SendStats:
    """Send each ``(send_time_ms, kind, data)`` at its paced wall time, within the bounds."""
    st = SendStats()
    min_gap = 1.0 / max_pps if max_pps and max_pps > 0 else 0.0
    wall0 = clock()
    next_free = wall0
    for dg in datagrams:
        if max_datagrams is not None and st.sent >= max_datagrams:
            break
        t_ms, kind, data = dg[0], dg[1], dg[2]
        if st.first_event_ms is None:
            st.first_event_ms = t_ms
        due = wall0 + (t_ms - st.first_event_ms) / 1000.0 / speed if speed and speed > 0 else wall0
        due = max(due, next_free)
        delay = due - clock()
        if delay > 0.001:
            sleep(delay)
        try:
            send(kind, data, getattr(dg, "exporter", ""))
            st.sent += 1
            st.by_kind[kind] = st.by_kind.get(kind, 0) + 1
        except OSError:
            st.errors += 1
        st.last_event_ms = t_ms
        next_free = max(due, clock() - 0.05) + min_gap  # no burst catch-up beyond 50 ms
    st.wall_s = clock() - wall0
    return st
