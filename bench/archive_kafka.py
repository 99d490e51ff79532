"""Archive sink throughput end to end: FlowBatch messages in Kafka -> ArchiveService -> Parquet on S3.

How it works: bench/README.md, "bench/archive_kafka.py"; results: docs/performance.md#archive-sink.

    .venv/bin/python -m bench.archive_kafka [--rows 2000000] [--batch 4096] [--partitions 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import uuid

import numpy as np

from bench.archive import T0, make_batch
from fabricflow.settings import load_settings
from devtools.stack import EmbeddedStack
from fabricflow.kafka import ensure_topics
from schemas import codec
from sinks.archive import service as service_mod
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.service import ArchiveService


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class TimedService(ArchiveService):
    """ArchiveService that times handle (consumer thread), Parquet writes (any thread) and commits,
    and stops itself once ``expect_rows`` rows were consumed."""

    expect_rows = 0
    first_msg: float | None = None
    last_msg: float | None = None
    t_handle = 0.0
    cpu_handle = 0.0
    t_decode = 0.0
    t_write = 0.0
    t_commit = 0.0
    t_stop: float | None = None
    t_flushed: float | None = None

    def flush(self, force: bool = False) -> None:
        super().flush(force)
        if force:
            self.t_flushed = time.perf_counter()

    def handle(self, messages) -> None:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        if self.first_msg is None and messages:
            self.first_msg = t0
        super().handle(messages)
        self.last_msg = time.perf_counter()
        self.t_handle += self.last_msg - t0
        self.cpu_handle += time.thread_time() - c0
        if self.t_stop is None and self.report["rows_in"] >= self.expect_rows:
            self.t_stop = self.last_msg
            self.stop()

    def _commit(self, offsets):
        t0 = time.perf_counter()
        try:
            return super()._commit(offsets)
        finally:
            self.t_commit += time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=4096, help="flow records per Kafka message")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--file-rows", type=int, default=250_000, help="max rows per Parquet file")
    ap.add_argument("--batch-messages", type=int, default=1000, help="max messages per consume() call")
    ap.add_argument("--kafka-port", type=int, default=21092)
    ap.add_argument("--s3-port", type=int, default=21333)
    ap.add_argument("--s3-base-port", type=int, default=21400)
    ap.add_argument("--repeat", type=int, default=1, help="service runs on the same messages (new group each)")
    ap.add_argument("--switch-interval", type=float, help="sys.setswitchinterval for the run (GIL hand-over, s)")
    ap.add_argument("--write-queue-rows", type=int, help="ArchiveService write_queue_rows (0 = no writer thread)")
    ap.add_argument("--enriched", action="store_true",
                    help="EnrichedFlowBatch to flows.enriched (archived with its rollups) instead of raw flows")
    ap.add_argument("--wire", choices=["v2", "v1"], default="v2",
                    help="with --enriched: flows.enriched.v2 (dictionary-coded labels) or the v1 batches (label "
                         "strings per record) on the same topic")
    ap.add_argument("--profile", help="write a cProfile of the service run (consumer thread) to this file")
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)

    state = tempfile.mkdtemp(prefix="ffbench-stack-")
    base = load_settings(None, stack={"state_dir": state, "kafka_port": args.kafka_port, "s3_port": args.s3_port,
                                      "s3_base_port": args.s3_base_port, "storage_engine": "memory"})
    stack = EmbeddedStack(base)
    stack.up()
    try:
        run(args, base, stack)
    finally:
        stack.down()
        shutil.rmtree(state, ignore_errors=True)


def run(args, base, stack) -> None:
    import sinks

    print(f"code under test: {os.path.dirname(os.path.dirname(os.path.abspath(sinks.__file__)))}")
    prefix = f"b{uuid.uuid4().hex[:6]}."
    topics = {k: prefix + v for k, v in base.kafka.topics.model_dump().items() if k != "replay_prefix"}
    o = stack.s3_storage_options()
    s = load_settings(None, kafka={"bootstrap_servers": stack.bootstrap, "partitions": args.partitions,
                                   "topics": topics, "session_timeout_ms": 3000},
                      archive={"url": f"s3://{base.stack.bucket}/bench-{uuid.uuid4().hex[:6]}",
                               "s3_endpoint": o["client_kwargs"]["endpoint_url"], "s3_access_key": o["key"],
                               "s3_secret_key": o["secret"], "grace_s": 60, "idle_flush_s": 2})
    ensure_topics(s.kafka)

    # -- messages: rows spread over two event hours, as ingest batches them
    rng = np.random.default_rng(7)
    n_msgs = args.rows // args.batch
    step = 2 * 3_600_000 // max(n_msgs, 1)
    t0 = time.perf_counter()
    schema, topic, row_schema = (("flow_enriched_batch", s.kafka.topics.flows_enriched, "flow_enriched") if args.enriched
                                 else ("flow_batch", s.kafka.topics.flows_raw, "flow_record"))
    encode = codec.encode_batch
    if args.enriched and args.wire == "v2":
        schema, encode = "flow_enriched_batch_v2", codec.encode_coded
    msgs = [encode(schema, make_batch(rng, args.batch, T0 + i * step, args.enriched)) for i in range(n_msgs)]
    t_encode = time.perf_counter() - t0
    rows = n_msgs * args.batch
    mbytes = sum(len(m) for m in msgs) / 1e6

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 20, "compression.type": "lz4",
                  "message.max.bytes": 10_000_000, "batch.size": 4_000_000})
    t0 = time.perf_counter()
    for i, m in enumerate(msgs):
        while True:
            try:
                p.produce(topic, value=m, partition=i % args.partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    t_produce = time.perf_counter() - t0
    del p

    # -- offline decode of the same messages: codec alone, then codec + Arrow (CPU time, this thread)
    sample = msgs[: max(1, n_msgs // 4)]
    scale = n_msgs / len(sample)
    c0 = time.thread_time()
    arrs = [codec.decode_batch(m) for m in sample]
    c_codec = (time.thread_time() - c0) * scale
    c0 = time.thread_time()
    for a in arrs:
        table_from_columns(a, row_schema)
    c_arrow = (time.thread_time() - c0) * scale
    del msgs, arrs, sample

    print(f"rows={rows:,} messages={n_msgs:,} x {args.batch:,} rows ({mbytes / n_msgs * 1e3:.0f} kB each, "
          f"{mbytes * 1e6 / rows:.1f} B/row on the wire) partitions={args.partitions}")
    print(f"{'stage':<44}{'rows/s':>12}{'seconds':>9}")

    def line(name, secs):
        print(f"{name:<44}{rows / secs:>12,.0f}{secs:>9.2f}")

    line("encode FlowBatch (bench input)", t_encode)
    line("produce to Tansu (bench input)", t_produce)
    line("offline: codec.decode_batch (CPU)", c_codec)
    line("offline: table_from_columns with text (CPU)", c_arrow)
    for r in range(args.repeat):
        one_service_run(args, s, rows, line, r)


def one_service_run(args, s, rows, line, r) -> None:
    # Time the codec inside the service and every Parquet write, whatever thread runs it.
    real_decode = codec.decode_batch
    real_write = ParquetWriter.write
    lock = threading.Lock()
    acc = {"decode": 0.0, "write": 0.0, "write_cpu": 0.0}

    def timed_decode(*a, **k):
        c0 = time.thread_time()
        try:
            return real_decode(*a, **k)
        finally:
            acc["decode"] += time.thread_time() - c0

    def timed_write(self, f):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return real_write(self, f)
        finally:
            with lock:
                acc["write"] += time.perf_counter() - t0
                acc["write_cpu"] += time.thread_time() - c0

    url = s.archive.url.rsplit("/", 1)[0] + f"/bench-{uuid.uuid4().hex[:6]}"  # a fresh archive per run
    s = s.model_copy(update={"archive": s.archive.model_copy(update={"url": url})})
    import sinks.archive.flush as archive_mod  # FileToWrite.table calls build_table there

    real_build = getattr(archive_mod, "build_table", None)
    real_encode = getattr(ParquetWriter, "encode", None)

    def cpu_timed(fn, key):
        def wrapper(*a, **k):
            c0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                with lock:
                    acc[key] = acc.get(key, 0.0) + time.thread_time() - c0
        return wrapper

    service_mod.codec.decode_batch = timed_decode
    real_coded = getattr(service_mod.codec, "decode_coded", None)  # flows.enriched.v2
    if real_coded is not None:
        service_mod.codec.decode_coded = cpu_timed(real_coded, "decode")
    ParquetWriter.write = timed_write
    if real_build is not None:  # the new code: the file's table is built in the writer
        archive_mod.build_table = cpu_timed(real_build, "build")
        ParquetWriter.encode = cpu_timed(real_encode, "encode")
    try:
        extra = {} if args.write_queue_rows is None else {"write_queue_rows": args.write_queue_rows}
        svc = TimedService(s, group_id="bench-" + uuid.uuid4().hex[:6], metrics_port=0,
                           batch_messages=args.batch_messages, max_rows=args.file_rows, **extra)
        svc.expect_rows = rows
        c0 = _cpu()
        t0 = time.perf_counter()
        if args.profile:
            import cProfile

            prof = cProfile.Profile()
            rep = prof.runcall(svc.run, max_seconds=150, idle_exit_s=3)
            prof.dump_stats(args.profile)
        else:
            rep = svc.run(max_seconds=150, idle_exit_s=3)
        t_end = time.perf_counter()
        cpu = _cpu() - c0
    finally:
        service_mod.codec.decode_batch = real_decode
        if real_coded is not None:
            service_mod.codec.decode_coded = real_coded
        ParquetWriter.write = real_write
        if real_build is not None:
            archive_mod.build_table = real_build
            ParquetWriter.encode = real_encode
    assert rep["rows_written"] >= rows, rep  # + the hourly summaries the service archives (enriched input)
    size = sum(svc.fs.du(f"{svc.root}/{'flows_enriched' if args.enriched else 'flows_raw'}", total=False).values())
    print(f"-- service run {r + 1}: files={rep['files_written']} ({size / rows:.1f} B/row in Parquet) "
          f"commits={rep['commits']} batch_messages={args.batch_messages}")
    line("service: codec decode (CPU)", acc["decode"])
    line("service: handle = decode + buffer (CPU)", svc.cpu_handle)
    line("service: handle = decode + buffer (wall)", svc.t_handle)
    line("service: Parquet to S3, summed (wall)", acc["write"])
    line("service: Parquet to S3, summed (CPU)", acc["write_cpu"])
    if "build" in acc:
        line("  of which build the file's table (CPU)", acc["build"])
        line("  of which Parquet encode (CPU)", acc["encode"])
        line("  of which store on S3 (CPU)", acc["write_cpu"] - acc["build"] - acc["encode"])
    if getattr(svc.writer, "rollup_seconds", 0):
        line("  of which rollups: aggregate+encode+store (wall)", svc.writer.rollup_seconds)
        print(f"{'  rollup rows written':<44}{svc.writer.rollup_rows_written:>12,}")
    print(f"{'service: commits (wall)':<44}{'':>12}{svc.t_commit:>9.2f}")
    line("service: first -> last message", svc.last_msg - svc.first_msg)
    line("service: first msg -> all durable+committed", svc.t_flushed - svc.first_msg)
    line("service: wall incl. group join", t_end - t0)
    print(f"{'process CPU-s per 1 M rows (service run)':<44}{cpu * 1e6 / rows:>12.2f}{cpu:>9.2f}")


if __name__ == "__main__":
    main()
