"""What a decoder returns for one datagram."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from schemas.columns import COUNTER_DTYPE, DISCARD_DTYPE, FLOW_DTYPE

EMPTY_FLOWS = np.zeros(0, dtype=FLOW_DTYPE)
EMPTY_COUNTERS = np.zeros(0, dtype=COUNTER_DTYPE)
#: sFlow flow sample facts, one row per flow row: the sample sequence number, sample_pool and drops
#: (32-bit counters per data source, as on the wire; see ingest/sampler_loss.py), and the row's
#: sub-agent, source id, sampling rate and receive time (as in the flow row).
SAMPLE_DTYPE = np.dtype([("seq", "<i8"), ("pool", "<i8"), ("drops", "<i8"), ("domain", "<i8"), ("source", "<i8"),
                         ("rate", "<i8"), ("received_ms", "<i8")])
EMPTY_SAMPLES = np.zeros(0, dtype=SAMPLE_DTYPE)
#: Discard rows (DISCARD_DTYPE, schemas/avro/discarded_packet.avsc): one per sFlow discarded packet sample.
EMPTY_DISCARDS = np.zeros(0, dtype=DISCARD_DTYPE)


@dataclass(frozen=True, slots=True)
class ExportHeader:
    """Header facts of one export packet, for sequence and clock-skew tracking.

    ``sequence`` semantics follow the protocol: NetFlow v5 counts flows,
    NetFlow v9 counts export packets, IPFIX counts data records, sFlow counts
    datagrams per agent + sub-agent. ``increment`` is how far the sequence
    should advance because of this packet (v5/IPFIX: data records in it; v9
    and sFlow: 1). ``export_time_ms`` is None where the header has no wall
    clock (sFlow).
    """

    protocol: str  # sflow5 netflow5 netflow9 ipfix
    exporter: str
    domain: int  # source id / observation domain / sub-agent id / v5 engine
    sequence: int
    increment: int
    export_time_ms: int | None
    uptime_ms: int | None


@dataclass(slots=True)
class DecodeResult:
    flows: np.ndarray = field(default_factory=lambda: EMPTY_FLOWS)
    counters: np.ndarray = field(default_factory=lambda: EMPTY_COUNTERS)
    header: ExportHeader | None = None
    # Non-fatal problems by reason, e.g. "unknown_template", "sampling_rate_missing",
    # "unknown_record_type", "template_expired", "pending_expired".
    problems: Counter = field(default_factory=Counter)
    templates_learned: int = 0
    templates_withdrawn: int = 0
    # sFlow: SAMPLE_DTYPE rows aligned with ``flows`` (None for the other protocols)
    samples: np.ndarray | None = None
    # sFlow: DISCARD_DTYPE rows, one per discarded packet sample (empty for the other protocols)
    discards: np.ndarray = field(default_factory=lambda: EMPTY_DISCARDS)
