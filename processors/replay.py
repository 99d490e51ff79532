"""Replay: re-run a past range of raw flows and counter samples through the live processor logic.

Three layers, each usable on its own:

* :func:`replay_batches` (pure): raw flow / counter batches in, :class:`Output`
  list out. Enriches each flow batch, splits it into shards with
  :func:`processors.logic.core.shard_of` and feeds every shard its own
  :class:`ProcessorCore`, exactly like the live workers; at the end every core
  is flushed (windows that the idle timer would close live are closed here at
  the end of input).
* Sources that turn a range into batches in one canonical order,
  :func:`archive_source` (hourly Parquet archive, hour-partition pruning) and
  :func:`kafka_source` (``flows.raw`` / ``counters.raw`` by offsets, with
  :func:`find_offset_for_time` for time ranges). Both end in
  :func:`slice_batches`: rows ordered by (event-time slice, Kafka partition,
  offset, position in message), one batch per slice. The archive keeps no
  per-row offsets, but its file keys (partition, first offset) ordered within
  one hour directory give exactly that order, and slices never straddle an
  hour. So the same records give the same batches from either source.
* Output helpers: :func:`output_records` (JSON-ready dicts),
  :func:`write_report` (``.json`` / ``.parquet``), :func:`publish` (``replay.*``
  topics).

Why slices: batches judged one arrival step at a time (see
``processors.logic.windows``) make results depend on batch boundaries only
through records that arrive after their window closed. Time slices in order
never make a record too late, so a replay reproduces the live results of
every window whose records all arrived in time live (see docs/replay.md).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from processors.logic.core import CoreConfigError, ProcessorCore, engine_config, shard_of
from processors.logic.engine import Output
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, dtype_for

__all__ = [
    "ReplayError",
    "DEFAULT_SLICE_MS",
    "replay_batches",
    "counter_shard_of",
    "slice_batches",
    "columns_from_table",
    "parse_set",
    "core_factory_from",
    "ArchiveSource",
    "archive_source",
    "KafkaSource",
    "kafka_source",
    "parse_offsets",
    "find_offset_for_time",
    "partition_end",
    "OUTPUT_TOPIC_KEYS",
    "output_records",
    "canonical",
    "write_report",
    "publish",
]

#: Event-time slice per replay batch (must divide an hour so slices stay inside one archive hour).
DEFAULT_SLICE_MS = 10_000
HOUR_MS = 3_600_000
FLOW_TIME = "time_end_ms"
COUNTER_TIME = "time_received_ms"

#: Output kind -> attribute of ``TopicNames`` whose replay twin receives it.
OUTPUT_TOPIC_KEYS = {
    "matrix": "matrix",
    "incast": "incast",
    "straggler": "straggler",
    "link": "link_health",
    "alert": "alerts",
    "pattern": "patterns",
}
#: Output kind -> Avro schema of the value.
OUTPUT_SCHEMAS = {"matrix": "matrix_cell", "incast": "incast_event", "straggler": "straggler_score",
                  "link": "link_health", "alert": "alert", "pattern": "pattern"}


class ReplayError(Exception):
    """A replay cannot run; the message is one line saying why (CLI exit 2)."""


# ----------------------------------------------------------------------------- core loop


def counter_shard_of(counters: np.ndarray, partitions: int) -> np.ndarray:
    """Shard per counter sample: CRC32 of the exporter address (all samples of an agent in one core).

    Link health keeps state per (agent, ifIndex) and shares nothing with the flow
    detectors, so which core runs it does not change any value.
    """
    n = len(counters)
    if n == 0 or partitions <= 1:
        return np.zeros(n, dtype=np.int64)
    addrs = np.ascontiguousarray(counters["exporter_addr"], dtype=np.uint8)
    uniq, inv = np.unique(addrs.view(np.dtype((np.void, 16))).ravel(), return_inverse=True)
    h = np.array([zlib.crc32(u.tobytes()) % partitions for u in uniq], dtype=np.int64)
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


def _merged(flow_batches: Iterable[np.ndarray], counter_batches: Iterable[np.ndarray]):
    """("flows"|"counters", batch) keeping each input's order, interleaved by the batches' first
    event time (flows first on ties). Values never depend on this interleaving: link health
    shares no state with the flow detectors; it only orders the output list."""
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


def replay_batches(
    flow_batches: Iterable[np.ndarray],
    counter_batches: Iterable[np.ndarray],
    core_factory: Callable[[], ProcessorCore],
    partitions: int,
    *,
    on_batch: Callable[[str, int], None] | None = None,
    cores: list[ProcessorCore] | None = None,
) -> list[Output]:
    """Run raw batches (FLOW_DTYPE / COUNTER_DTYPE) through one ProcessorCore per shard; flush at the end.

    Per flow batch, like a live worker: enrich, ``shard_of(enriched, partitions)``,
    each shard's rows (in input order) to that shard's core. Counter batches go
    to ``counter_shard_of`` (the other shards update their port state with them, without outputs). Output order: processing order, shards in number
    order within a batch, then the flushes of shard 0, 1, ... ``on_batch(kind,
    rows)`` is called after each batch (progress). Pass ``cores`` (a list of
    ``partitions`` cores) to inspect them afterwards.
    """
    partitions = int(partitions)
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    if cores is None:
        cores = [core_factory() for _ in range(partitions)]
    elif len(cores) != partitions:
        raise ValueError(f"{len(cores)} cores for {partitions} partitions")
    front = core_factory()  # enrichment only (stateless apart from its counters)
    out: list[Output] = []
    for kind, batch in _merged(flow_batches, counter_batches):
        if len(batch):
            if kind == "flows":
                enriched = front.enrich_labels(batch)  # rows without string objects: cheap to split
                for s, rows in _split(enriched, shard_of(enriched, partitions)):
                    out.extend(cores[s].process_enriched(rows))
            else:
                for s, rows in _split(batch, counter_shard_of(batch, partitions)):
                    for other in range(partitions):  # as live: every shard keeps the port state
                        if other != s:
                            cores[other].process_counters(rows, emit=False)
                    out.extend(cores[s].process_counters(rows))
        if on_batch is not None:
            on_batch(kind, len(batch))
    for core in cores:
        out.extend(core.flush())
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


# ----------------------------------------------------------------------------- Arrow -> numpy


def columns_from_table(table: pa.Table, avsc: str) -> np.ndarray:
    """Inverse of ``sinks.arrow_schema.table_from_columns``: Arrow table -> ``dtype_for(avsc)`` array.

    Extra columns (derived address text, Hive partition columns) are ignored;
    a missing Avro column raises :class:`KeyError`. Column-at-a-time, no per-row work.
    """
    dt = dtype_for(avsc)
    n = table.num_rows
    out = np.zeros(n, dtype=dt)
    if n == 0:
        return out
    names = set(table.column_names)
    for name in dt.names:
        if name not in names:
            raise KeyError(f"column {name!r} of {avsc} is missing")
        col = table.column(name)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        ft = dt[name]
        if ft.shape == (16,):
            if col.null_count:
                raise ValueError(f"column {name!r} has nulls")
            if not pa.types.is_fixed_size_binary(col.type) or col.type.byte_width != 16:
                col = col.cast(pa.binary(16))
            buf = col.buffers()[1]
            data = np.frombuffer(buf, dtype=np.uint8, count=(col.offset + n) * 16)
            out[name] = data[col.offset * 16:].reshape(n, 16)
        elif ft == np.dtype(object):
            if pa.types.is_dictionary(col.type):
                col = col.cast(pa.string())
            vals = col.to_numpy(zero_copy_only=False)
            if col.null_count:
                vals = np.where(vals == None, "", vals)  # noqa: E711
            out[name] = vals
        else:
            if col.null_count:
                raise ValueError(f"column {name!r} has nulls")
            out[name] = col.to_numpy(zero_copy_only=False).astype(ft, copy=False)
    return out


# ----------------------------------------------------------------------------- settings


def parse_set(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["incast.min_sources=3", ...]`` -> ``{"incast": {"min_sources": 3}}``; values are YAML scalars
    (``3``, ``0.5``, ``true``, ``[a, b]`` for tuples). Raises :class:`ReplayError` on a malformed item."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        m = re.fullmatch(r"\s*([A-Za-z_][\w]*)\.([A-Za-z_][\w]*)\s*=(.*)", item, flags=re.S)
        if not m:
            raise ReplayError(f"--set {item!r}: expected DETECTOR.PARAMETER=VALUE, e.g. incast.min_sources=3")
        det, param, raw = m.group(1), m.group(2), m.group(3).strip()
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            raise ReplayError(f"--set {item!r}: value {raw!r} is not a YAML scalar") from None
        if isinstance(value, dict):
            raise ReplayError(f"--set {item!r}: value must be a scalar or a list, not a mapping")
        out.setdefault(det, {})[param] = value
    return out


def core_factory_from(
    processors_settings,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    inventory=None,
    policy=None,
) -> Callable[[], ProcessorCore]:
    """A factory of identically configured cores (settings + ``--set`` overrides, inventory, policy).

    ``inventory``: an ``Inventory``, a path, or None (the settings' file, else empty).
    ``policy``: a path, a dict, or None (the settings' file, else defaults).
    Problems raise :class:`ReplayError` with one line naming the culprit.
    """
    import yaml

    from processors.logic.inventory import Inventory, InventoryError
    from processors.logic.policy import load_policy_config

    try:
        config = engine_config(processors_settings, {k: dict(v) for k, v in (overrides or {}).items()})
    except CoreConfigError as e:
        raise ReplayError(f"bad --set: {e}") from None
    inv_src = inventory if inventory is not None else processors_settings.inventory
    if inv_src is None:
        inv = Inventory.empty()
    elif isinstance(inv_src, Inventory):
        inv = inv_src
    else:
        try:
            inv = Inventory.load(inv_src)
        except InventoryError as e:
            raise ReplayError(f"inventory: {str(e).splitlines()[0]}") from None
    pol_src = policy if policy is not None else processors_settings.policy
    pol: dict | None = None
    if isinstance(pol_src, Mapping):
        pol = dict(pol_src)
    elif pol_src is not None:
        try:
            with open(pol_src) as fh:
                pol = yaml.safe_load(fh) or {}
        except OSError as e:
            raise ReplayError(f"policy file {pol_src}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ReplayError(f"policy file {pol_src}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if pol is not None:
        try:
            load_policy_config(pol)
        except Exception as e:  # pydantic ValidationError or ValueError: one line
            first = str(e).splitlines()
            raise ReplayError(f"policy: {' '.join(first[:3])}") from None

    def factory() -> ProcessorCore:
        return ProcessorCore(inv, config, pol, detector_protocols=tuple(processors_settings.detector_protocols))

    return factory


# ----------------------------------------------------------------------------- archive source


def _archive_filesystem(archive_settings):
    """(fs, root) of ``archive.url`` via ``sinks.fs``; a missing local directory is an error (not created)."""
    from sinks.fs import ArchiveUrlError, archive_filesystem

    url = archive_settings.url
    if url.startswith("file://"):
        path = os.path.abspath(url[len("file://"):] or ".")
        if not os.path.isdir(path):
            raise ReplayError(f"archive missing: no directory {path} (archive.url {url})")
    try:
        return archive_filesystem(archive_settings)
    except ArchiveUrlError as e:
        raise ReplayError(str(e)) from None


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ArchiveSource:
    """Files of flows_raw / counters_raw in [frm_ms, to_ms); iterate :meth:`flow_batches` / :meth:`counter_batches`."""

    fs: Any
    root: str
    frm_ms: int
    to_ms: int
    files: dict[str, list[str]]
    slice_ms: int = DEFAULT_SLICE_MS
    on_file: Callable[[int], None] | None = None
    rows_read: dict[str, int] = field(default_factory=lambda: {"flows_raw": 0, "counters_raw": 0})

    def total_rows(self) -> int:
        """Rows in the selected files (Parquet footers; before the [from, to) row filter)."""
        import pyarrow.parquet as pq

        n = 0
        for fl in self.files.values():
            for f in fl:
                with self.fs.open(f, "rb") as fh:
                    n += pq.ParquetFile(fh).metadata.num_rows
        return n

    def _batches(self, dataset: str, avsc: str, time_col: str) -> Iterator[np.ndarray]:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from sinks import layout

        by_hour: dict[int, list[tuple]] = {}
        for f in self.files.get(dataset, []):
            k = layout.parse_key(f)
            by_hour.setdefault(k.hour, []).append((k.partition, k.first_offset, k.last_offset, f))
        names = list(dtype_for(avsc).names)
        for hour in sorted(by_hour):
            parts = []
            for _p, _a, _b, f in sorted(by_hour[hour]):
                with self.fs.open(f, "rb") as fh:
                    t = pq.read_table(fh, columns=names)
                if self.on_file is not None:
                    self.on_file(t.num_rows)
                tc = t.column(time_col)
                keep = pc.and_(pc.greater_equal(tc, self.frm_ms), pc.less(tc, self.to_ms))
                t = t.filter(keep)
                if t.num_rows:
                    parts.append(columns_from_table(t, avsc))
            if parts:
                rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
                self.rows_read[dataset] += len(rows)
                yield from slice_batches(rows, time_col, self.slice_ms)

    def flow_batches(self) -> Iterator[np.ndarray]:
        return self._batches("flows_raw", "flow_record", FLOW_TIME)

    def counter_batches(self) -> Iterator[np.ndarray]:
        return self._batches("counters_raw", "counter_sample", COUNTER_TIME)


def archive_source(fs, root: str, frm, to, *, slice_ms: int = DEFAULT_SLICE_MS) -> ArchiveSource:
    """Locate the flows_raw / counters_raw files of [frm, to) (listing only the days in range).

    Raises :class:`ReplayError` for an empty or inverted range, a missing archive,
    no raw datasets, or no data in range.
    """
    from sinks.query import ArchiveError, ArchiveQuery, DatasetMissing, parse_time

    if frm is None or to is None:
        raise ReplayError("an archive replay needs --from and --to")
    try:
        lo, hi = parse_time(frm), parse_time(to)
    except (TypeError, ValueError) as e:
        raise ReplayError(str(e)) from None
    if hi <= lo:
        raise ReplayError(f"empty time range: from {_iso(lo)} is not before to {_iso(hi)}")
    try:
        q = ArchiveQuery(fs, root)
    except ArchiveError as e:
        raise ReplayError(f"archive missing: {e}") from None
    raw = [d for d in ("flows_raw", "counters_raw") if d in q.datasets]
    if not raw:
        raise ReplayError(f"archive missing or empty: {q.root!r} has no flows_raw or counters_raw data "
                          f"(present: {', '.join(q.datasets) or 'none'})")
    files: dict[str, list[str]] = {}
    for d in raw:
        try:
            files[d] = q.files(d, lo, hi)
        except DatasetMissing:
            files[d] = []
    if not any(files.values()):
        spans = []
        for d in raw:
            have = q.available(d)
            spans.append(f"{d}: {have[0]} .. {have[1]}" if have else f"{d}: nothing")
        raise ReplayError(f"no raw data between {_iso(lo)} and {_iso(hi)} (the archive has {'; '.join(spans)})")
    return ArchiveSource(q.fs, q.root, lo, hi, files, slice_ms)


# ----------------------------------------------------------------------------- kafka source


def _fetch_one(consumer, tp, offset: int, timeout_s: float):
    """First message at or after ``offset`` of ``tp`` (None at the end of the partition or on timeout)."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(tp.topic, tp.partition, int(offset))])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = consumer.poll(min(0.5, max(0.01, deadline - time.monotonic())))
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                return None
            raise ReplayError(f"{tp.topic}[{tp.partition}] @ {offset}: {m.error().str()}")
        if m.topic() == tp.topic and m.partition() == tp.partition and m.offset() >= offset:
            return m
    return None


def find_offset_for_time(consumer, tp, ts_ms: int, lo: int, hi: int, *, timeout_s: float = 5.0) -> int:
    """First offset in [lo, hi] whose record timestamp is >= ``ts_ms`` (``hi`` if none), by binary search.

    Fetches single messages (the embedded broker's ``offsets_for_times`` always
    answers 0). An offset with no record at or after it counts as "later".
    Assumes record timestamps do not decrease along the partition (ingest sets
    them when it publishes); ``hi`` is normally the end found by :func:`partition_end`.
    """
    lo, hi = int(lo), int(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        m = _fetch_one(consumer, tp, mid, timeout_s)
        if m is None or m.timestamp()[1] >= ts_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def partition_end(consumer, tp, *, timeout_s: float = 5.0) -> tuple[int, int]:
    """(low offset, true end = last offset + 1) of ``tp``, found by reading.

    The reported high watermark is used only as a hint of where to start reading
    (on the embedded broker it lags the real end); the end is one past the last
    offset actually read.
    """
    low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    low = max(0, int(low))
    start = max(low, int(high) - 1)
    end = start
    for m in _poll_from(consumer, tp, start, timeout_s):
        end = max(end, m.offset() + 1)
    return low, end


def _poll_from(consumer, tp, start: int, idle_s: float):
    """Messages of one partition from ``start`` until the end (EOF) or ``idle_s`` without a message."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
    idle_until = time.monotonic() + idle_s
    while True:
        m = consumer.poll(0.2)
        if m is None:
            if time.monotonic() >= idle_until:
                return
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                return
            raise ReplayError(f"{tp.topic}[{tp.partition}]: {m.error().str()}")
        idle_until = time.monotonic() + idle_s
        yield m


_OFFSET_RE = re.compile(r"(?:(flows|counters):)?(\d+):(\d+)-(\d*)")


def parse_offsets(text: str) -> dict[tuple[str, int], tuple[int, int | None]]:
    """``"0:100-200,1:0-50,counters:0:10-"`` -> {(stream, partition): (start, end or None)}.

    ``stream`` is ``flows`` (default) or ``counters``; END is exclusive; an empty
    END means "to the end of the partition".
    """
    out: dict[tuple[str, int], tuple[int, int | None]] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        m = _OFFSET_RE.fullmatch(part)
        if not m:
            raise ReplayError(f"--offsets {part!r}: expected [flows:|counters:]PARTITION:START-END (END exclusive)")
        stream, p, a, b = m.group(1) or "flows", int(m.group(2)), int(m.group(3)), m.group(4)
        end = int(b) if b else None
        if end is not None and end <= a:
            raise ReplayError(f"--offsets {part!r}: empty offset range (END is exclusive)")
        if (stream, p) in out:
            raise ReplayError(f"--offsets: {stream} partition {p} given twice")
        out[(stream, p)] = (a, end)
    if not out:
        raise ReplayError("--offsets is empty")
    return out


@dataclass
class KafkaSource:
    """Raw batches read from Kafka; per (stream, partition) the offsets actually read."""

    flows: np.ndarray
    counters: np.ndarray
    read: dict[tuple[str, int], tuple[int, int, int]]  # (first, last, messages)
    slice_ms: int = DEFAULT_SLICE_MS

    def flow_batches(self) -> list[np.ndarray]:
        return slice_batches(self.flows, FLOW_TIME, self.slice_ms)

    def counter_batches(self) -> list[np.ndarray]:
        return slice_batches(self.counters, COUNTER_TIME, self.slice_ms)


def _read_range(consumer, tp, start: int, end: int, timeout_s: float, on_message=None) -> list:
    """Messages of ``tp`` with start <= offset < end, in offset order, counted as read."""
    if end <= start:
        return []
    out = []
    for m in _poll_from(consumer, tp, start, timeout_s):
        if m.offset() >= end:
            break
        if m.offset() >= start:
            out.append(m)
            if on_message is not None:
                on_message()
        if m.offset() >= end - 1:
            break
    return out


def kafka_source(
    kafka_settings,
    *,
    offsets: Mapping[tuple[str, int], tuple[int, int | None]] | None = None,
    frm=None,
    to=None,
    slice_ms: int = DEFAULT_SLICE_MS,
    timeout_s: float = 5.0,
    grace_ms: int = 30_000,
    on_message: Callable[[], None] | None = None,
    consumer=None,
) -> KafkaSource:
    """Read ``flows.raw`` / ``counters.raw`` by explicit offsets or by a time range.

    With ``frm``/``to`` and no offsets, every partition of both topics is searched
    with :func:`find_offset_for_time` for [frm - grace, to + grace) on record
    timestamps (publish times: a message published after ``to`` can still hold
    flows that ended before it; use the allowed lateness), then rows are kept only
    when their event time is in [frm, to) (as the archive does).
    Without ``frm``/``to`` every row of the offset ranges is replayed.
    """
    from confluent_kafka import Consumer, TopicPartition

    from schemas import codec
    from sinks.query import parse_time

    if offsets is None and (frm is None or to is None):
        raise ReplayError("a Kafka replay needs --offsets or both --from and --to")
    lo_ms = hi_ms = None
    if frm is not None or to is not None:
        if frm is None or to is None:
            raise ReplayError("give both --from and --to")
        try:
            lo_ms, hi_ms = parse_time(frm), parse_time(to)
        except (TypeError, ValueError) as e:
            raise ReplayError(str(e)) from None
        if hi_ms <= lo_ms:
            raise ReplayError(f"empty time range: from {_iso(lo_ms)} is not before to {_iso(hi_ms)}")
    topics = {"flows": kafka_settings.topics.flows_raw, "counters": kafka_settings.topics.counters_raw}
    own = consumer is None
    if own:
        conf = kafka_settings.client_config()
        conf.update({"group.id": f"{kafka_settings.client_id}-replay", "enable.auto.commit": False,
                     "auto.offset.reset": "error", "enable.partition.eof": True,
                     "fetch.wait.max.ms": 10,  # single-message fetches after assign() otherwise wait 0.5 s
                     "session.timeout.ms": kafka_settings.session_timeout_ms})
        consumer = Consumer(conf)
    try:
        md = consumer.list_topics(timeout=timeout_s)
        nparts = {}
        for s, t in topics.items():
            tm = md.topics.get(t)
            nparts[s] = sorted(tm.partitions) if tm is not None and tm.error is None else []
        if offsets is None:
            if not any(nparts.values()):
                raise ReplayError(f"topics {topics['flows']} and {topics['counters']} do not exist on "
                                  f"{kafka_settings.bootstrap_servers}")
            ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
            for s, plist in nparts.items():
                for p in plist:
                    tp = TopicPartition(topics[s], p)
                    low, end = partition_end(consumer, tp, timeout_s=timeout_s)
                    a = find_offset_for_time(consumer, tp, lo_ms - grace_ms, low, end, timeout_s=timeout_s)
                    b = find_offset_for_time(consumer, tp, hi_ms + grace_ms, a, end, timeout_s=timeout_s)
                    if b > a:
                        ranges[(s, p)] = (a, b)
            if not ranges:
                raise ReplayError(f"no records with timestamps between {_iso(lo_ms)} and {_iso(hi_ms)} in "
                                  f"{topics['flows']} / {topics['counters']}")
        else:
            ranges = dict(offsets)
            for (s, p) in ranges:
                if p not in nparts[s]:
                    raise ReplayError(f"{topics[s]} has no partition {p} "
                                      f"(partitions: {', '.join(map(str, nparts[s])) or 'none, topic missing'})")
        parts: dict[str, list[np.ndarray]] = {"flows": [], "counters": []}
        read: dict[tuple[str, int], tuple[int, int, int]] = {}
        for (s, p) in sorted(ranges, key=lambda k: (k[0] != "flows", k[1])):
            a, b = ranges[(s, p)]
            tp = TopicPartition(topics[s], p)
            if b is None:
                _low, b = partition_end(consumer, tp, timeout_s=timeout_s)
            msgs = _read_range(consumer, tp, a, b, timeout_s, on_message)
            if msgs:
                read[(s, p)] = (msgs[0].offset(), msgs[-1].offset(), len(msgs))
            want = "flow_batch" if s == "flows" else "counter_batch"
            for m in msgs:
                try:
                    parts[s].append(codec.decode_batch(m.value(), expect=want))
                except codec.CodecError as e:
                    raise ReplayError(f"{topics[s]}[{p}] offset {m.offset()}: {e}") from None
    finally:
        if own:
            consumer.close()
    if not read:
        raise ReplayError("no records in the requested offset ranges")
    flows = np.concatenate(parts["flows"]) if parts["flows"] else np.zeros(0, dtype=FLOW_DTYPE)
    counters = np.concatenate(parts["counters"]) if parts["counters"] else np.zeros(0, dtype=COUNTER_DTYPE)
    if lo_ms is not None:
        ft, ct = flows[FLOW_TIME], counters[COUNTER_TIME]
        flows = flows[(ft >= lo_ms) & (ft < hi_ms)]
        counters = counters[(ct >= lo_ms) & (ct < hi_ms)]
    return KafkaSource(flows, counters, read, slice_ms)


# ----------------------------------------------------------------------------- outputs


def _plain(v):
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytes):
        return v.hex()
    return v


def output_records(outputs: Iterable[Output]) -> list[dict]:
    """``[{"kind", "key", "value"}]`` with plain JSON-compatible values."""
    return [{"kind": o.kind, "key": o.key, "value": _plain(o.value)} for o in outputs]


def canonical(outputs: Iterable[Output]) -> list[str]:
    """Outputs as sorted JSON lines: compares two runs regardless of output order."""
    return sorted(json.dumps(r, sort_keys=True) for r in output_records(outputs))


def write_report(outputs: Sequence[Output], path: str, meta: Mapping[str, Any] | None = None) -> str:
    """Write every output (kind, key, value) to ``path``: ``.json`` (object with ``replay`` metadata and
    ``outputs``) or ``.parquet`` (columns seq, kind, key, value = JSON text; metadata in the schema)."""
    recs = output_records(outputs)
    low = path.lower()
    if low.endswith(".json"):
        with open(path, "w") as fh:
            json.dump({"replay": dict(meta or {}), "outputs": recs}, fh, indent=1, sort_keys=False)
            fh.write("\n")
        return path
    if low.endswith(".parquet"):
        import pyarrow.parquet as pq

        t = pa.table({
            "seq": pa.array(range(len(recs)), type=pa.int64()),
            "kind": pa.array([r["kind"] for r in recs], type=pa.string()),
            "key": pa.array([r["key"] for r in recs], type=pa.string()),
            "value": pa.array([json.dumps(r["value"], sort_keys=True) for r in recs], type=pa.string()),
        })
        t = t.replace_schema_metadata({b"fabricflow.replay": json.dumps(dict(meta or {})).encode()})
        pq.write_table(t, path, compression="zstd")
        return path
    raise ReplayError(f"--report {path}: use a .json or .parquet file name")


def replay_topic_names(kafka_settings) -> dict[str, str]:
    """Output kind -> replay topic name (``replay_prefix`` + live topic)."""
    t = kafka_settings.topics
    return {kind: t.replay_prefix + getattr(t, key) for kind, key in OUTPUT_TOPIC_KEYS.items()}


def encode_output(o: Output) -> bytes:
    """Message value of one output: Avro single-object encoding (JSON for a kind without a schema)."""
    from schemas import codec

    schema = OUTPUT_SCHEMAS.get(o.kind)
    if schema is None:
        return json.dumps(_plain(o.value), sort_keys=True).encode()
    return codec.encode_record(schema, o.value)


def publish(outputs: Sequence[Output], kafka_settings, *, producer=None, timeout_s: float = 30.0) -> dict[str, int]:
    """Create the ``replay.*`` topics (idempotent) and produce every output to them; returns counts per topic.

    Keys are the outputs' keys; ``partitioner=murmur2_random`` as for the live topics.
    """
    from confluent_kafka import Producer

    from fabricflow.topics import TopicSpec, ensure_topics, topic_specs

    names = replay_topic_names(kafka_settings)
    live = {s.key: s for s in topic_specs(kafka_settings)}
    specs = [TopicSpec("replay_" + key, names[kind], live[key].partitions, dict(live[key].config),
                       live[key].schema, "replay of " + live[key].name)
             for kind, key in OUTPUT_TOPIC_KEYS.items()]
    ensure_topics(kafka_settings, specs)
    own = producer is None
    if own:
        conf = kafka_settings.client_config()
        conf.update({"partitioner": "murmur2_random", "linger.ms": 20, "enable.idempotence": True})
        producer = Producer(conf)
    counts: dict[str, int] = {}
    errors: list[str] = []

    def done(err, _msg):
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    for o in outputs:
        topic = names[o.kind]
        while True:
            try:
                producer.produce(topic, key=o.key.encode(), value=encode_output(o), on_delivery=done)
                break
            except BufferError:
                producer.poll(0.1)
        counts[topic] = counts.get(topic, 0) + 1
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left or errors:
        raise ReplayError(f"publishing to replay topics failed: {left} undelivered"
                          + (f"; {errors[0]}" if errors else ""))
    return counts
