"""``IngestPipeline.handle_many`` (sFlow decoded by one columnar call per pass) equals ``handle`` one by one.

The same datagram sequence -- real pmacct sFlow captures, the bench's synthetic
sFlow stream, broken/garbage datagrams, NetFlow v9/IPFIX/v5 captures mixed in,
several exporters (one not allowed) with per-datagram receive times -- goes
through ``handle()`` one datagram at a time and through ``handle_many()`` in
chunks of random size; the published flow and counter batches (byte for byte,
in order, same exporters and flush points), the DLQ entries and every metric
sample must be identical.
"""

from __future__ import annotations

import gc
import logging
import random
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ingest.pipeline as pipeline_mod
from devtools.sflow_build import synthetic
from fabricflow.settings import load_settings
from ingest.decode import DecodeError
from ingest.listener import parse_listen
from ingest.metrics import IngestMetrics
from ingest.pcapread import read_udp
from ingest.pipeline import SFLOW_MANY_MIN, IngestPipeline
from ingest.service import IngestWorker
from tests.support.fixtures_path import SHARED_FIXTURES

from tests.support.ingest_sinks import FakeSink

CAPTURES = Path(__file__).resolve().parents[2] / "captures"
EXPORTERS = ["192.0.2.1", "192.0.2.2", "2001:db8::3", "198.51.100.9"]  # the last one is not allowed
ALLOW = ["192.0.2.0/24", "2001:db8::/32"]


def _pcap(path: Path) -> list[bytes]:
    if not path.exists():
        pytest.skip(f"{path.name} not present")
    return [p.payload for p in read_udp(path)]


def _garbage(rng: random.Random, sflow: list[bytes]) -> list[bytes]:
    """Broken sFlow (truncated, mutated words, bad version/address type) and non-sFlow garbage."""
    out = [b"", b"\x00\x00\x00\x05", b"\x00\x00\x00\x05" + bytes(19), b"\xff" * 30, b"\x00\x0a\x00\x05garbage",
           b"\x00\x00\x00\x05\x00\x00\x00\x07" + bytes(40), b"\x00\x00\x00\x04" + bytes(60)]
    for _ in range(60):
        d = bytearray(rng.choice(sflow))
        kind = rng.randrange(3)
        if kind == 0:
            d = d[: rng.randrange(4, len(d))]
        elif kind == 1:
            o = rng.randrange(0, len(d) - 4) & ~3
            d[o : o + 4] = struct.pack("!I", rng.choice([0, 1, 2, 3, 4, 16, 1001, 1002, 0xFFFFFFFF]))
        else:
            d[rng.randrange(len(d))] = rng.randrange(256)
        out.append(bytes(d))
    return out


def _stream(seed: int) -> list[tuple[bytes, str, int]]:
    """(datagram, exporter, received_ms) in arrival order; each source's datagrams keep their own order."""
    rng = random.Random(seed)
    exports = SHARED_FIXTURES / "exports"
    sflow_real = _pcap(exports / "pmacct_sfprobe_rate1.pcap")[:300] + _pcap(exports / "pmacct_sfprobe_rate8.pcap")
    fabric = _pcap(CAPTURES / "pmacct_sfprobe_fabric" / "pmacct_sfprobe_fabric.pcap")
    synth = synthetic(200, 7, seed=seed)
    netflow = (_pcap(exports / "softflowd_v9.pcap") + _pcap(exports / "softflowd_ipfix.pcap")
               + _pcap(CAPTURES / "softflowd_v5" / "softflowd_v5.pcap"))
    sources = [
        (EXPORTERS[0], sflow_real),
        (EXPORTERS[1], synth + _garbage(rng, synth)),
        (EXPORTERS[2], fabric + netflow),  # one exporter sending sFlow and NetFlow
        (EXPORTERS[1], netflow),  # NetFlow from an sFlow exporter's address too
        (EXPORTERS[3], sflow_real[:50]),
    ]
    queues = [list(q) for _e, q in sources]
    out, t = [], 1_700_000_000_000
    while any(queues):
        i = rng.choice([j for j, q in enumerate(queues) if q])
        t += rng.randrange(0, 3)
        out.append((queues[i].pop(0), sources[i][0], t))
    return out


def _pipeline(**ingest):
    s = load_settings(None, ingest={"allowlist": ALLOW, "dlq_max_per_s": 1e9, **ingest})
    sink, m = FakeSink(), IngestMetrics()
    return IngestPipeline(s.ingest, sink, m), sink, m


def _metrics(m: IngestMetrics) -> dict:
    out = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _published(sink: FakeSink):
    return (
        [(e, a.dtype.str, a.tobytes()) for e, a in sink.flows],
        [(e, a.dtype.str, a.tobytes()) for e, a in sink.counters],
        list(sink.dlq),
    )


def _run_one(items, flush_at, **ingest):
    p, sink, m = _pipeline(**ingest)
    for j, (d, e, t) in enumerate(items):
        p.handle(d, e, t)
        if j in flush_at:
            p.maybe_flush()
    p.flush()
    return _published(sink), _metrics(m)


def _run_many(items, chunks, **ingest):
    p, sink, m = _pipeline(**ingest)
    flush_at, j = set(), 0
    for n in chunks:
        part = items[j : j + n]
        if not part:
            break
        p.handle_many([d for d, _e, _t in part], [e for _d, e, _t in part], [t for _d, _e, t in part])
        p.maybe_flush()
        j += n
        flush_at.add(j - 1)
    assert j >= len(items)
    p.flush()
    return _published(sink), _metrics(m), flush_at


@pytest.fixture
def count_many(monkeypatch):
    calls = []
    real = pipeline_mod.decode_sflow_group

    def spy(datagrams, *a, **k):
        calls.append(len(datagrams))
        return real(datagrams, *a, **k)

    monkeypatch.setattr(pipeline_mod, "decode_sflow_group", spy)
    return calls


@pytest.mark.parametrize("seed,batch_max,event_time", [(1, 4096, "receive"), (2, 100, "uptime"), (3, 7, "receive")])
def test_handle_many_equals_handle(seed, batch_max, event_time, count_many):
    items = _stream(seed)
    rng = random.Random(seed)
    chunks = [rng.choice([1, 3, SFLOW_MANY_MIN - 1, SFLOW_MANY_MIN, 64, 200, 512]) for _ in range(len(items))]
    ingest = {"batch_max_records": batch_max, "sflow_event_time": event_time, "batch_max_delay_ms": 60_000}
    got, got_m, flush_at = _run_many(items, chunks, **ingest)
    want, want_m = _run_one(items, flush_at, **ingest)
    assert count_many and max(count_many) >= SFLOW_MANY_MIN  # the columnar path was taken
    flows, counters, dlq = want
    assert flows and counters and dlq  # the stream exercises all three outputs
    assert len(got[0]) == len(flows)
    assert [(e, len(b)) for e, _dt, b in got[0]] == [(e, len(b)) for e, _dt, b in flows]  # same flush points
    assert got[0] == flows
    assert got[1] == counters
    assert got[2] == dlq
    assert got_m == want_m
    assert any(k[0] == "fabricflow_ingest_not_allowed_datagrams_total" and v for k, v in want_m.items())
    assert any(k[0] == "fabricflow_ingest_decode_errors_total" and dict(k[1])["protocol"] == "sflow5" and v
               for k, v in want_m.items())


def test_counter_samples_unchanged_by_batching(count_many):
    """The pmacct capture's counter samples: same rows, times and counts through both paths."""
    data = _pcap(SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate1.pcap")
    items = [(d, EXPORTERS[0], 1_700_000_000_000 + i) for i, d in enumerate(data)]
    got, got_m, flush_at = _run_many(items, [len(items)])
    want, want_m = _run_one(items, flush_at)
    assert count_many == [len(items)]
    assert want[1] and got[1] == want[1]
    assert got[0] == want[0] and got_m == want_m
    ctr = [k for k in want_m if k[0] == "fabricflow_ingest_records_total" and dict(k[1])["kind"] == "counter"]
    assert ctr and want_m[ctr[0]] > 0


def test_columnar_failure_falls_back_per_datagram(monkeypatch):
    """A decode_sflow_group bug: every datagram is decoded on its own, nothing lost or miscounted."""
    items = _stream(4)[:400]

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    got_ref, got_ref_m, flush_at = _run_many(items, [200, 200])
    monkeypatch.setattr(pipeline_mod, "decode_sflow_group", broken)
    got, got_m, _ = _run_many(items, [200, 200])
    assert got == got_ref and got_m == got_ref_m


def test_rejected_datagrams_leave_no_reference_cycles(caplog):
    """Found while fuzzing (RSS grew without bound between full collections): a DecodeError kept with the
    traceback of the frame that holds it is a reference cycle, and one from the columnar group kept the whole
    group's rows alive until the next full collection. Rejected datagrams must be freed by reference counting."""
    data = synthetic(SFLOW_MANY_MIN, 2, seed=3)
    bad = [b"\x00\x00\x00\x05\x00\x00\x00\x07" + bytes(40), data[0][:30], b"\x00\x0a\x00\x05garbage"]
    caplog.set_level(logging.ERROR, logger="fabricflow")  # captured log records would hold the errors
    p, sink, _m = _pipeline()
    p.handle_many(data + bad, EXPORTERS[0], 1_700_000_000_000)  # warm: caches, metric children

    def alive() -> int:
        return sum(isinstance(o, DecodeError) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = alive()
        for _ in range(3):
            p.handle_many(data + bad, EXPORTERS[0], 1_700_000_000_000)
        after = alive()
    finally:
        gc.enable()
    assert len(sink.dlq) == 4 * len(bad)  # they were rejected (and sampled to the DLQ) ...
    assert after == before  # ... and nothing of them is left waiting for the cycle collector


def test_single_exporter_and_single_time_arguments():
    data = synthetic(80, 7, seed=9)
    p1, s1, m1 = _pipeline()
    p1.handle_many(data, EXPORTERS[0], 1_700_000_000_000)
    p1.flush()
    p2, s2, m2 = _pipeline()
    for d in data:
        p2.handle(d, EXPORTERS[0], 1_700_000_000_000)
    p2.flush()
    assert _published(s1) == _published(s2) and _metrics(m1) == _metrics(m2)
    p1.handle_many([], [], [])  # no-op


def test_worker_receive_loop_hands_datagrams_over_in_order():
    """IngestWorker over loopback UDP: held datagrams reach the pipeline in arrival order, none left behind."""
    data = synthetic(300, 7, seed=5)
    settings = load_settings(None, ingest={"allowlist": ["127.0.0.0/8"], "rcvbuf_bytes": 8 << 20,
                                           "metrics_port": 0, "batch_max_delay_ms": 50})
    sink = FakeSink()
    w = IngestWorker(settings, [parse_listen("sflow://127.0.0.1:0")], sink=sink)
    w.open()
    port = w.sockets[0][0].getsockname()[1]
    seen: list[int] = []
    real = w.pipeline.handle_many

    def spy(datagrams, exporters, received_ms):
        seen.append(len(datagrams))
        real(datagrams, exporters, received_ms)

    w.pipeline.handle_many = spy
    th = threading.Thread(target=w.run, kwargs={"max_seconds": 30})
    th.start()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for i, d in enumerate(data):
            s.sendto(d, ("127.0.0.1", port))
            if i % 20 == 19:  # small bursts: fits a default-sized receive buffer
                time.sleep(0.005)
        end = time.monotonic() + 10
        while sum(seen) < len(data) and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        w.stopping = True
        th.join(15)
        s.close()
    assert sum(seen) == len(data)
    p, ref, _m = _pipeline(allowlist=["127.0.0.0/8"])
    for d in data:
        p.handle(d, "127.0.0.1", 0)
    p.flush()
    assert sum(len(a) for _e, a in sink.flows) == sum(len(a) for _e, a in ref.flows) > 0

    def strip(arrs):  # receive times come from the worker's clock: masked
        a = np.concatenate(arrs) if arrs else np.zeros(0)
        for f in ("time_start_ms", "time_end_ms", "time_received_ms", "time_export_ms"):
            a[f] = 0
        return a.tobytes()

    assert strip([a for _e, a in sink.flows]) == strip([a for _e, a in ref.flows])


class _QualitySink(FakeSink):
    def __init__(self):
        super().__init__()
        self.quality = []

    def publish_quality(self, exporter, value):
        from schemas import codec

        self.quality.append(codec.decode_record(value, expect="ingest_quality"))
        return True


@pytest.mark.parametrize("seed,event_time", [(5, "receive"), (6, "uptime")])
def test_quality_windows_equal_through_both_paths(seed, event_time, count_many):
    """ingest.quality.v1 records (datagrams, records, sequence loss per exporter and window) are the same
    whether plain sFlow runs go through the columnar path or one datagram at a time, also with windows of
    50 ms that runs straddle; a dropped datagram shows as loss either way."""
    items = _stream(seed)
    del items[100]  # one datagram lost on the way
    rng = random.Random(seed)
    chunks = [rng.choice([1, SFLOW_MANY_MIN, 64, 512]) for _ in range(len(items))]
    s = load_settings(None, ingest={"allowlist": ALLOW, "dlq_max_per_s": 1e9, "quality_window_s": 0.05,
                                    "sflow_event_time": event_time})

    def run(many: bool):
        sink = _QualitySink()
        p = IngestPipeline(s.ingest, sink, IngestMetrics())
        j = 0
        for n in chunks:
            part = items[j : j + n]
            if not part:
                break
            if many:
                p.handle_many([d for d, _e, _t in part], [e for _d, e, _t in part], [t for _d, _e, t in part])
            else:
                for d, e, t in part:
                    p.handle(d, e, t)
            j += n
        p.close()
        key = lambda r: (r["window_start_ms"], r["exporter"], r["protocol"])  # noqa: E731
        return sorted(sink.quality, key=key)

    got, want = run(True), run(False)
    assert count_many and max(count_many) >= SFLOW_MANY_MIN  # the columnar path was taken
    assert got == want
    sflow = [r for r in want if r["protocol"] == "sflow5"]
    assert len({r["window_start_ms"] for r in sflow}) > 10  # many windows: runs straddle their edges
    assert sum(r["datagrams"] for r in sflow) > 500 and sum(r["sequence_lost"] for r in want) > 0
