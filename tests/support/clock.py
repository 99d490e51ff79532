"""A fake clock for code that takes ``clock`` and ``sleep`` callables: sleeping advances it at once."""

from __future__ import annotations


class FakeClock:
    """``clock()`` (also ``clock.clock()``) reads :attr:`t`; ``clock.sleep(s)`` records ``s`` in :attr:`sleeps`
    and moves :attr:`t` on by it; tests may also set :attr:`t` themselves."""

    def __init__(self, t: float = 0.0):
        self.t = t
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    clock = __call__

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s
