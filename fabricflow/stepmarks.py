"""Send training-step marks to fabricflow from a training loop: standard library only, never in the way.

    from fabricflow.stepmarks import StepMarks             # or copy this one file next to train.py
    marks = StepMarks("train-a", "udp://collector:6344")   # FABRICFLOW_MARKS=udp://... works as well
    for step, batch in enumerate(loader):
        with marks.step(step):                             # step_start ... step_end
            train_step(batch)

Each mark is one JSON line, sent as one UDP datagram to the ingest ``marks://`` listener or POSTed to the console
(``http://console:8090``). Sending never raises and never blocks the loop for long (HTTP goes through a background
thread with a bounded queue; what cannot be sent is counted in ``dropped``). Only rank 0 sends (``$RANK``) unless
``all_ranks=True``; without a target every call is a no-op. Imports nothing from fabricflow: it works as a single
copied file (Python 3.8+). docs/closed-loop.md, "Step marks", has the PyTorch example and the protocol.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator, Optional
from urllib.parse import urlsplit

__all__ = ["StepMarks"]

EVENTS = ("step_start", "step_end", "checkpoint_start", "checkpoint_end", "eval_start", "eval_end",
          "phase_start", "phase_end")
DEFAULT_UDP_PORT = 6344
_QUEUE_MAX = 1000


class StepMarks:
    """Sender of one job's marks. ``target``: ``udp://HOST[:PORT]`` or ``http(s)://HOST:PORT/api/marks/step``
    (default ``$FABRICFLOW_MARKS``; none = disabled). ``node`` defaults to the host name, ``rank`` to ``$RANK``."""

    def __init__(self, job: str, target: Optional[str] = None, *, node: Optional[str] = None,
                 rank: Optional[int] = None, token: Optional[str] = None, all_ranks: bool = False,
                 timeout_s: float = 1.0):
        self.job = job
        self.node = node if node is not None else socket.gethostname().split(".")[0]
        env_rank = os.environ.get("RANK")
        self.rank = rank if rank is not None else (int(env_rank) if env_rank and env_rank.isdigit() else None)
        self.token = token if token is not None else os.environ.get("FABRICFLOW_MARKS_TOKEN")
        self.timeout_s = timeout_s
        self.sent = 0
        self.dropped = 0  # not sent: send error, or the HTTP queue was full
        target = target if target is not None else os.environ.get("FABRICFLOW_MARKS", "")
        self.enabled = bool(target) and (all_ranks or not self.rank)
        self._sock = None
        self._addr = None
        self._url = None
        self._queue: Optional[queue.Queue] = None
        if not self.enabled:
            return
        u = urlsplit(target if "://" in target else "udp://" + target)
        if u.scheme == "udp":
            host, port = u.hostname or "127.0.0.1", u.port or DEFAULT_UDP_PORT
            info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            self._sock = socket.socket(info[0], socket.SOCK_DGRAM)
            self._sock.setblocking(False)
            self._addr = info[4]
        elif u.scheme in ("http", "https"):
            self._url = target if u.path not in ("", "/") else target.rstrip("/") + "/api/marks/step"
            self._queue = queue.Queue(_QUEUE_MAX)
            threading.Thread(target=self._post_loop, name="fabricflow-stepmarks", daemon=True).start()
        else:
            raise ValueError(f"StepMarks target {target!r}: use udp://HOST:PORT or http://HOST:PORT")

    # -- sending

    def send(self, event: str, step: Optional[int] = None, phase: Optional[str] = None) -> None:
        """Send one mark now (event time = now). Unknown events raise ValueError (a bug in the caller)."""
        if event not in EVENTS:
            raise ValueError(f"event must be one of {', '.join(EVENTS)}")
        if not self.enabled:
            return
        d = {"job": self.job, "event": event, "time": round(time.time(), 6)}
        if step is not None:
            d["step"] = int(step)
        if phase:
            d["phase"] = phase
        if self.node:
            d["node"] = self.node
        if self.rank is not None:
            d["rank"] = self.rank
        line = json.dumps(d, separators=(",", ":")).encode()
        if self._sock is not None:
            try:
                self._sock.sendto(line, self._addr)
                self.sent += 1
            except OSError:  # no listener, buffer full, network down: the training goes on
                self.dropped += 1
        else:
            try:
                self._queue.put_nowait(line)
            except queue.Full:
                self.dropped += 1

    def _post_loop(self) -> None:
        while True:
            line = self._queue.get()
            req = urllib.request.Request(self._url, data=line + b"\n", method="POST",
                                         headers={"Content-Type": "application/x-ndjson"})
            if self.token:
                req.add_header("Authorization", "Bearer " + self.token)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    r.read()
                self.sent += 1
            except Exception:  # noqa: BLE001 - never let a mark break the training
                self.dropped += 1

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until the HTTP queue is empty; UDP needs nothing."""
        deadline = time.monotonic() + timeout_s
        while self._queue is not None and not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.01)

    # -- context managers

    @contextmanager
    def _span(self, start: str, end: str, step: Optional[int], phase: Optional[str] = None) -> Iterator[None]:
        self.send(start, step, phase)
        try:
            yield
        finally:
            self.send(end, step, phase)

    def step(self, step: Optional[int] = None):
        """``with marks.step(n):`` sends step_start before the block and step_end after it."""
        return self._span("step_start", "step_end", step)

    def checkpoint(self, step: Optional[int] = None):
        """``with marks.checkpoint(n):`` around a checkpoint write."""
        return self._span("checkpoint_start", "checkpoint_end", step)

    def eval(self, step: Optional[int] = None):
        """``with marks.eval(n):`` around an evaluation pass."""
        return self._span("eval_start", "eval_end", step)

    def phase(self, name: str, step: Optional[int] = None):
        """``with marks.phase("data_load", n):`` around any named phase."""
        return self._span("phase_start", "phase_end", step, name)
