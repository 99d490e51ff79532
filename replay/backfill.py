"""``fabricflow backfill``: a capture of export datagrams -> the archive, through the live pipeline's own code.

A pcap/pcapng of what collectors receive (a tcpdump of their ports, ``ingest.capture_path``, or ``fabricflow
simulate --pcap F --no-send``) is read in capture order, each datagram stamped with its capture time as its
receive time, and goes through the same objects the live services run, with the Kafka topics between them in
memory (:mod:`replay.memlog`) and the capture's time as every clock:

    ingest        IngestPipeline (allowlist, decoders, batching, quality) -> KafkaSink  -> flows.raw / counters.raw
                  MarkReceiver (mark lines: datagrams starting with "{")   -> KafkaSink  -> steps / changes
    processors    per raw message, as ``prepare`` does: enrich -> OutputPublisher.enriched -> flows.enriched;
                  shard_of -> one ProcessorCore per shard (:class:`replay.core.ShardedCores`) -> outputs
    archive       ArchiveService.handle / flush (the sink's decoding, hourly buffers, Parquet writer, rollups,
                  hourly summaries)

Messages get the partition librdkafka's ``murmur2_random`` gives their key and offsets from a base derived from the
capture (:func:`capture_base_offset`): file keys never collide with a live sink's, and a second backfill of the
same capture finds its files already written (the sink's own de-duplication) unless ``replace`` removes them
first. No broker, no wall clock: the same capture and settings give the same archive. What differs from a live
run, and why: docs/closed-loop.md, "Backfill".
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fabricflow import streams
from ingest.marks import MarkReceiver
from ingest.metrics import IngestMetrics
from ingest.pcapread import PcapError, PcapStats, read_udp
from ingest.pipeline import IngestPipeline
from ingest.publish import KafkaSink
from processors.worker.publish import OutputPublisher
from schemas import codec
from schemas.marks import looks_like_mark

from .core import ReplayError, ShardedCores
from .memlog import MemoryLog, MemoryProducer, OfflineConsumer

__all__ = ["Backfill", "BackfillStats", "capture_base_offset", "OFFSET_SPAN", "open_archive_for_writing",
           "remove_previous"]

#: Datagrams handled together (``IngestPipeline.handle_many``), then batches due are published and moved through
#: the processors and the archive: up to this many, or this much capture time. Larger than the live receive loop's
#: groups (5 ms): the same rows, far fewer messages (docs/closed-loop.md, "Backfill", says why nothing else changes).
GROUP_MAX = 4096
GROUP_S = 1.0
OFFSET_SPAN = 10**12  # offsets one backfill may use per partition
_HASH_BYTES = 1 << 20


def capture_base_offset(path: str) -> int:
    """First offset of every partition for a backfill of ``path``: from a SHA-256 of its first MiB and size, in
    [10^18, 9 * 10^18) and a multiple of :data:`OFFSET_SPAN` (far above any live partition's offsets)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(_HASH_BYTES))
    h.update(str(os.path.getsize(path)).encode())
    return (int(h.hexdigest(), 16) % 8_000_000 + 1_000_000) * OFFSET_SPAN


@dataclass
class BackfillStats:
    """What a backfill read and wrote (the summary line and ``--format json``)."""

    capture: str = ""
    file_bytes: int = 0
    bytes_read: int = 0
    datagrams: int = 0  # UDP datagrams in the capture
    mark_datagrams: int = 0
    flow_records: int = 0
    counter_samples: int = 0
    discard_notifications: int = 0  # sFlow dropped-packet notifications (the drop reasons of link events)
    first_ms: int | None = None
    last_ms: int | None = None
    messages: dict[str, int] = field(default_factory=dict)  # topic -> messages produced
    files_written: int = 0
    rows_written: int = 0
    wall_s: float = 0.0
    base_offset: int = 0
    pcap: PcapStats = field(default_factory=PcapStats)

    @property
    def fraction(self) -> float:
        return self.bytes_read / self.file_bytes if self.file_bytes else 1.0

    def line(self) -> str:
        rate = self.flow_records / self.wall_s if self.wall_s > 0 else 0.0
        return (f"{self.datagrams} datagrams ({self.mark_datagrams} marks), {self.flow_records} flow records, "
                f"{self.counter_samples} counter samples in {self.wall_s:.1f} s ({rate:,.0f} records/s); "
                f"{self.files_written} files, {self.rows_written} rows written")


class _Clock:
    """The capture's time (seconds): never goes back, so batching and quality windows see time advance."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, t: float) -> None:
        if t > self.now:
            self.now = t


class Backfill:
    """One backfill run. ``fs``/``root``: the archive (default ``archive.url``). ``core_factory``/``partitions``:
    the processors' cores and shard count (default: the settings', as ``fabricflow replay`` builds them).
    ``on_progress(stats)`` is called about every ``progress_s`` wall seconds while reading."""

    def __init__(self, settings, capture: str, *, fs=None, root: str | None = None,
                 core_factory: Callable | None = None, partitions: int | None = None,
                 on_progress: Callable[[BackfillStats], None] | None = None, progress_s: float = 1.0):
        from sinks.archive.service import ArchiveService

        from .config import core_factory_from

        if not os.path.isfile(capture):
            raise ReplayError(f"no capture file {capture}")
        self.settings = settings
        self.capture = capture
        self.stats = BackfillStats(capture=capture, file_bytes=os.path.getsize(capture),
                                   base_offset=capture_base_offset(capture))
        self.on_progress = on_progress
        self.progress_s = progress_s
        self.clock = _Clock()
        k = settings.kafka
        self.log = MemoryLog(lambda topic: self._partitions.get(topic, k.partitions), self.stats.base_offset)
        self._partitions = {streams.topic_of(k, s): s.partitions or k.partitions for s in streams.STREAMS}
        self.topics = {s.name: streams.topic_of(k, s) for s in streams.STREAMS}
        cfg = settings.ingest
        self.metrics = IngestMetrics()
        self.sink = KafkaSink(k, cfg.producer, self.metrics, producer_factory=lambda _conf: MemoryProducer(self.log))
        self.pipeline = IngestPipeline(cfg.model_copy(update={"template_path": None}), self.sink, self.metrics,
                                       listener="capture", clock=self.clock)
        self.marks = MarkReceiver(self.sink, self.metrics.registry, allowlist=cfg.marks_allowlist,
                                  max_per_s=cfg.marks_max_per_s, max_per_source_per_s=cfg.marks_max_per_source_per_s)
        self.publisher = OutputPublisher(settings, producer=MemoryProducer(self.log))
        factory = core_factory or core_factory_from(settings.processors)
        self.cores = ShardedCores(factory, partitions or k.partitions)
        if fs is None and root is None:
            fs, root = open_archive_for_writing(settings.archive)
        elif fs is None:
            import fsspec

            os.makedirs(root, exist_ok=True)
            fs = fsspec.filesystem("file")
        self.fs, self.root = fs, root
        self.archive = ArchiveService(settings, fs=fs, root=root, metrics_port=0, write_queue_rows=0,
                                      clock=self.clock)
        self.archive.consumer = OfflineConsumer()
        self.archive.summaries.producer = MemoryProducer(self.log)

    # ------------------------------------------------------------------ run

    def run(self) -> BackfillStats:
        st = self.stats
        t0 = time.monotonic()
        last_report = t0
        held, held_src, held_ms = [], [], []
        held_since = 0.0
        try:
            with open(self.capture, "rb") as fh:
                for pkt in read_udp(fh, st.pcap):
                    st.datagrams += 1
                    ms = int(round(pkt.timestamp_s * 1000))
                    st.first_ms = ms if st.first_ms is None else min(st.first_ms, ms)
                    st.last_ms = ms if st.last_ms is None else max(st.last_ms, ms)
                    now = ms / 1000.0
                    if held and (now - held_since >= GROUP_S or len(held) >= GROUP_MAX):
                        self._handle(held, held_src, held_ms)
                        held, held_src, held_ms = [], [], []
                    self.clock.advance(now)
                    if looks_like_mark(pkt.payload):
                        st.mark_datagrams += 1
                        self.marks.handle(pkt.payload, pkt.src_ip, ms)
                        continue
                    if not held:
                        held_since = now
                    held.append(pkt.payload)
                    held_src.append(pkt.src_ip)
                    held_ms.append(ms)
                    if self.on_progress is not None and time.monotonic() - last_report >= self.progress_s:
                        last_report = time.monotonic()
                        st.bytes_read = fh.tell()
                        st.wall_s = last_report - t0
                        self.on_progress(st)
                st.bytes_read = fh.tell()
        except PcapError as e:
            raise ReplayError(f"cannot read {self.capture}: {e}") from None
        if held:
            self._handle(held, held_src, held_ms)
        self.pipeline.close()
        self._drain()
        self.publisher.outputs(self.cores.flush())  # the end of the input closes every open window
        self._drain()
        self._finish_archive()
        st.wall_s = time.monotonic() - t0
        st.messages = dict(self.log.produced)
        st.files_written = self.archive.report["files_written"]
        st.rows_written = self.archive.report["rows_written"]
        if self.on_progress is not None:
            self.on_progress(st)
        return st

    def _handle(self, held, held_src, held_ms) -> None:
        self.pipeline.handle_many(held, held_src, held_ms)
        self.pipeline.maybe_flush()
        self._drain()

    # ------------------------------------------------------------------ processors and archive

    def _drain(self) -> None:
        """Move everything produced so far along: raw messages through the processors, archived topics into the
        archive sink (whose outputs, summaries, come back here), until nothing new is produced."""
        t = self.topics
        archived = self.archive.routes
        while len(self.log):
            msgs = self.log.take()
            for m in msgs:  # notifications first: the counter samples published with them read them (as live)
                if m.topic() == t["discards_raw"]:
                    rows = codec.decode_batch(m.value(), expect="discard_batch")
                    self.stats.discard_notifications += len(rows)
                    self.cores.discards(rows)
            for m in msgs:
                topic = m.topic()
                if topic == t["flows_raw"]:
                    self._flows(m)
                elif topic == t["counters_raw"]:
                    rows = codec.decode_batch(m.value(), expect="counter_batch")
                    self.stats.counter_samples += len(rows)
                    self.publisher.outputs(self.cores.counters(rows))
            self.archive.handle([m for m in msgs if m.topic() in archived])
            self.archive.flush()

    def _flows(self, m) -> None:
        """One raw flow message, as ``prepare`` and ``detect`` handle it (processors/worker/prepare.py)."""
        spans: dict = {}
        value = m.value()
        rows = codec.decode_batch(value, spans=spans)
        self.stats.flow_records += len(rows)
        enriched = self.cores.enrich(rows)
        coded = enriched.label_codes()
        self.publisher.enriched(m.key() or b"", enriched, self.settings.processors.enriched_max_records,
                                codec.coded_rows(coded, slice(0, len(rows))), (value, spans))
        self.publisher.outputs(self.cores.flows(enriched))

    def _finish_archive(self) -> None:
        """The input is complete: every hour's summary is due, every buffer is written."""
        svc = self.archive
        if self.stats.last_ms is not None:
            end = self.stats.last_ms + svc.sink.buffer_kwargs.get("grace_ms", 0) + 2 * 3_600_000
            for part in range(self._partitions.get(self.topics["flows_enriched"], 1)):
                svc.summaries.enriched_watermark(part, end)
        for _ in range(3):  # summaries produced by a flush are archived by the next one
            svc.flush(force=True)
            if not len(self.log):
                break
            self._drain()
        svc.drain()
        left = sum(b.buffered_rows for b in svc.sink.buffers.values())
        if left or svc.ledger.retry_at > 0:
            raise ReplayError(f"writing the archive failed ({left} rows not written); see the messages above")
        svc.summaries.close()


def remove_previous(fs, root: str, base_offset: int) -> int:
    """Delete the files an earlier backfill of the same capture wrote (their offsets lie in [base_offset,
    base_offset + OFFSET_SPAN)), in every dataset; returns how many. Files of live sinks are never touched."""
    from sinks.archive import layout

    try:
        found = fs.find(root)
    except FileNotFoundError:
        return 0
    gone = 0
    for f in found:
        k = layout.parse_key(f)
        if k is not None and base_offset <= k.first_offset < base_offset + OFFSET_SPAN:
            fs.rm(f)
            gone += 1
    return gone


def open_archive_for_writing(archive_settings):
    """(fs, root) of ``archive.url``; a local directory is created."""
    from sinks.archive.fs import ArchiveUrlError, archive_filesystem

    url = archive_settings.url
    if url.startswith("file://") or "://" not in url:
        path = os.path.abspath(url[len("file://"):] if url.startswith("file://") else url)
        os.makedirs(path, exist_ok=True)
    try:
        return archive_filesystem(archive_settings)
    except ArchiveUrlError as e:
        raise ReplayError(str(e)) from None
