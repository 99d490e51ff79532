"""One ingest worker's data path for a datagram: allowlist -> decode -> batch -> sink.

No sockets here (the service feeds datagrams in), so the whole path is testable
without UDP. Every failure is counted; a bad datagram never stops the worker.
"""

from __future__ import annotations

import ipaddress
import logging
import time

import numpy as np

from fabricflow.logs import RateLimitedLog
from ingest.decode import DecodeError, TemplateCache, decode, sniff_protocol
from ingest.decode.sequence import SequenceTracker
from ingest.decode.skew import ClockSkewTracker

from .metrics import IngestMetrics

log = logging.getLogger("fabricflow.ingest")


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


class IngestPipeline:
    def __init__(self, ingest_settings, sink, metrics: IngestMetrics, listener: str = "udp"):
        cfg = ingest_settings
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
        self.batch_max = cfg.batch_max_records
        self.batch_delay_s = cfg.batch_max_delay_ms / 1000.0
        self.dlq_bucket = _TokenBucket(cfg.dlq_max_per_s, cfg.dlq_max_per_s)
        self._flows: dict[str, list[np.ndarray]] = {}
        self._flow_counts: dict[str, int] = {}
        self._counters: dict[str, list[np.ndarray]] = {}
        self._oldest = time.monotonic()
        self._badlog = RateLimitedLog(log)
        self._templates_seen = (0, 0)

    # ------------------------------------------------------------------ per datagram

    def handle(self, datagram: bytes, exporter: str, received_ms: int) -> None:
        m = self.metrics
        m.bytes.labels(self.listener).inc(len(datagram))
        if not self.allowlist.allows(exporter):
            m.not_allowed.labels(self.listener).inc()
            return
        try:
            res = decode(datagram, exporter, received_ms, self.templates)
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
        label = m.exporter_label(exporter)
        proto = res.header.protocol if res.header is not None else sniff_protocol(datagram)
        m.datagrams.labels(label, proto).inc()
        for reason, n in res.problems.items():
            if reason == "sampling_rate_missing":
                m.rate_missing.labels(label).inc(n)
            m.problems.labels(proto, reason).inc(n)
        if res.templates_learned:
            m.templates_learned.inc(res.templates_learned)
        if res.templates_withdrawn:
            m.templates_withdrawn.inc(res.templates_withdrawn)
        if res.header is not None:
            st_before = self.sequences.get(res.header.exporter, res.header.protocol, res.header.domain)
            dup0 = st_before.duplicates if st_before else 0
            rst0 = st_before.restarts if st_before else 0
            lost = self.sequences.observe(res.header)
            st = self.sequences.get(res.header.exporter, res.header.protocol, res.header.domain)
            if lost > 0:
                m.seq_lost.labels(label, proto).inc(lost)
            if st is not None:
                if st.duplicates > dup0:
                    m.seq_dup.labels(label, proto).inc(st.duplicates - dup0)
                if st.restarts > rst0:
                    m.seq_restarts.labels(label, proto).inc(st.restarts - rst0)
            skew = self.skew.observe(res.header, received_ms)
            if skew is not None:
                m.skew.labels(label).set(self.skew.skew_ms(res.header.exporter) / 1000.0)
        n = len(res.flows)
        if n:
            m.records.labels(label, proto, "flow").inc(n)
            self._flows.setdefault(exporter, []).append(res.flows)
            total = self._flow_counts.get(exporter, 0) + n
            self._flow_counts[exporter] = total
            if total >= self.batch_max:
                self._flush_flows(exporter)
        if len(res.counters):
            m.records.labels(label, proto, "counter").inc(len(res.counters))
            self._counters.setdefault(exporter, []).append(res.counters)

    # ------------------------------------------------------------------ batching

    def _flush_flows(self, exporter: str) -> None:
        parts = self._flows.pop(exporter, None)
        self._flow_counts.pop(exporter, None)
        if not parts:
            return
        arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
        # Bounded messages: split an oversized accumulation.
        for i in range(0, len(arr), self.batch_max):
            self.sink.publish_flows(exporter, arr[i : i + self.batch_max])

    def flush(self) -> None:
        for exp in list(self._flows):
            self._flush_flows(exp)
        for exp, parts in list(self._counters.items()):
            arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self.sink.publish_counters(exp, arr)
        self._counters.clear()
        self._oldest = time.monotonic()
        self.metrics.templates.set(len(self.templates))

    def maybe_flush(self) -> None:
        if time.monotonic() - self._oldest >= self.batch_delay_s:
            self.flush()

    def close(self) -> None:
        self.flush()
        if self.templates.path:
            try:
                self.templates.save()
            except OSError as e:
                log.warning("could not save templates to %s: %s", self.templates.path, e)
