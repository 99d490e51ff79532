"""The example inventory and flow batches built from readable rows, for the enrichment tests."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from processors.logic.enrich.enricher import ENRICHED_DTYPE
from schemas.columns import addr16_column, empty_flows

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "scenarios" / "inventory.example.yaml"


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).replace(tzinfo=timezone.utc).timestamp() * 1000)


def flows(rows):
    """rows: (src, dst, proto, sport, dport, time_iso)."""
    f = empty_flows(len(rows))
    f["ip_version"] = [6 if ":" in r[0] else 4 for r in rows]
    f["src_addr"] = addr16_column([r[0] for r in rows])
    f["dst_addr"] = addr16_column([r[1] for r in rows])
    f["ip_protocol"] = [r[2] for r in rows]
    f["src_port"] = [r[3] for r in rows]
    f["dst_port"] = [r[4] for r in rows]
    f["time_start_ms"] = [ms(r[5]) for r in rows]
    f["bytes"] = np.arange(len(rows)) + 100
    f["sampling_rate"] = 1
    return f


ROWS = [
    ("10.10.1.11", "10.10.2.11", 6, 45000, 51000, "2026-12-02T10:00:00"),
    ("10.10.1.11", "10.10.1.12", 17, 50000, 4791, "2026-12-04T10:00:00"),
    ("10.10.2.11", "10.10.8.7", 6, 700, 2049, "2026-12-04T10:00:00"),
    ("10.10.99.99", "8.8.8.8", 17, 5353, 53, "2026-11-01T00:00:00"),
    ("2001:db8::1", "10.10.1.11", 6, 22, 40000, "2026-12-02T10:00:00"),
]


def assert_same_records(a, b) -> None:
    """``a`` and ``b`` (arrays or LabeledFlows) hold the same enriched records."""
    assert len(a) == len(b)
    for name in ENRICHED_DTYPE.names:
        assert np.array_equal(a[name], b[name]), name


def example_batch(times: int = 1) -> np.ndarray:
    f = np.tile(flows(ROWS), times)
    f["bytes"] = np.arange(len(f))  # rows tell apart
    return f
