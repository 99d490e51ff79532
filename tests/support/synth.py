"""Synthetic raw flow batches for an 8-node training job (tests only; the simulator makes real datagrams).

Ring collective gpu-i -> gpu-(i+1) every second; ``straggler`` sends ``slow``
of its peers' volume; an incast burst of 6 sources into gpu-1 at ``incast_at_s``.
An unregistered host (10.30.0.99) talks to gpu-1 between ``unregistered`` seconds.
Sampling rate 100 so estimates are scaled. Returns batches of FLOW_DTYPE as an
exporter would produce them (one per second per switch).
"""

from __future__ import annotations

import numpy as np

from schemas.columns import empty_flows, v4_column_to_addr16

GPU = [0x0A1E0000 + i for i in range(1, 9)]  # 10.30.0.1 .. 10.30.0.8
EXPORTERS = ["10.0.0.1", "10.0.0.2"]  # tor-1, tor-2


def filled(rows: np.ndarray, **columns) -> np.ndarray:
    """``rows`` (a structured array, e.g. ``empty_flows(n)``) with each named column set; a scalar or a
    row-shaped value is broadcast over every row."""
    for name, value in columns.items():
        rows[name] = value
    return rows


def _flows(src, dst, nbytes, t_ms, rate=100, sport=45000, dport=50000):
    packets = np.maximum(1, nbytes // 9000)
    return filled(
        empty_flows(len(src)), export_protocol=1, sampling_rate=rate, packets=packets, bytes=nbytes,
        packets_est=packets * rate, bytes_est=nbytes * rate, ip_version=4, ip_protocol=6, src_port=sport, dst_port=dport,
        src_addr=v4_column_to_addr16(np.asarray(src, dtype=np.uint32)),
        dst_addr=v4_column_to_addr16(np.asarray(dst, dtype=np.uint32)),
        time_start_ms=t_ms, time_end_ms=t_ms, time_received_ms=t_ms, time_export_ms=t_ms,
    )


UNREGISTERED = 0x0A1E0063  # 10.30.0.99: inside the cluster ranges, not in the inventory


def training_batches(start_ms=1_767_225_600_000, seconds=60, straggler=3, slow=0.4, incast_at_s=30, seed=1, unregistered=(10, 40)):
    """list of (exporter, FLOW_DTYPE batch) in time order."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(seconds):
        t = start_ms + s * 1000
        src = np.array(GPU)
        dst = np.roll(src, -1)
        vol = np.full(8, 2_000_000, dtype=np.int64)  # sampled bytes per second per ring hop
        vol[straggler - 1] = int(vol[straggler - 1] * slow)
        vol = vol + rng.integers(0, 20_000, 8)
        times = t + rng.integers(0, 900, 8)
        f = _flows(src, dst, vol, times)
        if s == incast_at_s:
            senders = np.array(GPU[1:7])
            burst = _flows(senders, np.full(6, GPU[0]), np.full(6, 5_000_000, dtype=np.int64), np.full(6, t + 950), dport=29400)
            f = np.concatenate([f, burst])
        if unregistered and unregistered[0] <= s < unregistered[1]:
            rogue = _flows(np.array([UNREGISTERED]), np.array([GPU[0]]), np.array([400_000]), np.array([t + 500]), dport=22)
            f = np.concatenate([f, rogue])
        for i, exp in enumerate(EXPORTERS):
            half = f[((f["src_addr"][:, 15] <= 4) | (f["src_addr"][:, 15] == 99)) == (i == 0)]
            out.append((exp, half))
    return out
