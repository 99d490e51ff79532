"""Decode throughput of the NetFlow v5 / v9 / IPFIX decoders on one core.

How it works: bench/README.md, "bench/decode_netflow.py"; results: docs/performance.md#netflow-v5-v9-and-ipfix.

    .venv/bin/python -m bench.decode_netflow [--seconds 2]
    .venv/bin/python -m bench.decode_netflow --pipeline [--compare /work/main] [--rounds 3]
    .venv/bin/python -m bench.decode_netflow --gather
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from pathlib import Path

from ingest.decode import TemplateCache, decode

_ROOT = Path(__file__).resolve().parents[1]
# ``--code DIR`` (``--gather``, and ``--compare``'s child runs): the script runs again with PYTHONPATH=DIR and ``-P``
# (no script folder on sys.path), so it measures the decoders of that checkout; it edits no sys.path.
_CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv else str(_ROOT)


EXPORT_S = 1_719_835_200
UPTIME = 3_600_000
# softflowd's IPv4 template (IE, length): 42-byte records.
V4_FIELDS = [(8, 4), (12, 4), (22, 4), (21, 4), (1, 4), (2, 4), (10, 4), (14, 4), (61, 1), (136, 1), (7, 2), (11, 2), (4, 1), (6, 1), (60, 1), (5, 1)]


def _v4_record(rng: random.Random) -> bytes:
    first = UPTIME - rng.randrange(1, 60_000)
    return struct.pack(
        "!4s4sIIIIIIBBHHBBBB",
        bytes([10, 30, 0, rng.randrange(1, 9)]), bytes([10, 30, 0, rng.randrange(1, 9)]),
        first, first + rng.randrange(0, 30_000), rng.randrange(40, 10**7), rng.randrange(1, 10**4),
        3, 4, 0, 2, rng.randrange(1024, 65535), 4791, 17, 0, 4, 0x68,
    )


def v5_datagrams(k: int, nrec: int = 30) -> list[bytes]:
    rng = random.Random(5)
    out = []
    for i in range(k):
        hdr = struct.pack("!HHIIIIBBH", 5, nrec, UPTIME, EXPORT_S, 0, i * nrec, 0, 0, 0x4000 | 1)
        recs = b"".join(
            struct.pack(
                "!4s4s4sHHIIIIHHBBBBHHBBH",
                bytes([10, 30, 0, rng.randrange(1, 9)]), bytes([10, 30, 0, rng.randrange(1, 9)]), bytes(4),
                3, 4, rng.randrange(1, 10**4), rng.randrange(40, 10**7), UPTIME - 50_000, UPTIME - 10,
                rng.randrange(1024, 65535), 4791, 0, 0x18, 17, 0, 0, 0, 24, 24, 0,
            )
            for _ in range(nrec)
        )
        out.append(hdr + recs)
    return out


def _v9_template() -> bytes:
    body = struct.pack("!HH", 1024, len(V4_FIELDS)) + b"".join(struct.pack("!HH", ie, ln) for ie, ln in V4_FIELDS)
    opt = struct.pack("!HHH", 256, 4, 8) + struct.pack("!HHHHHH", 1, 4, 34, 4, 35, 1)
    opt_data = struct.pack("!IIB", 0, 1, 2) + bytes(3)
    return (struct.pack("!HH", 0, 4 + len(body)) + body + struct.pack("!HH", 1, 4 + len(opt) + 2) + opt + bytes(2)
            + struct.pack("!HH", 256, 4 + len(opt_data)) + opt_data)


def v9_datagrams(k: int, nrec: int = 33) -> list[bytes]:
    rng = random.Random(9)
    out = [struct.pack("!HHIIII", 9, 1, UPTIME, EXPORT_S, 0, 0) + _v9_template()]
    for i in range(k):
        recs = b"".join(_v4_record(rng) for _ in range(nrec))
        pad = (-len(recs)) % 4
        fs = struct.pack("!HH", 1024, 4 + len(recs) + pad) + recs + bytes(pad)
        out.append(struct.pack("!HHIIII", 9, nrec, UPTIME, EXPORT_S, i + 1, 0) + fs)
    return out


def ipfix_datagrams(k: int, nrec: int = 33) -> list[bytes]:
    rng = random.Random(10)
    tmpl = struct.pack("!HH", 1024, len(V4_FIELDS)) + b"".join(struct.pack("!HH", ie, ln) for ie, ln in V4_FIELDS)
    opt = struct.pack("!HHH", 256, 4, 1) + struct.pack("!HHHHHHHH", 143, 4, 160, 8, 305, 4, 306, 4)
    opt_data = struct.pack("!IQII", 0, EXPORT_S * 1000 - UPTIME, 1, 0)
    sets = (struct.pack("!HH", 2, 4 + len(tmpl)) + tmpl + struct.pack("!HH", 3, 4 + len(opt)) + opt
            + struct.pack("!HH", 256, 4 + len(opt_data)) + opt_data)
    out = [struct.pack("!HHIII", 10, 16 + len(sets), EXPORT_S, 0, 0) + sets]
    seq = 0
    for _ in range(k):
        recs = b"".join(_v4_record(rng) for _ in range(nrec))
        s = struct.pack("!HH", 1024, 4 + len(recs)) + recs
        seq += nrec
        out.append(struct.pack("!HHIII", 10, 16 + len(s), EXPORT_S, seq, 0) + s)
    return out


def fixture_datagrams(name: str) -> list[bytes]:
    try:
        import dpkt

        from tests.support.fixtures_path import SHARED_FIXTURES
    except ImportError:
        return []
    path = SHARED_FIXTURES / "exports" / f"{name}.pcap"
    if not path.exists():
        return []
    with open(path, "rb") as fh:
        return [bytes(dpkt.ethernet.Ethernet(buf).data.data.data) for _ts, buf in dpkt.pcap.Reader(fh)]


def run(name: str, datagrams: list[bytes], seconds: float, warm: int) -> None:
    cache = TemplateCache(expiry_s=0)
    for d in datagrams[:warm]:
        decode(d, "192.0.2.1", 0, cache)
    data = datagrams[warm:] or datagrams
    records = loops = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while True:
        for d in data:
            records += len(decode(d, "192.0.2.1", 0, cache).flows)
        loops += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            break
    cpu = max(time.process_time() - c0, 1e-9)
    dg = loops * len(data)
    print(f"{name:26s} {records / el:12,.0f} records/s wall  {records / cpu:12,.0f} records/CPU-s  "
          f"{dg / el:9,.0f} datagrams/s  ({records / dg:.1f} records/datagram)")


def run_batched(name: str, datagrams: list[bytes], seconds: float, warm: int, batch_max: int = 4096) -> None:
    """``decode_into`` + ``FlowBatch.decode`` every ``batch_max`` records (the ingest pipeline's path)."""
    try:
        from ingest.decode import decode_into
        from ingest.decode.batch import FlowBatch
    except ImportError:
        return
    cache = TemplateCache(expiry_s=0)
    for d in datagrams[:warm]:
        decode(d, "192.0.2.1", 0, cache)
    data = datagrams[warm:] or datagrams
    records = loops = 0
    batch = FlowBatch()
    c0 = time.process_time()
    t0 = time.perf_counter()
    while True:
        for d in data:
            r = decode_into(d, "192.0.2.1", 0, cache, batch)
            if len(r.flows):
                batch.add_rows(r.flows)
            if batch.records >= batch_max:
                records += len(batch.decode())
                batch = FlowBatch()
        loops += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            break
    records += len(batch.decode())
    cpu = max(time.process_time() - c0, 1e-9)
    dg = loops * len(data)
    print(f"{name + ' batched':26s} {records / el:12,.0f} records/s wall  {records / cpu:12,.0f} records/CPU-s  "
          f"{dg / el:9,.0f} datagrams/s  ({records / dg:.1f} records/datagram)")


class _Discard:
    """Sink that counts published flow records and drops them."""

    def __init__(self):
        self.records = 0

    def publish_flows(self, exporter, flows) -> bool:
        self.records += len(flows)
        return True

    def publish_counters(self, exporter, counters) -> bool:
        return True

    def publish_dlq(self, *a, **k) -> bool:
        return True


def pipeline_run(proto: str, seconds: float, profile: str | None = None) -> dict:
    """CPU-s per 1 M records of ``IngestPipeline.handle`` + flush (discard sink) on softflowd-shaped datagrams."""
    from devtools.loadgen import netflow_stream
    from fabricflow.settings import load_settings
    from ingest.metrics import IngestMetrics
    from ingest.pipeline import IngestPipeline

    try:  # what IngestWorker does at start (absent in older trees)
        from ingest.service import tune_allocator

        tune_allocator()
    except ImportError:
        pass
    st = netflow_stream(9 if proto == "netflow9" else 10)
    sink = _Discard()
    p = IngestPipeline(load_settings(None).ingest, sink, IngestMetrics())
    handle, maybe_flush = p.handle, p.maybe_flush
    bufs = [bytearray(d) for d in st.data]
    tmpl = [bytearray(t) for t in st.templates]
    off, per_rec = st.seq_offset, st.seq_per_record
    pack = struct.pack_into
    recv_ms = EXPORT_S * 1000 + 40
    exporter = "192.0.2.1"
    seq = 0
    records = datagrams = 0
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    c0 = time.process_time()
    t0 = time.perf_counter()
    i = 0
    while True:
        for _ in range(256):
            if i % 1000 == 0:
                for t in tmpl:
                    pack("!I", t, off, seq & 0xFFFFFFFF)
                    if not per_rec:
                        seq += 1
                    handle(bytes(t), exporter, recv_ms)
            k = i % len(bufs)
            b = bufs[k]
            pack("!I", b, off, seq & 0xFFFFFFFF)
            seq += st.records[k] if per_rec else 1
            handle(bytes(b), exporter, recv_ms)
            records += st.records[k]
            i += 1
            if i % 32 == 0:
                maybe_flush()
        if time.perf_counter() - t0 >= seconds:
            break
    p.flush()
    cpu = time.process_time() - c0
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    assert sink.records == records, (sink.records, records)
    return {"proto": proto, "records": records, "datagrams": i, "cpu_s": cpu,
            "cpu_s_per_1m": cpu / records * 1e6, "records_per_cpu_s": records / cpu}


def _child(code: str, proto: str, seconds: float) -> dict:
    import json
    import os
    import subprocess

    out = subprocess.run([sys.executable, "-P", __file__, "--pipeline", "--protocols", proto, "--seconds", str(seconds),
                          "--code", code, "--json-line"], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": code}).stdout
    return json.loads(out.strip().splitlines()[-1])


def gather_times(sizes=(1, 8, 30, 64, 128, 200, 512, 2000), repeat: int = 9) -> None:
    """Per data set: ``Plan.gather`` (cached table up to its row limit, column kernel above) against the
    column kernel alone, microseconds, min of ``repeat`` runs; the record layout of softflowd IPFIX."""
    import timeit

    import numpy as np

    from ingest.decode import batch

    if not hasattr(batch, "gather_paths"):
        sys.exit(f"{_CODE}: no ingest.decode.batch.gather_paths (a tree from before the bounded gather tables)")
    fields = [(8, 0, 4), (12, 0, 4), (7, 0, 2), (11, 0, 2), (4, 0, 1), (6, 0, 1), (5, 0, 1), (10, 0, 4), (14, 0, 4),
              (1, 0, 8), (2, 0, 8), (152, 0, 8), (153, 0, 8), (60, 0, 1)]
    rec_len, gather, columns, table_rows = batch.gather_paths(fields)
    print(f"records/set  Plan.gather us  column kernel us   (table rows: {table_rows})")
    for n in sizes:
        body = np.random.default_rng(1).integers(0, 256, n * rec_len, dtype=np.uint8).tobytes()
        num = max(10, 4000 // n)
        t = min(timeit.repeat(lambda: gather(body, n), number=num, repeat=repeat)) / num * 1e6
        c = (min(timeit.repeat(lambda: columns(body, n), number=num, repeat=repeat)) / num * 1e6
             if columns is not None else float("nan"))
        print(f"{n:11d}  {t:13.1f}  {c:16.1f}")


def _run_on(code: str) -> None:
    """With ``--code DIR``: unless the decoders already come from DIR, run this script again on DIR's code
    (PYTHONPATH=DIR, ``-P``: no script folder on sys.path); returns only when they come from DIR."""
    import ingest
    import os

    if Path(ingest.__file__).resolve().is_relative_to(Path(code).resolve()):
        return
    os.execve(sys.executable, [sys.executable, "-P", __file__, *sys.argv[1:]], {**os.environ, "PYTHONPATH": code})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pipeline", action="store_true", help="measure IngestPipeline.handle + flush instead of decode()")
    ap.add_argument("--protocols", default="netflow9,ipfix", help="with --pipeline")
    ap.add_argument("--compare", help="with --pipeline: another checkout to measure side by side (alternating runs)")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare: alternating runs per tree")
    ap.add_argument("--profile", help="with --pipeline: write a cProfile here (one protocol)")
    ap.add_argument("--gather", action="store_true", help="time the record gather per data set size instead")
    ap.add_argument("--code", help=argparse.SUPPRESS)
    ap.add_argument("--json-line", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.code:
        _run_on(a.code)
    if a.gather:
        gather_times()
        return
    if a.pipeline:
        import json

        protos = [x for x in a.protocols.split(",") if x]
        if a.compare:
            for proto in protos:
                res: dict = {"this": [], "other": []}
                for _ in range(a.rounds):
                    res["this"].append(_child(str(_ROOT), proto, a.seconds)["cpu_s_per_1m"])
                    res["other"].append(_child(a.compare, proto, a.seconds)["cpu_s_per_1m"])
                this, other = min(res["this"]), min(res["other"])
                runs_this = ", ".join(f"{v:.3f}" for v in res["this"])
                runs_other = ", ".join(f"{v:.3f}" for v in res["other"])
                print(f"{proto:9s} CPU-s per 1 M records: this tree {this:.3f} (runs {runs_this}), "
                      f"{a.compare} {other:.3f} (runs {runs_other}): {other / this:.2f}x")
            return
        for proto in protos:
            r = pipeline_run(proto, a.seconds, a.profile)
            if a.json_line:
                print(json.dumps(r))
            else:
                print(f"{proto:9s} pipeline (discard sink) {r['records_per_cpu_s']:12,.0f} records/CPU-s  "
                      f"{r['cpu_s_per_1m']:.3f} CPU-s per 1 M records  ({r['datagrams']:,} datagrams)")
        return
    try:
        from ingest.service import tune_allocator

        tune_allocator()
    except ImportError:
        pass
    run("netflow5 (30/dgram)", v5_datagrams(200), a.seconds, 0)
    for name, dgs in (("netflow9 (33/dgram)", v9_datagrams(200)), ("ipfix (33/dgram)", ipfix_datagrams(200))):
        run(name, dgs, a.seconds, 1)
        run_batched(name, dgs, a.seconds, 1)
    for name in ("softflowd_v9", "softflowd_ipfix"):
        d = fixture_datagrams(name)
        if d:
            # the template datagram stays in the loop (it is re-decoded as a refresh)
            run(f"{name} (fixture)", d, a.seconds, 0)
            run_batched(f"{name} (fixture)", d, a.seconds, 0)


if __name__ == "__main__":
    main()
