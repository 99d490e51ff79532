"""Logging set-up and a rate-limited logger for bad input (count everything, log a sample)."""

from __future__ import annotations

import logging
import sys
import time


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


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
