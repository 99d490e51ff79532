"""Logging set-up, the "ready" line every service logs, and a rate-limited logger for bad input (count
everything, log a sample). Standard library only: ingest logs "ready" before it loads anything heavy."""

from __future__ import annotations

import logging
import os
import sys
import time


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


_IMPORTED = time.monotonic()


def process_age_s() -> float:
    """Seconds since this process was started (exec), from ``/proc``; where that cannot be read, since this
    module was imported."""
    try:
        with open("/proc/self/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22, after the command name
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def log_ready(name: str, detail: str) -> float:
    """Log the one line that says a service is ready (``<name> ready in 1.23 s: <detail>``); returns the age."""
    age = process_age_s()
    logging.getLogger("fabricflow.service").info("%s ready in %.2f s: %s", name, age, detail)
    return age


class RateLimitedLog:
    """At most ``burst`` messages per ``period_s`` per key; the rest are counted and summarised."""

    def __init__(self, logger: logging.Logger, burst: int = 5, period_s: float = 60.0, clock=time.monotonic):
        self.logger = logger
        self.burst = burst
        self.period_s = period_s
        self.clock = clock
        self._state: dict[str, list] = {}

    def warning(self, key: str, msg: str, *args) -> bool:
        now = self.clock()
        st = self._state.get(key)
        if st is None or now - st[0] >= self.period_s:
            suppressed = st[2] if st else 0
            if suppressed:
                self.logger.warning("%s: %d similar messages suppressed in the last %.0fs", key, suppressed, self.period_s)
            st = [now, 0, 0]
            self._state[key] = st
        if st[1] < self.burst:
            st[1] += 1
            self.logger.warning(msg, *args)
            return True
        st[2] += 1
        return False
