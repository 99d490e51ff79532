"""The fuzz targets: one check per decoder entry point; a check raises on a finding and returns otherwise.

Each target's property (docs/fuzzing.md):

* only the decoder's error type escapes (``DecodeError`` with a known protocol and reason and an
  offset inside the datagram; ``CodecError`` for Kafka messages); anything else is a crash;
* where two implementations exist they agree, byte for byte: the compiled sFlow decoder (every entry
  point) against the plain-Python reference (``ingest.decode.reference``); the batched NetFlow v9/IPFIX
  path (``decode_into`` + ``FlowBatch``, flushed where the input says) against per-datagram ``decode``;
  ``IngestPipeline.handle_many`` against ``handle`` one datagram at a time; the codec's compiled column
  walk against its plain-Python reference (``schemas.reference.batch``);
* cheap invariants of every result (row dtypes, sampling rate >= 1, NetFlow v5 rows equal to the
  records read with ``struct``).

Hangs and memory are bounded by the runner (libFuzzer ``-timeout`` and ``-rss_limit_mb``). The checks
call public entry points only. The compiled code (Cython) gives atheris no coverage; the references and
the Python around the compiled calls are instrumented, so inputs are steered by the reference's branches.
"""

from __future__ import annotations

import functools
import logging
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ingest.decode import REASONS, DecodeError, TemplateCache, decode, decode_into
from ingest.decode.batch import FlowBatch, concat_rows
from ingest.decode.reference.sflow import decode_sflow as decode_sflow_reference
from ingest.decode.sflow import decode_sflow, decode_sflow_group, decode_sflow_many
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE

from . import framing

PROTOCOLS = {"sflow5", "netflow5", "netflow9", "ipfix", "unknown"}
SAMPLING_OVERRIDES = {framing.EXPORTERS[1]: 7}  # exporter 1 has a configured rate for records without one


class Finding(AssertionError):
    """A target's property does not hold."""


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise Finding(what)


def _check_error(e: DecodeError, payload: bytes) -> DecodeError:
    _require(e.protocol in PROTOCOLS, f"DecodeError protocol {e.protocol!r}")
    _require(e.reason in REASONS, f"DecodeError reason {e.reason!r}")
    _require(0 <= e.offset <= len(payload), f"DecodeError offset {e.offset} outside 0..{len(payload)}")
    return e


def outcome(fn: Callable, payload: bytes, *args, **kw):
    """``fn(payload, ...)``'s result or its (checked) ``DecodeError``; any other exception propagates."""
    try:
        return fn(payload, *args, **kw)
    except DecodeError as e:
        return _check_error(e, payload)


def _check_result(res) -> None:
    _require(res.flows.dtype == FLOW_DTYPE, "flow rows have the wrong dtype")
    _require(res.counters.dtype == COUNTER_DTYPE, "counter rows have the wrong dtype")
    if len(res.flows):
        _require(bool((res.flows["sampling_rate"] >= 1).all()), "a flow row with sampling_rate < 1")
        _require(bool((res.flows["bytes_est"] >= 0).all()), "a flow row with negative bytes_est")
    _require(all(isinstance(k, str) and v > 0 for k, v in res.problems.items()), f"bad problems {res.problems}")
    if res.samples is not None:
        _require(len(res.samples) == len(res.flows), "sFlow samples not aligned with the flow rows")


def same(got, ref, what: str, flows: bool = True) -> None:
    """Two outcomes (result or DecodeError) are the same, byte for byte (``flows=False``: but the flow rows)."""
    if isinstance(ref, DecodeError) or isinstance(got, DecodeError):
        _require(isinstance(ref, DecodeError) and isinstance(got, DecodeError),
                 f"{what}: {got!r} where the reference gives {ref!r}")
        _require((got.protocol, got.reason, got.offset, got.detail) == (ref.protocol, ref.reason, ref.offset, ref.detail),
                 f"{what}: {got} where the reference raises {ref}")
        return
    _require(not flows or got.flows.tobytes() == ref.flows.tobytes(), f"{what}: flow rows differ")
    _require(got.counters.tobytes() == ref.counters.tobytes(), f"{what}: counter rows differ")
    _require(got.discards.tobytes() == ref.discards.tobytes(), f"{what}: discard rows differ")
    _require(got.header == ref.header, f"{what}: header {got.header} != {ref.header}")
    _require(dict(got.problems) == dict(ref.problems), f"{what}: problems {dict(got.problems)} != {dict(ref.problems)}")
    _require((got.templates_learned, got.templates_withdrawn) == (ref.templates_learned, ref.templates_withdrawn),
             f"{what}: template counts differ")
    gs = None if got.samples is None else got.samples.tobytes()
    rs = None if ref.samples is None else ref.samples.tobytes()
    _require(gs == rs, f"{what}: sFlow sample facts differ")


# ---- sFlow ----------------------------------------------------------------------------------------


def check_sflow(data: bytes) -> None:
    """sFlow v5: every entry point of the compiled decoder (one datagram, many, the pipeline's group, the
    dispatcher) equals the plain-Python reference, datagram by datagram."""
    dgs = framing.datagrams(data)
    if not dgs:
        return
    cache = TemplateCache(sampling_overrides=SAMPLING_OVERRIDES)
    refs = []
    for d in dgs:
        ref = outcome(decode_sflow_reference, d.payload, d.exporter, d.received_ms, cache)
        if not isinstance(ref, DecodeError):
            _check_result(ref)
        refs.append(ref)
        same(outcome(decode_sflow, d.payload, d.exporter, d.received_ms, cache), ref, "decode_sflow")
        if d.payload[:4] == b"\x00\x00\x00\x05":
            same(outcome(decode, d.payload, d.exporter, d.received_ms, cache), ref, "decode")
    payloads = [d.payload for d in dgs]
    exporters = [d.exporter for d in dgs]
    times = [d.received_ms for d in dgs]
    many = decode_sflow_many(payloads, exporters, times, cache)
    _require(len(many) == len(dgs), "decode_sflow_many returned the wrong number of results")
    for i, (got, ref) in enumerate(zip(many, refs)):
        same(got, ref, f"decode_sflow_many datagram {i}")
    group = decode_sflow_group(payloads, exporters, times, cache)
    for i, ref in enumerate(refs):
        if group.plain[i]:  # the pipeline reads a plain datagram's rows from the group's arrays
            _require(not isinstance(ref, DecodeError) and not len(ref.counters) and not ref.problems,
                     f"decode_sflow_group datagram {i}: plain where the reference gives {ref!r}")
        same(group.result(i), ref, f"decode_sflow_group datagram {i}")


# ---- NetFlow v5 -----------------------------------------------------------------------------------

_V5_REC = struct.Struct("!4s4s4sHHIIIIHHxBBBHHBBxx")


def check_netflow5(data: bytes) -> None:
    """NetFlow v5: only DecodeError; decoded rows equal the records read with struct; decode_into agrees."""
    cache = TemplateCache(sampling_overrides=SAMPLING_OVERRIDES)
    cache_into = TemplateCache(sampling_overrides=SAMPLING_OVERRIDES)
    for d in framing.datagrams(data):
        res = outcome(decode, d.payload, d.exporter, d.received_ms, cache)
        into = outcome(decode_into, d.payload, d.exporter, d.received_ms, cache_into, FlowBatch())
        same(into, res, "decode_into", flows=d.payload[:2] not in (b"\x00\x09", b"\x00\x0a"))
        if isinstance(res, DecodeError) or res.header is None or res.header.protocol != "netflow5":
            continue
        _check_result(res)
        count = struct.unpack_from("!H", d.payload, 2)[0]
        _require(len(res.flows) == count, f"{len(res.flows)} rows for count {count}")
        for i, row in enumerate(res.flows[:64]):
            src, dst, _nh, in_if, out_if, pkts, octets, _first, _last, sp, dp, flags, proto, tos, *_ = \
                _V5_REC.unpack_from(d.payload, 24 + 48 * i)
            got = (bytes(row["src_addr"][12:]), bytes(row["dst_addr"][12:]), int(row["in_if"]), int(row["out_if"]),
                   int(row["packets"]), int(row["bytes"]), int(row["src_port"]), int(row["dst_port"]),
                   int(row["tcp_flags"]), int(row["ip_protocol"]), int(row["tos"]))
            _require(got == (src, dst, in_if, out_if, pkts, octets, sp, dp, flags, proto, tos), f"v5 record {i} differs")


# ---- NetFlow v9 / IPFIX (template state, batched path) --------------------------------------------


def check_netflow_batched(data: bytes) -> None:
    """NetFlow v9 / IPFIX with template state: ``decode_into`` + ``FlowBatch`` (flushed where the input
    says) gives the same rows per exporter and the same per-datagram outcome as ``decode``."""
    ref_cache = TemplateCache(sampling_overrides=SAMPLING_OVERRIDES)
    bat_cache = TemplateCache(sampling_overrides=SAMPLING_OVERRIDES)
    ref_rows: dict[str, list] = {}
    batches: dict[str, FlowBatch] = {}

    def flush() -> None:
        for exporter, batch in batches.items():
            want = ref_rows.pop(exporter, [])
            got = batch.decode()
            _require(not batch.failed_records, f"FlowBatch could not decode {batch.failed_records}")
            _require(len(got) == batch.records, f"FlowBatch gave {len(got)} rows for {batch.records} records")
            _require(got.dtype == FLOW_DTYPE, "FlowBatch rows have the wrong dtype")
            ref = concat_rows(want) if want else np.zeros(0, dtype=FLOW_DTYPE)
            _require(got.tobytes() == ref.tobytes(), f"batched rows of {exporter} differ from decode()")
        _require(not any(ref_rows.values()), "decode() gave rows the batched path did not")
        batches.clear()
        ref_rows.clear()

    for d in framing.datagrams(data):
        ref = outcome(decode, d.payload, d.exporter, d.received_ms, ref_cache)
        batch = batches.setdefault(d.exporter, FlowBatch())
        before = batch.records
        got = outcome(decode_into, d.payload, d.exporter, d.received_ms, bat_cache, batch)
        if isinstance(ref, DecodeError):
            _require(batch.records == before, "decode_into kept records of a datagram it rejected")
        else:
            _check_result(ref)
            if len(ref.flows):
                ref_rows.setdefault(d.exporter, []).append(ref.flows)
        deferred = d.payload[:2] in (b"\x00\x09", b"\x00\x0a")  # v9/IPFIX rows wait in the batch
        same(got, ref, "decode_into", flows=not deferred)
        if not isinstance(got, DecodeError) and not deferred:  # v5 / sFlow rows come back decoded, as ingest adds them
            batch.add_rows(got.flows)
        if d.flush:
            flush()
    flush()


# ---- the ingest pipeline --------------------------------------------------------------------------


@functools.cache
def _settings(event_time: str, batch_max: int):
    from fabricflow.settings import load_settings

    return load_settings(None, ingest={"allowlist": ["192.0.2.0/24", "2001:db8::/32"], "dlq_max_per_s": 1e9,
                                       "batch_max_records": batch_max, "sflow_event_time": event_time,
                                       "batch_max_delay_ms": 60_000, "sampling_overrides": SAMPLING_OVERRIDES})


class _Sink:
    def __init__(self):
        self.out: list = []

    def publish_flows(self, exporter, arr):
        self.out.append(("flows", exporter, arr.dtype.str, arr.tobytes()))
        return True

    def publish_counters(self, exporter, arr):
        self.out.append(("counters", exporter, arr.dtype.str, arr.tobytes()))
        return True

    def publish_discards(self, exporter, arr):
        self.out.append(("discards", exporter, arr.dtype.str, arr.tobytes()))
        return True

    def publish_dlq(self, exporter, protocol, reason, datagram, detail=""):
        self.out.append(("dlq", exporter, protocol, reason, bytes(datagram)))
        return True


def _metric_values(m) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in m.registry.collect() for s in fam.samples if not s.name.endswith("_created")}


def check_pipeline(data: bytes) -> None:
    """:func:`_check_pipeline` with the pipeline's own logging silenced (undecodable datagrams are the point
    here), restored afterwards so the suite's other tests still see it."""
    log = logging.getLogger("fabricflow")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        _check_pipeline(data)
    finally:
        log.setLevel(level)


def _check_pipeline(data: bytes) -> None:
    """``IngestPipeline.handle_many`` (columnar sFlow group, batched NetFlow) equals ``handle`` one datagram at a
    time: same published flows, counters and DLQ entries, same metrics, and no decoder failure counted."""
    import ingest.pipeline as pl
    from ingest.metrics import IngestMetrics

    frames = framing.parse(data)
    dgs = framing.datagrams(data)
    if not dgs:
        return
    first = frames[0][0]
    settings = _settings("uptime" if first & 0x40 else "receive", 7 if first & 0x80 else 4096)
    runs = []
    group_min = pl.SFLOW_MANY_MIN
    try:
        for many in (True, False):
            pl.SFLOW_MANY_MIN = 1 if many else 1 << 30  # the columnar group for any sFlow datagram, or never
            sink, metrics = _Sink(), IngestMetrics()
            p = pl.IngestPipeline(settings.ingest, sink, metrics)
            chunk: list = []
            for d in dgs:
                if many:
                    chunk.append(d)
                else:
                    p.handle(d.payload, d.exporter, d.received_ms)
                if d.flush:
                    if chunk:
                        p.handle_many([c.payload for c in chunk], [c.exporter for c in chunk],
                                      [c.received_ms for c in chunk])
                        chunk = []
                    p.flush()
            if chunk:
                p.handle_many([c.payload for c in chunk], [c.exporter for c in chunk], [c.received_ms for c in chunk])
            p.flush()
            values = _metric_values(metrics)
            internal = {k: v for k, v in values.items() if v and ("reason", "internal_error") in k[1]}
            _require(not internal, f"decoder failure counted by the pipeline: {internal}")
            per_key: dict = {}  # in order per (kind, exporter): a flush publishes exporters in either order
            for item in sink.out:
                per_key.setdefault(item[:2], []).append(item)
            runs.append((per_key, values))
    finally:
        pl.SFLOW_MANY_MIN = group_min
    _require(runs[0][0] == runs[1][0], "handle_many published something else than handle")
    _require(runs[0][1] == runs[1][1], "handle_many counted something else than handle")


# ---- the batch codec (what every consumer calls on a Kafka message) -------------------------------


def _rows_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.dtype.hasobject:
        return a.tobytes() == b.tobytes()
    return all(np.array_equal(a[f], b[f]) if a.dtype[f].kind != "O" else a[f].tolist() == b[f].tolist()
               for f in a.dtype.names)


def _codec_outcome(fn: Callable, data: bytes):
    """(rows, spans) of ``fn(data)``, or its ``CodecError`` text; any other exception propagates."""
    from schemas.codec import CodecError

    spans: dict = {}
    try:
        return fn(data, spans=spans), spans
    except CodecError as e:
        return str(e)


def check_codec(data: bytes) -> None:
    """``decode_batch`` / ``decode_record`` on any message bytes: rows or ``CodecError``; the compiled column
    walk gives the plain-Python reference's rows and field spans, or its error text."""
    from schemas.codec import CodecError, decode_batch, decode_record
    from schemas.reference.batch import decode_batch as decode_batch_reference

    got = _codec_outcome(decode_batch, data)
    ref = _codec_outcome(decode_batch_reference, data)
    if isinstance(ref, str) or isinstance(got, str):
        _require(got == ref, f"decode_batch: {got!r} where the reference gives {ref!r}"[:500])
    else:
        _require(_rows_equal(got[0], ref[0]), "decode_batch: rows differ from the reference")
        _require(got[1] == ref[1], f"decode_batch: spans {got[1]} != the reference's {ref[1]}")
    try:
        decode_record(data)
    except CodecError:
        pass


@dataclass(frozen=True)
class Target:
    name: str
    check: Callable[[bytes], None]
    kind: str  # "datagrams" (tests.fuzz.framing input) or "message"
    about: str


TARGETS = {t.name: t for t in (
    Target("sflow", check_sflow, "datagrams", "sFlow v5 flow and counter samples: the compiled decoder against the reference"),
    Target("netflow5", check_netflow5, "datagrams", "NetFlow v5 per-datagram decode (and decode_into)"),
    Target("netflow9", check_netflow_batched, "datagrams", "NetFlow v9 with template state: batched vs per-datagram"),
    Target("ipfix", check_netflow_batched, "datagrams",
           "IPFIX with template state, options, variable-length fields, RFC 5103 biflow: batched vs per-datagram"),
    Target("pipeline", check_pipeline, "datagrams", "IngestPipeline.handle_many vs handle, all protocols mixed"),
    Target("codec", check_codec, "message", "schemas.codec.decode_batch (compiled walk) against the reference, decode_record, on Kafka message bytes"),
)}
