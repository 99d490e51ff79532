"""Series stores behind the metric families: values keyed by label tuples, turned into prometheus_client families.

A :class:`Family` holds one Prometheus family. Counters are advanced with :meth:`Family.inc` (window
estimates) or set to a value that is itself a counter (:meth:`Family.set`, a switch's port counters);
gauges are set. Two rules make counters safe for ``rate()``: **born at zero** (a series created since
the last scrape is shown as 0 once, so its first increment is not lost to ``increase()`` and a
restart is an explicit counter reset) and **expiry** (``ttl_s``: gauges and set-counters not updated
for that long are dropped at the next scrape). Pure logic: time comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Family", "COUNTER", "GAUGE"]

COUNTER, GAUGE = "counter", "gauge"


class Family:
    """One metric family: ``name`` as exposed (counters end in ``_total``), help text, label names."""

    __slots__ = ("name", "doc", "labels", "kind", "ttl_s", "values", "newborn", "touched")

    def __init__(self, name: str, doc: str, labels: Iterable[str], kind: str, ttl_s: float | None = None):
        if kind == COUNTER and not name.endswith("_total"):
            raise ValueError(f"counter {name} must end in _total")
        self.name = name
        self.doc = doc
        self.labels = tuple(labels)
        self.kind = kind
        self.ttl_s = ttl_s
        self.values: dict[tuple, int | float] = {}
        self.newborn: set[tuple] = set()  # counter series created since the last scrape (exposed as 0 once)
        self.touched: dict[tuple, float] = {}  # series -> processing time of its last update (ttl_s only)

    def __len__(self) -> int:
        return len(self.values)

    def inc(self, key: tuple, amount: int | float) -> None:
        """Advance a counter series (created, born at zero, when new)."""
        cur = self.values.get(key)
        if cur is None:
            self.values[key] = amount
            self.newborn.add(key)
        else:
            self.values[key] = cur + amount

    def ensure(self, key: tuple) -> bool:
        """Create a counter series at 0 if missing; True when it was created."""
        if key in self.values:
            return False
        self.values[key] = 0
        self.newborn.add(key)
        return True

    def set(self, key: tuple, value: int | float, now: float = 0.0) -> None:
        """Set a gauge, or a counter whose value is kept elsewhere (a switch's own counter)."""
        self.values[key] = value
        if self.ttl_s is not None:
            self.touched[key] = now

    def remove(self, key: tuple) -> None:
        self.values.pop(key, None)
        self.newborn.discard(key)
        self.touched.pop(key, None)

    def expire(self, now: float) -> int:
        """Drop series not updated for ttl_s; how many."""
        if self.ttl_s is None:
            return 0
        old = [k for k, t in self.touched.items() if now - t > self.ttl_s]
        for k in old:
            self.remove(k)
        return len(old)

    def family(self):
        """The prometheus_client family of the current values (newborn counters as 0)."""
        base = self.name.removesuffix("_total") if self.kind == COUNTER else self.name
        cls = CounterMetricFamily if self.kind == COUNTER else GaugeMetricFamily
        fam = cls(base, self.doc, labels=self.labels)
        newborn = self.newborn
        add = fam.add_metric
        for key, v in self.values.items():
            add(key, 0.0 if key in newborn else float(v))
        return fam

    def scraped(self) -> None:
        """A scrape showed the newborn series (at 0): from now on they show their values."""
        self.newborn.clear()
