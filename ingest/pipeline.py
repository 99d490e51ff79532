"""One ingest worker's data path for a datagram: allowlist -> decode -> batch -> sink.

No sockets here (the service feeds datagrams in), so the whole path is testable without UDP. Every
failure is counted; a bad datagram never stops the worker. :meth:`IngestPipeline.handle_many` takes a
receive-loop group: its sFlow datagrams are decoded by one columnar
:func:`~ingest.decode.sflow.decode_sflow_group` call, then every datagram is handled in arrival
order exactly as :meth:`IngestPipeline.handle` handles it alone; NetFlow v9/IPFIX records wait in the
exporter's :class:`~ingest.decode.batch.FlowBatch` and are decoded at flush. Per-datagram counters are
summed and synced once per pass (:meth:`IngestPipeline.sync_metrics`). Why it is built this way:
docs/architecture.md, "Why ingest decodes in batches".
"""

from __future__ import annotations

import ipaddress
import logging
import time

import numpy as np

from fabricflow.logs import RateLimitedLog
from ingest.decode import DecodeError, DecodeResult, TemplateCache, decode_into, sniff_protocol
from ingest.decode.batch import FlowBatch, concat_rows
from ingest.decode.result import SAMPLE_DTYPE
from ingest.decode.sequence import SequenceTracker
from ingest.decode.sflow import decode_sflow_group
from ingest.decode.skew import ClockSkewTracker

from schemas import records

from .metrics import IngestMetrics
from .quality import QualityWindows
from .sampler_loss import SamplerLoss

log = logging.getLogger("fabricflow.ingest")

_SFLOW5 = b"\x00\x00\x00\x05"
_PLAIN = object()  # marks a datagram decode_sflow_group decoded to flow rows only
SFLOW_MANY_MIN = 2  # a lone sFlow datagram is decoded alone (a group call costs ~20 us fixed, then ~1 us a datagram)


class Allowlist:
    """Exporter CIDR allowlist with a bounded per-address decision cache. Empty = allow all."""

    def __init__(self, cidrs: list[str]):
        try:
            self.nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
        except ValueError as e:
            raise ValueError(f"ingest.allowlist: {e}") from None
        self._cache: dict[str, bool] = {}

    def allows(self, addr: str) -> bool:
        if not self.nets:
            return True
        hit = self._cache.get(addr)
        if hit is None:
            ip = ipaddress.ip_address(addr.split("%")[0])
            if ip.version == 6 and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            hit = any(ip in n for n in self.nets)
            if len(self._cache) > 65536:
                self._cache.clear()
            self._cache[addr] = hit
        return hit


class _TokenBucket:
    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, max(burst, 1.0)
        self.tokens = self.burst
        self.t = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class SflowUptimeClock:
    """sFlow event time from the agent's uptime instead of the receive time.

    sFlow datagrams carry no wall clock, only the agent uptime. Anchored at
    the first datagram of each (agent, sub-agent) -- ``anchor = received -
    uptime`` -- event time is ``anchor + uptime``: the exporter's own timeline,
    free of network/queueing jitter and correct for accelerated replays. The
    anchor is reset when the uptime goes backwards (agent restart). Records'
    ``time_start/end/export_ms`` (and counters' ``time_received_ms``) get it.
    """

    def __init__(self, max_agents: int = 100_000):
        self.anchors: dict[tuple[str, int], tuple[int, int]] = {}
        self.max_agents = max_agents

    def apply(self, res, received_ms: int) -> None:
        h = res.header
        if h is None or h.uptime_ms is None:
            return
        key = (h.exporter, h.domain)
        prev = self.anchors.get(key)
        if prev is None or h.uptime_ms < prev[1] - 60_000:  # first sight or restart (allow reordering)
            if prev is None and len(self.anchors) >= self.max_agents:
                self.anchors.clear()
            prev = (received_ms - h.uptime_ms, h.uptime_ms)
        anchor = prev[0]
        self.anchors[key] = (anchor, max(prev[1], h.uptime_ms))
        t = anchor + h.uptime_ms
        if len(res.flows):
            res.flows["time_start_ms"] = t
            res.flows["time_end_ms"] = t
            res.flows["time_export_ms"] = t
        if len(res.counters):
            res.counters["time_received_ms"] = t
        if len(res.discards):
            res.discards["time_received_ms"] = t


class _ExporterMetrics:
    """Bound Prometheus children of one (exporter, protocol) plus the counts pending for ``sync_metrics``."""

    __slots__ = ("label", "datagrams", "flows", "skew", "n_datagrams", "n_flows", "skew_exporter")

    def __init__(self, label: str, datagrams, flows, skew):
        self.label, self.datagrams, self.flows, self.skew = label, datagrams, flows, skew
        self.n_datagrams = 0
        self.n_flows = 0
        self.skew_exporter: str | None = None  # exporter whose smoothed skew to publish


class IngestPipeline:
    """``clock``: seconds now, for when batches are due and quality windows end; default the wall clock
    (``time.monotonic`` / ``time.time``). An offline run (``fabricflow backfill``) passes the capture's time."""

    def __init__(self, ingest_settings, sink, metrics: IngestMetrics, listener: str = "udp", clock=None):
        cfg = ingest_settings
        self._mono = clock or time.monotonic
        self._wall = clock or time.time
        self.sink = sink
        self.metrics = metrics
        self.listener = listener
        self.allowlist = Allowlist(cfg.allowlist)
        self.templates = TemplateCache(
            expiry_s=cfg.template_expiry_s,
            pending_hold_s=cfg.pending_hold_s,
            sampling_overrides=cfg.sampling_overrides,
            path=cfg.template_path,
        )
        self.sequences = SequenceTracker()
        self.skew = ClockSkewTracker()
        # per exporter and window: loss, records without rate, skew -> ingest.quality.v1 (ingest/quality.py)
        qw = getattr(cfg, "quality_window_s", 0)
        self.quality = QualityWindows(int(qw * 1000)) if qw and qw > 0 else None
        # sFlow flow samples' sequence / sample_pool / drops per data source -> sampler loss (ingest/sampler_loss.py)
        self.sampler_loss = SamplerLoss()
        self._samples: dict[str, list] = {}  # exporter -> sFlow SAMPLE_DTYPE arrays until its next flush
        self.batch_max = cfg.batch_max_records
        self.batch_delay_s = cfg.batch_max_delay_ms / 1000.0
        self.dlq_bucket = _TokenBucket(cfg.dlq_max_per_s, cfg.dlq_max_per_s)
        self.sflow_uptime_clock = SflowUptimeClock() if cfg.sflow_event_time == "uptime" else None
        self._flows: dict[str, FlowBatch] = {}
        self._counters: dict[str, list] = {}
        self._discards: dict[str, list] = {}  # exporter -> sFlow DISCARD_DTYPE arrays until the next flush
        self._oldest = self._mono()
        self._badlog = RateLimitedLog(log)
        self._templates_seen = (0, 0)
        # Bound metric children: labels() costs a lock and a dict lookup per call.
        self._bytes_child = metrics.bytes.labels(listener)
        self._children: dict[tuple[str, str], _ExporterMetrics] = {}
        # The per-datagram counters (bytes, datagrams, flow records, skew gauge) are
        # summed here and added to Prometheus by sync_metrics(), i.e. on every pass
        # of the receive loop (maybe_flush) and on flush: one inc per loop pass
        # instead of four calls per datagram.
        self._bytes_pending = 0
        self._dirty: list[_ExporterMetrics] = []

    def _per_exporter(self, exporter: str, proto: str) -> _ExporterMetrics:
        key = (exporter, proto)
        ch = self._children.get(key)
        if ch is None:
            m = self.metrics
            label = m.exporter_label(exporter)
            ch = _ExporterMetrics(label, m.datagrams.labels(label, proto), m.records.labels(label, proto, "flow"),
                                  m.skew.labels(label))
            if len(self._children) >= 4 * m.max_exporters:
                self._children.clear()  # entries with pending counts stay in _dirty until synced
            self._children[key] = ch
        return ch

    def sync_metrics(self) -> None:
        """Add the pending per-datagram counts to the Prometheus metrics."""
        if self._bytes_pending:
            self._bytes_child.inc(self._bytes_pending)
            self._bytes_pending = 0
        for ch in self._dirty:
            if ch.n_datagrams:
                ch.datagrams.inc(ch.n_datagrams)
                ch.n_datagrams = 0
            if ch.n_flows:
                ch.flows.inc(ch.n_flows)
                ch.n_flows = 0
            if ch.skew_exporter is not None:
                skew = self.skew.skew_ms(ch.skew_exporter)
                if skew is not None:
                    ch.skew.set(skew / 1000.0)
                ch.skew_exporter = None
        self._dirty.clear()

    # ------------------------------------------------------------------ per datagram

    def handle(self, datagram: bytes, exporter: str, received_ms: int) -> None:
        """One datagram: a one-datagram :meth:`handle_many`."""
        self.handle_many([datagram], [exporter], [received_ms])

    def handle_many(self, datagrams: list, exporters, received_ms) -> None:
        """A group of received datagrams (one or more receive-loop passes), in arrival order.

        ``exporters`` and ``received_ms`` are one value for all or a list with
        one per datagram. The allowed sFlow v5 datagrams are decoded together
        (:func:`~ingest.decode.sflow.decode_sflow_group`, when there are
        at least ``SFLOW_MANY_MIN``); then every datagram is handled in arrival
        order exactly as :meth:`handle` would (same metrics, DLQ, sequence and
        uptime-clock updates, batches and flush points). sFlow decoding reads
        no pipeline state that other datagrams change (only the configured
        sampling overrides), so decoding them ahead is equivalent.
        """
        k = len(datagrams)
        if not k:
            return
        exs = [exporters] * k if isinstance(exporters, str) else exporters
        ts = [received_ms] * k if isinstance(received_ms, int) else received_ms
        if self.allowlist.nets:
            allows = self.allowlist.allows
            allowed = [allows(e) for e in exs]
            sf = [i for i, d in enumerate(datagrams) if allowed[i] and d[:4] == _SFLOW5]
        else:  # no allowlist: every exporter is allowed
            allowed = [True] * k
            sf = [i for i, d in enumerate(datagrams) if d[:4] == _SFLOW5]
        self._bytes_pending += sum(map(len, datagrams))
        pre: list = [None] * k
        group = None
        if len(sf) >= SFLOW_MANY_MIN:
            try:
                group = decode_sflow_group([datagrams[i] for i in sf], [exs[i] for i in sf], [ts[i] for i in sf],
                                           self.templates)
            except Exception:  # a decoder bug: each datagram is decoded (and any failure counted) on its own
                group = None
            if group is not None:
                plain = group.plain
                for j, i in enumerate(sf):
                    pre[i] = _PLAIN if plain[j] else group.others[j]
        handle = self._handle
        # the current run of plain sFlow datagrams of one exporter: group indexes first..last (any other
        # datagram ends a run, so the group indexes of one run are consecutive)
        first = last = -1
        run_ex = None
        gi = {i: j for j, i in enumerate(sf)} if group is not None else None
        gts = [ts[i] for i in sf]
        for i in range(k):
            if not allowed[i]:
                if first >= 0:
                    self._add_plain_run(group, first, last, run_ex, gts)
                    first = -1
                self.metrics.not_allowed.labels(self.listener).inc()
                continue
            r = pre[i]
            if r is _PLAIN:
                if first >= 0 and exs[i] != run_ex:
                    self._add_plain_run(group, first, last, run_ex, gts)
                    first = -1
                last = gi[i]
                if first < 0:
                    first, run_ex = last, exs[i]
                continue
            if first >= 0:
                self._add_plain_run(group, first, last, run_ex, gts)
                first = -1
            handle(datagrams[i], exs[i], ts[i], r)
        if first >= 0:
            self._add_plain_run(group, first, last, run_ex, gts)

    def _add_plain_run(self, group, first: int, last: int, exporter: str, ts: list[int]) -> None:
        """Consecutive plain sFlow datagrams of one exporter (group indexes ``first`` to ``last``): their rows
        join the batch as slices of the group's rows, without a result object per datagram (but with the
        uptime clock, which writes each datagram's time into its rows of the group)."""
        received = ts[first:last + 1]
        clock = self.sflow_uptime_clock
        if clock is None:
            header = group.header
            headers = [header(j) for j in range(first, last + 1)]
        else:
            results = [group.result(j) for j in range(first, last + 1)]
            for res, t in zip(results, received):
                clock.apply(res, t)
            headers = [res.header for res in results]
        self._account(exporter, "sflow5", headers, received, group.bounds[first:last + 2], group.flows,
                      group.samples, self._flows.get(exporter))

    def _handle(self, datagram, exporter: str, received_ms: int, res) -> None:
        """An allowed datagram; ``res``: its decode_sflow_group outcome (result or DecodeError), None to decode here."""
        m = self.metrics
        batch = self._flows.get(exporter)
        if batch is None:
            batch = self._flows[exporter] = FlowBatch()
        before = batch.records
        try:
            if res is None:
                res = decode_into(datagram, exporter, received_ms, self.templates, batch)
            elif isinstance(res, DecodeError):
                raise res
        except DecodeError as e:
            m.decode_errors.labels(e.protocol, e.reason).inc()
            self._badlog.warning(f"{exporter}/{e.reason}", "undecodable datagram from %s: %s", exporter, e)
            if self.dlq_bucket.take():
                m.dlq.inc()
                self.sink.publish_dlq(exporter, e.protocol, e.reason, datagram, str(e))
            return
        except Exception as e:  # a decoder bug must not kill ingest: count it as its own reason
            proto = sniff_protocol(datagram)
            m.decode_errors.labels(proto, "internal_error").inc()
            self._badlog.warning(f"{exporter}/internal", "decoder failure on datagram from %s: %r", exporter, e)
            if self.dlq_bucket.take():
                m.dlq.inc()
                self.sink.publish_dlq(exporter, proto, "internal_error", datagram, repr(e))
            return
        h = res.header
        proto = h.protocol if h is not None else sniff_protocol(datagram)
        missing = 0
        if res.problems:
            label = self._per_exporter(exporter, proto).label
            for reason, n in res.problems.items():
                if reason == "sampling_rate_missing":
                    m.rate_missing.labels(label).inc(n)
                    missing = n
                m.problems.labels(proto, reason).inc(n)
        if res.templates_learned:
            m.templates_learned.inc(res.templates_learned)
        if res.templates_withdrawn:
            m.templates_withdrawn.inc(res.templates_withdrawn)
        if self.sflow_uptime_clock is not None and h is not None and proto == "sflow5":
            self.sflow_uptime_clock.apply(res, received_ms)
        if len(res.counters):
            m.records.labels(self._per_exporter(exporter, proto).label, proto, "counter").inc(len(res.counters))
            self._counters.setdefault(exporter, []).append(res.counters)
        if len(res.discards):
            m.records.labels(self._per_exporter(exporter, proto).label, proto, "discard").inc(len(res.discards))
            self._discards.setdefault(exporter, []).append(res.discards)
        self._account(exporter, proto, (h,), (received_ms,), (0, len(res.flows)), res.flows, res.samples, batch,
                      batch.records - before, missing)

    def _account(self, exporter: str, proto: str, headers, received, bounds, rows, samples, batch: FlowBatch | None,
                 added: int = 0, missing: int = 0) -> None:
        """The bookkeeping of a run of decoded datagrams of one exporter and protocol, in arrival order: the one
        path every datagram takes. Datagram and flow-record counts, sequence tracking, clock skew, the quality
        windows, and batching with its flush points (a batch is published once it holds ``batch_max`` records).

        Datagram ``i`` has header ``headers[i]`` (None: a datagram without one), was received at ``received[i]``
        and its flow rows are ``rows[bounds[i]:bounds[i + 1]]``; ``samples`` (or None) holds the rows' sFlow
        sample fields, aligned with ``rows``; ``batch`` is the exporter's open batch, if any. For a run of one
        datagram: ``added`` records the decoder already put into that batch (NetFlow v9/IPFIX records decoded at
        flush), ``missing`` records without a sampling rate. A lone datagram, or one with an export time (and so a skew), is its own quality
        observation; the others are summed per quality window.
        """
        ch = self._children.get((exporter, proto)) or self._per_exporter(exporter, proto)
        if not ch.n_datagrams:
            self._dirty.append(ch)
        n = len(headers)
        ch.n_datagrams += n
        single = n == 1
        quality = self.quality
        start = lo = end = bounds[0]  # start: first row not yet in a batch
        n_flows = added
        q = None  # summed quality figures of the current window: [received, datagrams, records, lost, dups, restarts]
        i = 0
        for h in headers:
            if h is None:
                lost = dups = restarts = 0
                export_ms = None
            else:
                lost, dups, restarts = self.sequences.observe_counts(h)
                if lost or dups or restarts:
                    self._sequence_metrics(ch.label, proto, lost, dups, restarts)
                export_ms = h.export_time_ms
                if export_ms is not None and self.skew.observe(h, received[i]) is not None:
                    ch.skew_exporter = exporter
            i += 1
            end = bounds[i]
            if quality is not None:
                t = received[i - 1]
                if export_ms is not None or single:
                    quality.observe(exporter, proto, t, end - bounds[i - 1] + added, lost, missing, dups, restarts,
                                    None if export_ms is None else float(t - export_ms))
                else:
                    if q is not None and t // quality.window_ms != q[0] // quality.window_ms:
                        quality.observe(exporter, proto, q[0], q[2], q[3], missing, q[4], q[5], None, q[1])
                        q = None
                    if q is None:
                        q = [t, 0, 0, 0, 0, 0]
                    q[1] += 1
                    q[2] += end - bounds[i - 1] + added
                    q[3] += lost
                    q[4] += dups
                    q[5] += restarts
            if end > start or added:
                if batch is None:
                    batch = self._flows[exporter] = FlowBatch()
                if batch.records + (end - start) >= self.batch_max:
                    if end > start:
                        batch.add_rows(rows if end - start == len(rows) else rows[start:end])
                        n_flows += end - start
                        start = end
                    self._flush_flows(exporter)
                    batch = None
        if end > start:
            if batch is None:
                batch = self._flows[exporter] = FlowBatch()
            batch.add_rows(rows if end - start == len(rows) else rows[start:end])  # a view only when needed
            n_flows += end - start
        ch.n_flows += n_flows
        if samples is not None and end > lo:
            self._samples.setdefault(exporter, []).append(samples if end - lo == len(samples) else samples[lo:end])
        if q is not None:
            quality.observe(exporter, proto, q[0], q[2], q[3], missing, q[4], q[5], None, q[1])

    def _sequence_metrics(self, label: str, proto: str, lost: int, dups: int, restarts: int) -> None:
        m = self.metrics
        if lost > 0:
            m.seq_lost.labels(label, proto).inc(lost)
        if dups:
            m.seq_dup.labels(label, proto).inc(dups)
        if restarts:
            m.seq_restarts.labels(label, proto).inc(restarts)

    def _sampler_loss(self, exporter: str) -> None:
        """sFlow sampler deltas of the exporter's rows since its last flush (:mod:`ingest.sampler_loss`): one
        columnar pass, counted in the metrics and added to the quality windows the rows were received in."""
        parts = self._samples.pop(exporter, None)
        if not parts:
            return
        if len(parts) == 1:
            samples = parts[0]
        else:  # as plain int64 rows: concatenating structured arrays is ~5x slower
            w = len(SAMPLE_DTYPE.names)
            samples = np.concatenate([np.ascontiguousarray(p).view(np.int64).reshape(-1, w) for p in parts]
                                     ).view(SAMPLE_DTYPE).reshape(-1)
        label = self._per_exporter(exporter, "sflow5").label
        m = self.metrics
        quality = self.quality
        if quality is None:
            segments = [(0, len(samples))]
        else:  # rows arrive in receive-time order: one segment per quality window
            recv = samples["received_ms"]
            win = recv // quality.window_ms
            cut = np.flatnonzero(win[1:] != win[:-1]) + 1
            segments = list(zip([0, *cut.tolist()], [*cut.tolist(), len(samples)]))
        for lo, hi in segments:
            d = self.sampler_loss.observe(exporter, samples[lo:hi])
            if d.samples:
                m.sampler_samples.labels(label).inc(d.samples)
            if d.drops:
                m.sampler_drops.labels(label).inc(d.drops)
            if d.samples_expected:
                m.sampler_expected.labels(label).inc(d.samples_expected)
            if quality is not None:
                quality.observe_sampler(exporter, "sflow5", int(samples["received_ms"][lo]), d)

    # ------------------------------------------------------------------ batching

    def _flush_flows(self, exporter: str) -> None:
        if exporter in self._samples:
            self._sampler_loss(exporter)
        batch = self._flows.pop(exporter, None)
        if batch is None or not batch.records:
            return
        arr = batch.decode()
        if batch.failed_records:
            for proto, n in batch.failed_records.items():
                self.metrics.decode_errors.labels(proto, "internal_error").inc()
                self._badlog.warning(
                    f"{exporter}/internal", "decoder failure at flush: %d records from %s dropped", n, exporter
                )
        # Bounded messages: split an oversized accumulation.
        for i in range(0, len(arr), self.batch_max):
            self.sink.publish_flows(exporter, arr[i : i + self.batch_max])

    def flush(self) -> None:
        for exp in list(self._flows):
            self._flush_flows(exp)
        for exp, parts in list(self._counters.items()):
            self.sink.publish_counters(exp, concat_rows(parts))
        self._counters.clear()
        for exp, parts in list(self._discards.items()):
            self.sink.publish_discards(exp, concat_rows(parts))
        self._discards.clear()
        for exp in list(self._samples):
            self._sampler_loss(exp)
        self._oldest = self._mono()
        self._publish_quality()
        self._sync_template_metrics()
        self.sync_metrics()

    def _publish_quality(self, force: bool = False) -> None:
        """Publish the IngestQuality records of the windows that ended (all at close)."""
        if self.quality is None:
            return
        publish = getattr(self.sink, "publish_quality", None)
        reports = self.quality.due(int(self._wall() * 1000), force=force)
        if publish is None or not reports:
            return
        for rec, value in zip(reports, records.encode_records("ingest_quality", reports)):
            publish(rec["exporter"], value)

    def _sync_template_metrics(self) -> None:
        t = self.templates
        self.metrics.templates.set(len(t))
        seen = (t.expired_total, t.pending_expired_total)
        prev = self._templates_seen
        if seen[0] > prev[0]:
            self.metrics.templates_expired.inc(seen[0] - prev[0])
        if seen[1] > prev[1]:
            self.metrics.pending_expired.inc(seen[1] - prev[1])
        self._templates_seen = seen
        if t.missing_sets:  # data sets that came before (or without) their template, per exporter
            m = self.metrics
            for (exporter, version), n in t.missing_sets.items():
                m.template_missing.labels(m.exporter_label(exporter), "ipfix" if version == 10 else "netflow9").inc(n)
            t.missing_sets.clear()

    def maybe_flush(self) -> None:
        """Once per pass of the receive loop: publish batches older than the max delay, sync metrics."""
        if self._mono() - self._oldest >= self.batch_delay_s:
            self.flush()
        elif self._dirty or self._bytes_pending:
            self.sync_metrics()

    def close(self) -> None:
        self.flush()
        self._publish_quality(force=True)
        if self.templates.path:
            try:
                self.templates.save()
            except OSError as e:
                log.warning("could not save templates to %s: %s", self.templates.path, e)
