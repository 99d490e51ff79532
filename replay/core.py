"""Replay's core loop: raw batches -> one :class:`ProcessorCore` per shard -> outputs, deterministically.

:func:`replay_batches` enriches and shards each flow batch exactly like the live workers and flushes every
core at the end; :func:`slice_batches` cuts the sources' rows into event-time slices, the one canonical
order both sources end in (docs/replay.md says why slices reproduce the live results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import numpy as np

from fabricflow.streams import counter_shard
from processors.logic.core import ProcessorCore, shard_of
from schemas.columns import addr_str
from processors.logic.engine import Output

#: Event-time slice per replay batch (must divide an hour so slices stay inside one archive hour).
DEFAULT_SLICE_MS = 10_000
HOUR_MS = 3_600_000
FLOW_TIME = "time_end_ms"
COUNTER_TIME = "time_received_ms"
DISCARD_TIME = "time_received_ms"


class ReplayError(Exception):
    """A replay cannot run; the message is one line saying why (CLI exit 2)."""


def iso_utc(ms: int) -> str:
    """Unix milliseconds as ``YYYY-MM-DDTHH:MM:SSZ`` (messages)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def time_range(frm, to) -> tuple[int, int]:
    """``--from`` and ``--to`` (ISO-8601, unix ms or -DURATION, as :func:`query.timerange.parse_time` reads them)
    in unix ms, the first before the second; :class:`ReplayError` otherwise."""
    from query.timerange import parse_time

    try:
        lo, hi = parse_time(frm), parse_time(to)
    except (TypeError, ValueError) as e:
        raise ReplayError(str(e)) from None
    if hi <= lo:
        raise ReplayError(f"empty time range: from {iso_utc(lo)} is not before to {iso_utc(hi)}")
    return lo, hi


def counter_shard_of(counters: np.ndarray, partitions: int) -> np.ndarray:
    """Shard per counter sample: :func:`fabricflow.streams.counter_shard` of the text of its exporter address,
    the rule a live worker applies to the message key (all samples of an agent in one core).

    Link health keeps state per (agent, ifIndex); that core reports it, every other core applies the same
    samples to its port state only (what the flow detectors read), so which core runs it does not change
    any value.
    """
    n = len(counters)
    if n == 0 or partitions <= 1:
        return np.zeros(n, dtype=np.int64)
    addrs = np.ascontiguousarray(counters["exporter_addr"], dtype=np.uint8)
    uniq, inv = np.unique(addrs.view(np.dtype((np.void, 16))).ravel(), return_inverse=True)
    h = np.array([counter_shard(addr_str(u.tobytes()), partitions) for u in uniq], dtype=np.int64)
    return h[inv.ravel()]


def _split(arr: np.ndarray, shards: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard, rows of that shard in input order) for each shard present, by shard number."""
    if len(arr) == 0:
        return []
    if shards.min() == shards.max():
        return [(int(shards[0]), arr)]
    order = np.argsort(shards, kind="stable")
    s = shards[order]
    cut = np.flatnonzero(np.diff(s)) + 1
    return [(int(shards[idx[0]]), arr[idx]) for idx in np.split(order, cut)]


def _min_time(batch: np.ndarray, column: str) -> int:
    return int(batch[column].min()) if len(batch) else -(2**62)


def _merged(flow_batches: Iterable[np.ndarray], counter_batches: Iterable[np.ndarray],
            discard_batches: Iterable[np.ndarray] = ()):
    """("flows"|"counters"|"discards", batch) keeping each input's order, flows and counters interleaved by
    the batches' first event time (flows first on ties). Values never depend on this interleaving: link health
    shares no state with the flow detectors; it only orders the output list. A batch of dropped-packet
    notifications comes before the first counter batch whose last sample is not older than its first
    notification: every link event then reads all the notifications of its interval in the input, however
    the sources were sliced (notifications later than a sample are outside its interval)."""
    di = iter(discard_batches)
    d = next(di, None)
    for kind, batch in _flows_and_counters(flow_batches, counter_batches):
        if kind == "counters" and len(batch):
            last = int(batch[COUNTER_TIME].max())
            while d is not None and _min_time(d, DISCARD_TIME) <= last:
                yield "discards", d
                d = next(di, None)
        yield kind, batch
    while d is not None:
        yield "discards", d
        d = next(di, None)


def _flows_and_counters(flow_batches: Iterable[np.ndarray], counter_batches: Iterable[np.ndarray]):
    fi, ci = iter(flow_batches), iter(counter_batches)
    f = next(fi, None)
    c = next(ci, None)
    while f is not None or c is not None:
        if c is None or (f is not None and _min_time(f, FLOW_TIME) <= _min_time(c, COUNTER_TIME)):
            yield "flows", f
            f = next(fi, None)
        else:
            yield "counters", c
            c = next(ci, None)


class ShardedCores:
    """One :class:`ProcessorCore` per shard, fed as a live worker feeds them (the loop of :func:`replay_batches`
    and of ``fabricflow backfill``). Pass ``cores`` (a list of ``partitions`` cores) to inspect them afterwards."""

    def __init__(self, core_factory: Callable[[], ProcessorCore], partitions: int,
                 cores: list[ProcessorCore] | None = None):
        partitions = int(partitions)
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        if cores is None:
            cores = [core_factory() for _ in range(partitions)]
        elif len(cores) != partitions:
            raise ValueError(f"{len(cores)} cores for {partitions} partitions")
        for shard, core in enumerate(cores):  # output keys name the shard, as a live worker's do
            core.engine.shard = shard
        self.partitions = partitions
        self.cores = cores
        self.front = core_factory()  # enrichment only (stateless apart from its counters)

    def enrich(self, flows: np.ndarray):
        """Raw flow rows -> enriched rows (``LabeledFlows``: no string objects, cheap to split)."""
        return self.front.enrich_labels(flows)

    def flows(self, enriched) -> list[Output]:
        """Enriched rows -> ``shard_of`` -> each shard's rows (in input order) to its core."""
        by_src = self.front.unregistered_sources(enriched)  # an unregistered host's sightings: one shard
        out: list[Output] = []
        for s, rows in _split(enriched, shard_of(enriched, self.partitions, by_src=by_src)):
            out.extend(self.cores[s].process_enriched(rows))
        return out

    def counters(self, batch: np.ndarray) -> list[Output]:
        """Counter samples -> the exporter's shard reports link health; every other shard keeps the port state."""
        out: list[Output] = []
        for s, rows in _split(batch, counter_shard_of(batch, self.partitions)):
            for other in range(self.partitions):  # as live: every shard keeps the port state
                if other != s:
                    self.cores[other].process_counters(rows, emit=False)
            out.extend(self.cores[s].process_counters(rows))
        return out

    def discards(self, batch: np.ndarray) -> None:
        """Dropped-packet notifications -> the exporter's shard (the one reporting its link health), as live."""
        for s, rows in _split(batch, counter_shard_of(batch, self.partitions)):
            self.cores[s].process_discards(rows)

    def flush(self) -> list[Output]:
        """Close every open window (end of the input), shard 0 first."""
        out: list[Output] = []
        for core in self.cores:
            out.extend(core.flush())
        return out


def replay_batches(
    flow_batches: Iterable[np.ndarray],
    counter_batches: Iterable[np.ndarray],
    core_factory: Callable[[], ProcessorCore],
    partitions: int,
    *,
    on_batch: Callable[[str, int], None] | None = None,
    cores: list[ProcessorCore] | None = None,
    discard_batches: Iterable[np.ndarray] = (),
) -> list[Output]:
    """Run raw batches (FLOW_DTYPE / COUNTER_DTYPE) through one ProcessorCore per shard; flush at the end.

    Per flow batch, like a live worker: enrich, ``shard_of(enriched, partitions, by_src=...)``,
    each shard's rows (in input order) to that shard's core. Counter batches go
    to ``counter_shard_of`` (the other shards update their port state with them, without outputs), and
    ``discard_batches`` (DISCARD_DTYPE, sFlow dropped-packet notifications) to the same shard, each before the
    counters that may read it (:func:`_merged`). Output order: processing order, shards in number
    order within a batch, then the flushes of shard 0, 1, ... ``on_batch(kind,
    rows)`` is called after each batch (progress). Pass ``cores`` (a list of
    ``partitions`` cores) to inspect them afterwards.
    """
    sharded = ShardedCores(core_factory, partitions, cores)
    out: list[Output] = []
    for kind, batch in _merged(flow_batches, counter_batches, discard_batches):
        if len(batch):
            if kind == "flows":
                out.extend(sharded.flows(sharded.enrich(batch)))
            elif kind == "discards":
                sharded.discards(batch)
            else:
                out.extend(sharded.counters(batch))
        if on_batch is not None:
            on_batch(kind, len(batch))
    out.extend(sharded.flush())
    return out


# ----------------------------------------------------------------------------- canonical order


def slice_batches(rows: np.ndarray, time_column: str, slice_ms: int = DEFAULT_SLICE_MS) -> list[np.ndarray]:
    """Split rows (already in (partition, offset, position) order) into event-time slices.

    Slice ``k`` holds the rows with ``k * slice_ms <= t < (k + 1) * slice_ms``, in
    their input order; slices come oldest first. Vectorised (one stable argsort).
    """
    if slice_ms <= 0 or HOUR_MS % slice_ms:
        raise ValueError(f"slice_ms must divide one hour (3600000 ms), got {slice_ms}")
    if len(rows) == 0:
        return []
    k = np.floor_divide(rows[time_column].astype(np.int64), slice_ms)
    if k.min() == k.max():
        return [rows]
    order = np.argsort(k, kind="stable")
    cut = np.flatnonzero(np.diff(k[order])) + 1
    return [rows[idx] for idx in np.split(order, cut)]
