"""One frozen, typed settings object for every fabricflow service.

Sources, highest priority first: explicit overrides (CLI flags), environment
variables ``FABRICFLOW_<SECTION>__<KEY>`` (``__`` nests), the YAML file given
with ``--config`` (or ``FABRICFLOW_CONFIG``), then the defaults below, which run
everything locally (broker on 127.0.0.1:9092, archive in ./var/archive, no
inventory). Unknown keys are rejected. ``docs/configuration.md`` is generated
from this module (``fabricflow config docs``) and a test keeps it in sync.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, SecretStr, ValidationError, create_model, field_validator, model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .jobs_settings import JobsSettings
from .streams import STREAMS

ENV_PREFIX = "FABRICFLOW_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _topic_names() -> type[_Section]:
    """``kafka.topics``: one setting per stream of the catalog (fabricflow/streams.py: name, default, description)."""
    fields: dict[str, Any] = {s.name: (str, Field(s.topic, description=s.about)) for s in STREAMS}
    fields["replay_prefix"] = (str, Field("replay.", description="Prefix for replay output topics (replay.<topic>)"))
    return create_model("TopicNames", __base__=_Section, __module__=__name__,
                        __doc__="Kafka topic names. The incompatible-change version is part of the name.", **fields)


TopicNames = _topic_names()


class KafkaSettings(_Section):
    """Where the brokers are and how to reach them (SASL and TLS: docs/operations.md, "Secured Kafka").

    The security settings reach every client through :mod:`fabricflow.kafka_security`: confluent-kafka
    (:func:`fabricflow.kafka.client_config`) and Faust/aiokafka (the processors). File paths are checked at start.
    """

    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, comma separated")
    client_id: str = Field("fabricflow", description="Kafka client id prefix")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka security protocol"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); required with SASL_* protocols"
    )
    sasl_username: str | None = Field(None, description="SASL user name")
    sasl_password: SecretStr | None = Field(None, description="SASL password (never logged)")
    ssl_ca_file: str | None = Field(None, description="PEM file of the CA(s) that signed the brokers' certificates; none = the system trust store")
    ssl_cert_file: str | None = Field(None, description="PEM client certificate (TLS client authentication, with ssl_key_file)")
    ssl_key_file: str | None = Field(None, description="PEM private key of the client certificate")
    ssl_key_password: SecretStr | None = Field(None, description="Password of an encrypted ssl_key_file (never logged)")
    ssl_check_hostname: bool = Field(True, description="Verify that the broker certificate names the broker host (turn off only for test clusters)")
    wait_timeout_s: float = Field(
        60.0, ge=0, description="At start, wait this long for the brokers to answer (one log line per attempt), then exit 1; 0 = try once"
    )
    partitions: int = Field(4, ge=1, le=1024, description="Partitions per topic at creation (Tansu cannot add partitions later)")
    replication_factor: int = Field(1, ge=1, le=16, description="Replication factor at topic creation")
    session_timeout_ms: int = Field(
        6000, ge=1000, description="Consumer group session timeout: a member silent this long leaves the group. Apache Kafka's "
        "smallest by default; the embedded broker (Tansu) holds each join for half of it, so pipelines on the embedded stack "
        "use 2000 (a 1 s join, docs/embedded-stack.md)"
    )
    topics: TopicNames = Field(default_factory=TopicNames)

    @model_validator(mode="after")
    def _security_consistent(self):
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not self.sasl_mechanism:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        if sasl and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_username and sasl_password")
        if bool(self.ssl_cert_file) != bool(self.ssl_key_file):
            raise ValueError("ssl_cert_file and ssl_key_file go together (TLS client authentication)")
        return self


class ProducerSettings(_Section):
    """``ingest.producer``: the one producer configuration (:func:`fabricflow.kafka.producer_config`) of ingest,
    the processors' output producer and replay's publisher."""

    compression: Literal["lz4", "zstd", "snappy", "gzip", "none"] = Field(
        "lz4", description="Message compression (ingest, the processors' output producer and replay)")
    linger_ms: int = Field(20, ge=0, le=5000, description="Producer linger (batching delay); the processors use "
                           "processors.output_linger_ms")
    batch_bytes: int = Field(1_000_000, ge=1024, description="Max producer batch size in bytes")
    queue_max_messages: int = Field(100_000, ge=100, description="librdkafka buffer bound in messages; beyond it ingest "
                                    "drops and counts records, the processors and replay wait")
    queue_max_kbytes: int = Field(262_144, ge=1024, description="librdkafka buffer bound in KiB (as queue_max_messages)")
    message_timeout_ms: int = Field(300_000, ge=1000, description="Give up delivering a message after this long (counted as failed)")
    flush_timeout_s: float = Field(10.0, ge=0, description="On shutdown, flush with this deadline; undelivered records are reported")


class IngestSettings(_Section):
    listen: list[str] = Field(
        default_factory=lambda: ["sflow://0.0.0.0:6343", "netflow://0.0.0.0:2055", "ipfix://0.0.0.0:4739",
                                 "marks://0.0.0.0:6344"],
        description="Listener URLs: sflow://HOST:PORT, netflow://HOST:PORT (v5/v9/IPFIX by version field), ipfix://HOST:PORT; "
        "marks://HOST:PORT takes training-step and change mark lines (JSON, docs/closed-loop.md); [::] for IPv6",
    )
    rcvbuf_bytes: int = Field(33_554_432, ge=65536, description="SO_RCVBUF per socket (warned when the kernel caps it)")
    workers: int = Field(1, ge=1, le=64, description="Worker processes per listener port (SO_REUSEPORT; one exporter stays on one worker)")
    startup_buffer_mb: int = Field(
        64, ge=0, le=65536, description="While ingest starts (Kafka, topics, decoders) its sockets are already bound and "
        "read into memory, up to this many MiB; beyond it the kernel socket buffer holds datagrams, then drops them (counted)",
    )
    allowlist: list[str] = Field(
        default_factory=list, description="Exporter CIDRs allowed to send; empty = accept all (a warning is logged)"
    )
    batch_max_records: int = Field(4096, ge=1, description="Max flow records per Kafka message")
    batch_max_delay_ms: int = Field(200, ge=0, description="Max time decoded records wait before being published")
    dlq_max_per_s: float = Field(10.0, ge=0, description="Max undecodable datagrams per second sampled to the DLQ")
    template_expiry_s: float = Field(1800.0, gt=0, description="Drop NetFlow v9/IPFIX templates not refreshed for this long")
    template_path: str | None = Field(
        None, description="Persist templates to this JSON file (worker i of several: NAME.wi.json beside it) and reload every worker's file at start"
    )
    template_save_s: float = Field(60.0, gt=0, description="Write the template file this often (and at shutdown), so a crash loses at most this much")
    pending_hold_s: float = Field(30.0, ge=0, description="Hold data sets that arrive before their template this long")
    sampling_overrides: dict[str, int] = Field(
        default_factory=dict, description="Sampling rate per exporter address for records that carry none (or 0)"
    )
    sflow_event_time: Literal["receive", "uptime"] = Field(
        "receive",
        description="Event time of sFlow records (the protocol carries no wall clock): receive = collector receive time; "
        "uptime = agent uptime anchored at the first datagram of each agent (keeps the exporter's timeline, e.g. accelerated replays)",
    )
    quality_window_s: float = Field(
        60.0, ge=0, description="Publish data quality per exporter (sequence loss, records without sampling rate, clock skew) "
        "to ingest.quality.v1 for windows of this many seconds of receive time (0 = off)",
    )
    marks_allowlist: list[str] = Field(
        default_factory=list, description="Sender CIDRs allowed on the marks:// listener; empty = accept all (training "
        "nodes send there, not only exporters)",
    )
    marks_max_per_s: float = Field(1000.0, ge=0, description="Mark lines per second accepted on the marks:// listener "
                                   "in all (more are counted as rate_limited and dropped; 0 = unbounded)")
    marks_max_per_source_per_s: float = Field(100.0, ge=0, description="Mark lines per second accepted from one sender "
                                              "address (0 = unbounded)")
    capture_path: str | None = Field(
        None, description="Also write every datagram received on the flow listeners to this pcap file, stamped with "
        "the receive time ingest used, for `fabricflow backfill` or a bug report (worker i of several: NAME.wi.pcap)",
    )
    capture_max_bytes: int = Field(1_073_741_824, ge=0, description="Stop capturing (logged once) once the capture "
                                   "file reaches this size")
    metrics_bind: str = Field("127.0.0.1", description="Address for the /metrics and /healthz HTTP server")
    metrics_port: int = Field(9180, ge=0, le=65535, description="Port for /metrics and /healthz (0 = disabled)")
    producer: ProducerSettings = Field(default_factory=ProducerSettings)


class ProcessorSettings(_Section):
    app_id: str = Field("fabricflow-processors", description="Faust app id = consumer group")
    inventory: str | None = Field(None, description="Inventory file (YAML or CSV); none = every address is 'unknown'")
    inventory_reload_s: float = Field(10.0, ge=0, description="Check the inventory, policy and categories files for changes this often (0 = at every processors.tick_s)")
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    window_s: float = Field(10.0, gt=0, description="Traffic-matrix / straggler window length")
    allowed_lateness_s: float = Field(30.0, ge=0, description="Late data within this lateness still updates its window (NetFlow exports flows after they end)")
    idle_close_s: float = Field(30.0, gt=0, description="Close windows on a wall-clock timer after this much idle time")
    incast_window_s: float = Field(0.2, gt=0, description="Incast window: short, because incast bursts last 100s of milliseconds")
    incast_close_after_s: float = Field(
        3.0, gt=0, description="An incast event closes after this long below the close threshold (periodic bursts stay one event)"
    )
    detector_protocols: list[Literal["sflow5", "netflow5", "netflow9", "ipfix"]] = Field(
        default_factory=lambda: ["sflow5", "netflow5", "netflow9", "ipfix"],
        description="Export protocols the traffic detectors (matrix, incast, straggler, pattern) use; restrict to one "
        "observation layer when several exporters see the same packets (e.g. [sflow5] for ToR sFlow + core NetFlow). "
        "Enrichment, archive and policy alerts always use every record",
    )
    observation_exporters: dict[str, Literal["primary", "secondary", "ignore"]] = Field(
        default_factory=dict,
        description="Observation policy overrides by exporter address: primary (its records always count), "
        "secondary (count only paths no primary sees) or ignore; see docs/detectors.md, Counting each packet once",
    )
    default_capacity_bps: float = Field(100e9, gt=0, description="Link capacity for nodes without one in the inventory")
    datadir: str = Field("./var/faust", description="Faust data directory (table stores)")
    web_bind: str = Field("127.0.0.1", description="Faust web server bind address")
    web_port: int = Field(6066, ge=0, le=65535, description="Faust web server port")
    metrics_port: int = Field(9181, ge=0, le=65535, description="Prometheus /metrics port for processors (0 = disabled)")
    detectors: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Detector parameter overrides by detector name (incast, straggler, link, matrix, pattern, lb_skew, storage_bound, timeline, congestion, conn_storm, diagnosis, fabric_balance, job_spread, visibility); see docs/detectors.md",
    )
    policy: str | None = Field(None, description="Segmentation / security policy file (YAML); see docs/alerts.md; re-read every inventory_reload_s")
    categories: str | None = Field(
        None, description="App-category rules file (YAML: ports of site storage such as GPFS/Ceph/BeeGFS, NCCL port ranges, "
        "...; see docs/inventory.md); none = the built-in rules; re-read every inventory_reload_s",
    )
    tick_s: float = Field(1.0, gt=0, description="Wall-clock timer that closes idle windows and flushes outputs")
    enriched_max_records: int = Field(
        4096, ge=1, description="Max flow records per flows.enriched message (the default equals "
        "ingest.batch_max_records: one enriched message per raw message, ~700 kB before compression)",
    )
    publish_v1: bool = Field(
        False, description="Also publish the v1 wire formats for consumers not yet on v2: flows.enriched.v1 (label "
        "strings per record) beside flows.enriched.v2, and matrix.windows.v1 (one message per cell) beside "
        "matrix.windows.v2. Deprecated: removed in the next release",
    )
    prepare_batch_messages: int = Field(
        32, ge=1, description="Raw messages the prepare agent takes at once: their flows are enriched together and each "
        "shard gets one shuffle message for all of them (fewer, larger detector batches)",
    )
    prepare_batch_wait_s: float = Field(
        0.25, gt=0, description="Max wait for more raw messages, from the first one taken, before preparing the ones taken "
        "(at moderate rates a batch ends here: it adds up to this much, plus a quarter, to every output's latency; fewer, "
        "larger batches cost less CPU per flow)",
    )
    shuffle_max_records: int = Field(
        8192, ge=1, description="Max flow records per shuffle message (one raw message's rows of a shard are split only "
        "when they alone exceed it)",
    )
    output_linger_ms: int = Field(
        20, ge=0, le=5000,
        description="Batching delay of the producer for the shuffle, enriched and output topics; offsets are committed "
        "only once what it holds is delivered",
    )
    counter_batch_rows: int = Field(
        256, ge=1, description="detect applies a shard's counter samples (link health) once this many are waiting "
        "and at every tick (waiting samples are part of the shard's snapshot): fewer, larger link-health steps, same "
        "outputs per port; 1 = each counter message as it comes",
    )
    snapshot_every_messages: int = Field(
        64, ge=1, description="Write a shard's state snapshot (core-state table) after this many shuffle messages of its partition; "
        "shuffle offsets are committed only up to the last snapshot, so a crash re-processes at most this many messages per partition"
    )
    snapshot_interval_s: float = Field(
        5.0, gt=0, description="... or once the oldest shuffle message not covered by a snapshot is this old (also when idle)"
    )
    fetch_max_wait_ms: int = Field(
        100, ge=1, le=30_000,
        description="Longest a consumer fetch waits on the broker for new data (Faust hard-codes 1500 ms; a broker that does "
        "not answer a waiting fetch when data arrives, like the embedded Tansu, then stalls the agents that long). With "
        "Tansu's s3 engine use 500: after a restart it answers shorter fetches with nothing while it reads its storage",
    )
    reuse_enriched_records: int = Field(
        262_144, ge=0, description="detect reuses the records prepare enriched in the same worker for its own shuffle "
        "partitions instead of decoding and enriching the shuffle message again (byte-identical messages only); "
        "at most this many records are kept waiting (~500 bytes each with their shuffle message; 0 = off)"
    )
    table_store: str = Field("memory://", description="Faust table store: memory:// (state rebuilt from changelog topics) or rocksdb://")

    @field_validator("observation_exporters")
    @classmethod
    def _exporter_addresses(cls, v: dict[str, str]) -> dict[str, str]:
        import ipaddress

        for addr in v:
            try:
                ipaddress.ip_address(addr)
            except ValueError:
                raise ValueError(f"{addr!r} is not an exporter IP address") from None
        return v


class ArchiveSettings(_Section):
    url: str = Field("file://./var/archive", description="Archive root: file://DIR or s3://BUCKET/PREFIX")
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL (SeaweedFS/MinIO); none = AWS")
    s3_access_key: str | None = Field(None, description="S3 access key id")
    s3_secret_key: SecretStr | None = Field(None, description="S3 secret key (never logged)")
    s3_region: str = Field("us-east-1", description="S3 region")
    grace_s: float = Field(300.0, ge=0, description="Close an hour this long after event time passes its end")
    idle_flush_s: float = Field(60.0, gt=0, description="Flush buffered rows of idle partitions after this long")
    max_file_age_s: float = Field(
        900.0, gt=0, description="Write a partition's buffered rows of an hour to a file once they have waited this long "
        "(processing time), also while rows keep coming; smaller = rows readable sooner, more (smaller) files",
    )
    metrics_bind: str = Field("127.0.0.1", description="Address for the archive sink's /metrics and /healthz")
    metrics_port: int = Field(9182, ge=0, le=65535, description="Port for the archive sink's /metrics (0 = disabled)")
    write_queue_rows: int = Field(
        1_000_000, ge=0,
        description="Rows of planned Parquet files that may wait for the sink's writer thread before decoding pauses "
                    "(0 = write on the consumer thread, no overlap)",
    )
    wait_timeout_s: float = Field(
        60.0, ge=0, description="At start, wait this long for the object store to answer (one log line per attempt), then exit 1; 0 = try once"
    )
    retention_days: dict[str, int] = Field(
        default_factory=dict,
        description="Archive retention overrides in days by dataset ('default' for every dataset not named; "
        "negative = forever) on top of the stream catalog's defaults (docs/archive.md, Retention); applied by the "
        "archive sink every retention_interval_s and by `fabricflow sink retention`",
    )
    retention_interval_s: float = Field(
        3600.0, ge=0, description="The archive sink applies retention_days this often while it runs (first run a minute "
        "after start; 0 = never, e.g. when another sink instance or a cron job does it)",
    )
    compaction_interval_s: float = Field(
        600.0, ge=0, description="The archive sink merges each closed hour's rollup files of every Kafka partition it is "
        "assigned into one this often (below its committed offsets: safe with the writes going on; first run two minutes "
        "after start; 0 = never, e.g. when `fabricflow sink compact` runs from cron); docs/archive.md, Rollups",
    )
    compaction_lookback_h: int = Field(
        48, ge=1, description="A scheduled compaction looks at the closed hours at most this old (each run lists each of "
        "their directories once); older hours left uncompacted, e.g. after a long stop, take `fabricflow sink compact`",
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, v: str) -> str:
        if not (v.startswith("file://") or v.startswith("s3://") or v.startswith("memory://")):
            raise ValueError("must start with file://, s3:// or memory://")
        return v


class MetricsSettings(_Section):
    """The flow-metrics sink (`fabricflow sink metrics`): processors' outputs -> Prometheus /metrics."""

    bind: str = Field("127.0.0.1", description="Address of the /metrics and /healthz HTTP server")
    port: int = Field(9183, ge=0, le=65535, description="Port of /metrics and /healthz")
    group: str = Field("fabricflow-metrics", description="Kafka consumer group (offsets are committed once a served scrape reflects them)")
    series_budget: int = Field(
        50_000, ge=100, description="Series budget of all families together: node pairs get what the other families "
        "(never cut: group, rack, per-node, ports, detectors) leave, node pairs within a job first, then by rate; the rest "
        "fold into src_node=dst_node=\"other\" (docs/metrics.md)",
    )
    inventory: str | None = Field(None, description="Inventory file (job membership, switches, capacities); default processors.inventory")
    start_lookback_s: float = Field(
        900.0, ge=0, description="A new consumer group starts with messages at most this old (by message timestamp); "
        "older ones are skipped and counted",
    )
    duplicate_horizon_s: float = Field(
        300.0, gt=0, description="Matrix cells a processor produces again after a crash (same Kafka key and window) are "
        "counted once if their window ends within this much event time of the newest window seen; older windows' keys "
        "are forgotten (memory: ~100 bytes per cell of the windows within it; docs/metrics.md)",
    )


class StackSettings(_Section):
    state_dir: str = Field("./.fabricflow", description="Pid files, logs and data of the embedded stack")
    kafka_port: int = Field(9092, ge=1, le=65535, description="Embedded broker (Tansu) port on 127.0.0.1")
    storage_engine: Literal["memory", "s3"] = Field(
        "memory", description="Tansu storage: memory (fast, lost on restart) or s3 (on the embedded SeaweedFS, persistent)"
    )
    s3_port: int = Field(8333, ge=1, le=65535, description="Embedded SeaweedFS S3 port on 127.0.0.1")
    s3_base_port: int = Field(19330, ge=1024, le=65000, description="First of the 9 internal SeaweedFS ports")
    bucket: str = Field("fabricflow", description="Bucket created in the embedded object store")
    broker_bucket: str = Field("tansu", description="Bucket for Tansu's s3 storage engine")
    access_key: str = Field("fabricflow", description="Embedded object store access key")
    secret_key: SecretStr = Field(SecretStr("fabricflow-secret"), description="Embedded object store secret key")
    start_timeout_s: float = Field(30.0, gt=0, description="Wait this long for each service to become ready")


class ConsoleSettings(_Section):
    """The web console (``fabricflow console``, docs/console.md)."""

    listen: str = Field(
        "127.0.0.1:8090",
        description="HOST:PORT the console serves on; any address other than loopback needs console.token",
    )
    token: SecretStr | None = Field(
        None, description="Access token: required when listen is not loopback; then every request must carry "
        "'Authorization: Bearer TOKEN' (or ?token=TOKEN for the page and its event stream). Never logged",
    )
    group_id: str = Field("fabricflow-console", description="Kafka consumer group of the console's live reader")
    inventory: str | None = Field(
        None, description="Inventory file for node order, ports and jobs; none = processors.inventory"
    )
    live_windows: int = Field(60, ge=1, le=10_000, description="Matrix windows kept in memory for the live view")
    live_events: int = Field(5000, ge=10, le=1_000_000, description="Detections (incast, straggler, link, alerts, "
                             "patterns) kept in memory for the live view, newest first out last")
    live_port_samples: int = Field(360, ge=10, le=100_000, description="Link-health samples kept in memory per port")
    lookback_s: float = Field(3600.0, ge=0, description="On start, the live reader skips records older than this "
                              "(where the broker supports offsets by time)")
    query_max_range_s: float = Field(7 * 86400.0, gt=0, description="Longest time range one archive query may span")
    accept_marks: bool = Field(True, description="Accept change markers and step marks over HTTP (POST /api/marks/"
                               "change and /api/marks/step; with a token set they need it, like every request)")
    metrics_bind: str = Field("127.0.0.1", description="Address for the console's /metrics and /healthz")
    metrics_port: int = Field(9184, ge=0, le=65535, description="Port for the console's /metrics and /healthz "
                              "(0 = disabled)")

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT (e.g. 127.0.0.1:8090 or [::1]:8090)")
        return v


class Settings(BaseSettings):
    """All settings. Nested sections map to ``FABRICFLOW_<SECTION>__<KEY>``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    processors: ProcessorSettings = Field(default_factory=ProcessorSettings)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    stack: StackSettings = Field(default_factory=StackSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)

    # Set by load_settings(); the YAML file is a source below env vars.
    _yaml_file: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ):
        sources = [init_settings, env_settings]
        if _YAML_STATE["data"] is not None:
            sources.append(_DictSource(settings_cls, _YAML_STATE["data"]))
        return tuple(sources)


_YAML_STATE: dict[str, Any] = {"data": None}


class _DictSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls, data: dict):
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field, field_name):  # pragma: no cover - unused by __call__
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class ConfigError(Exception):
    """Bad configuration: the message is one line naming the setting."""


def _format_validation_error(err: ValidationError, origin: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        env = ENV_PREFIX + "__".join(str(x).upper() for x in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown setting"
        parts.append(f"{loc}: {msg} (env {env})")
    return f"invalid configuration ({origin}): " + "; ".join(parts)


def read_yaml(path: str | os.PathLike) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {p}{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: top level must be a mapping of sections, got {type(data).__name__}")
    return data


def load_settings(config: str | os.PathLike | None = None, **overrides: Any) -> Settings:
    """Build the settings from defaults, the YAML file, env vars and overrides.

    Raises :class:`ConfigError` with one clear line on any problem.
    """
    config = config or os.environ.get(ENV_PREFIX + "CONFIG") or None
    origin = f"{config} + environment" if config else "environment"
    _YAML_STATE["data"] = read_yaml(config) if config else None
    try:
        return Settings(**overrides)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, origin)) from None
    finally:
        _YAML_STATE["data"] = None


def iter_fields(model: type[BaseModel] = Settings, prefix: tuple[str, ...] = ()):
    """(dotted path, env var, default, description) for every leaf setting."""
    for name, f in model.model_fields.items():
        ann = f.annotation
        path = prefix + (name,)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from iter_fields(ann, path)
            continue
        default = f.get_default(call_default_factory=True)
        if isinstance(default, SecretStr):
            default = "**********"
        env = ENV_PREFIX + "__".join(p.upper() for p in path)
        yield ".".join(path), env, default, f.description or ""


def _secrets(model: BaseModel, path: tuple[str, ...] = ()):
    """(path, SecretStr or None) of every secret field set or not, walking nested sections."""
    for name, f in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _secrets(value, path + (name,))
        elif isinstance(value, SecretStr) or "SecretStr" in str(f.annotation):
            yield path + (name,), value


def dump_yaml(settings: Settings, show_secrets: bool = False) -> str:
    """The settings as YAML; every SecretStr field (whatever section) is masked unless ``show_secrets``."""
    data = settings.model_dump(mode="json")
    for path, secret in _secrets(settings):
        node = data
        for part in path[:-1]:
            node = node[part]
        if secret is None:
            node[path[-1]] = None
        else:
            node[path[-1]] = secret.get_secret_value() if show_secrets else "**********"
    return yaml.safe_dump(data, sort_keys=False)


def configuration_markdown() -> str:
    """docs/configuration.md, generated from the settings model."""
    lines = [
        "# Configuration",
        "",
        "Generated from `fabricflow/settings.py` by `fabricflow config docs`; a test fails when it drifts.",
        "",
        "Every setting can be given in a YAML file (`fabricflow --config FILE ...` or `FABRICFLOW_CONFIG=FILE`),",
        "with sections as nested mappings, or as an environment variable. Precedence: command-line flags >",
        "environment > YAML file > defaults. Unknown keys are rejected with one line naming the key.",
        "Lists and mappings in environment variables are JSON, e.g.",
        "`FABRICFLOW_INGEST__ALLOWLIST='[\"10.0.0.0/8\"]'`.",
        "",
        "| setting | env var | default | description |",
        "|---|---|---|---|",
    ]
    for path, env, default, desc in iter_fields():
        d = "`" + yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...").strip() + "`"
        lines.append(f"| `{path}` | `{env}` | {d} | {desc.replace('|', '/')} |")
    lines += [
        "",
        "Check a file without starting anything: `fabricflow config check FILE`; print the effective",
        "settings: `fabricflow config dump` (secrets masked).",
        "",
    ]
    return "\n".join(lines)
