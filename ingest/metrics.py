"""Prometheus metrics of the ingest service (served by :class:`fabricflow.service.Service`).

Names follow ``fabricflow_<component>_<what>_<unit>``; labels come from bounded
sets only: exporter addresses are capped (``max_exporters``; beyond it they are
reported as ``other``), protocols and reasons are closed sets, never ports.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, max_exporters: int = 1000):
        r = self.registry = registry or CollectorRegistry()
        self.max_exporters = max_exporters
        self._exporters: set[str] = set()
        self.datagrams = Counter("fabricflow_ingest_datagrams_total", "Datagrams received and accepted", ["exporter", "protocol"], registry=r)
        self.records = Counter("fabricflow_ingest_records_total", "Records decoded", ["exporter", "protocol", "kind"], registry=r)
        self.bytes = Counter("fabricflow_ingest_received_bytes_total", "UDP payload bytes received", ["listener"], registry=r)
        self.not_allowed = Counter("fabricflow_ingest_not_allowed_datagrams_total", "Datagrams dropped: exporter not in the allowlist", ["listener"], registry=r)
        self.decode_errors = Counter("fabricflow_ingest_decode_errors_total", "Undecodable datagrams", ["protocol", "reason"], registry=r)
        self.problems = Counter("fabricflow_ingest_decode_problems_total", "Partial decode problems (datagram still decoded)", ["protocol", "reason"], registry=r)
        self.template_missing = Counter("fabricflow_ingest_template_missing_sets_total", "NetFlow v9/IPFIX data sets whose template the exporter has not sent (held, then decoded or expired)", ["exporter", "protocol"], registry=r)
        self.rate_missing = Counter("fabricflow_ingest_sampling_rate_missing_total", "Records without a sampling rate (treated as 1 or the override)", ["exporter"], registry=r)
        self.sampler_samples = Counter("fabricflow_ingest_sflow_sampler_samples_total", "sFlow samples the agents' samplers generated (sequence number deltas per data source, received or not)", ["exporter"], registry=r)
        self.sampler_drops = Counter("fabricflow_ingest_sflow_sampler_drops_total", "sFlow samples the agents' samplers dropped for lack of resources (drops deltas per data source)", ["exporter"], registry=r)
        self.sampler_expected = Counter("fabricflow_ingest_sflow_sampler_expected_samples_total", "sFlow samples the sample_pool deltas say the samplers should have generated (pool delta / rate)", ["exporter"], registry=r)
        self.seq_lost = Counter("fabricflow_ingest_sequence_lost_total", "Estimated lost records/datagrams from sequence gaps (protocol units)", ["exporter", "protocol"], registry=r)
        self.seq_dup = Counter("fabricflow_ingest_sequence_duplicates_total", "Duplicate export packets", ["exporter", "protocol"], registry=r)
        self.seq_restarts = Counter("fabricflow_ingest_exporter_restarts_total", "Exporter restarts detected from sequence/uptime", ["exporter", "protocol"], registry=r)
        self.skew = Gauge("fabricflow_ingest_clock_skew_seconds", "Collector receive time minus the export time in the header, smoothed: positive = exporter clock behind (transit delay included)", ["exporter"], registry=r)
        self.templates = Gauge("fabricflow_ingest_templates", "NetFlow v9/IPFIX templates in the cache", registry=r)
        self.templates_learned = Counter("fabricflow_ingest_templates_learned_total", "Templates learned or refreshed with a change", registry=r)
        self.templates_expired = Counter("fabricflow_ingest_templates_expired_total", "Templates dropped because the exporter did not refresh them in time", registry=r)
        self.pending_expired = Counter("fabricflow_ingest_pending_sets_expired_total", "Data sets held for a template that never came (dropped)", registry=r)
        self.templates_withdrawn = Counter("fabricflow_ingest_templates_withdrawn_total", "Templates withdrawn", registry=r)
        self.dlq = Counter("fabricflow_ingest_dlq_datagrams_total", "Undecodable datagrams sampled to the DLQ topic", registry=r)
        self.delivered = Counter("fabricflow_ingest_kafka_delivered_records_total", "Records acknowledged by Kafka", ["topic"], registry=r)
        self.failed = Counter("fabricflow_ingest_kafka_failed_records_total", "Records Kafka did not accept (delivery error)", ["topic"], registry=r)
        self.dropped = Counter("fabricflow_ingest_kafka_dropped_records_total", "Records dropped before Kafka: producer buffer full", ["topic"], registry=r)
        self.queue = Gauge("fabricflow_ingest_kafka_queue_messages", "Messages buffered in the producer", registry=r)
        self.socket_drops = Counter("fabricflow_ingest_socket_drops_total", "Datagrams dropped by the kernel (receive buffer full)", ["listener"], registry=r)
        self.rcvbuf = Gauge("fabricflow_ingest_socket_rcvbuf_bytes", "Granted SO_RCVBUF", ["listener"], registry=r)

    def exporter_label(self, exporter: str) -> str:
        if exporter in self._exporters:
            return exporter
        if len(self._exporters) < self.max_exporters:
            self._exporters.add(exporter)
            return exporter
        return "other"
