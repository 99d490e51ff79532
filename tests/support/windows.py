"""Window aggregators for tests of :class:`processors.logic.windows.tumbling.WindowManager`."""

from __future__ import annotations


class PlainStateAgg:
    """An aggregator whose state is plain data: its result and its snapshot are the state itself.
    Subclasses give ``initialize`` and ``agg``."""

    def result(self, state, start, end):
        return state

    def dump(self, state):
        return state

    def load(self, obj):
        return obj
