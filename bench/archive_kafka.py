"""Archive sink throughput end to end: FlowBatch messages in Kafka -> ArchiveService -> Parquet on S3.

    .venv/bin/python bench/archive_kafka.py [--rows 2000000] [--batch 4096] [--partitions 2]

Starts its own embedded stack (Tansu memory engine on 127.0.0.1:39092,
SeaweedFS S3 on 127.0.0.1:38333; ``--kafka-port``/``--s3-port`` to move them),
produces ``--rows`` raw flows spread over two event hours as FlowBatch
messages of ``--batch`` rows (as ingest publishes them), then runs one
ArchiveService in this process until every row is written and committed.
Prints rows/s per stage: offline decode (codec + Arrow) of the same
messages; the service's busy time (decode + buffer, Parquet to S3 + commit);
its wall time from the first to the last message (writes of closed hours
happen meanwhile); and the whole run including the consumer group join and
the idle flush of the last open hour. One process, one thread. Stops the
stack at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.archive import T0, make_batch  # noqa: E402
from fabricflow.settings import load_settings  # noqa: E402
from fabricflow.stack import EmbeddedStack  # noqa: E402
from fabricflow.topics import ensure_topics  # noqa: E402
from schemas import codec  # noqa: E402
from sinks.arrow_schema import table_from_columns  # noqa: E402
from sinks.service import ArchiveService  # noqa: E402


class TimedService(ArchiveService):
    """ArchiveService that times decode+buffer (handle) and write+commit (plans with files)."""

    first_msg: float | None = None
    last_msg: float | None = None
    last_write: float | None = None
    t_handle = 0.0
    t_write = 0.0

    def handle(self, messages) -> None:
        t0 = time.perf_counter()
        if self.first_msg is None and messages:
            self.first_msg = t0
        super().handle(messages)
        self.last_msg = time.perf_counter()
        self.t_handle += self.last_msg - t0

    def _execute(self, plan, force=False):
        t0 = time.perf_counter()
        ok = super()._execute(plan, force)
        if plan.files:
            self.last_write = time.perf_counter()
            self.t_write += self.last_write - t0
        return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=4096, help="flow records per Kafka message")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--file-rows", type=int, default=250_000, help="max rows per Parquet file")
    ap.add_argument("--kafka-port", type=int, default=39092)
    ap.add_argument("--s3-port", type=int, default=38333)
    ap.add_argument("--s3-base-port", type=int, default=38400)
    args = ap.parse_args()

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
    msgs = [codec.encode_batch("flow_batch", make_batch(rng, args.batch, T0 + i * step, False)) for i in range(n_msgs)]
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
                p.produce(s.kafka.topics.flows_raw, value=m, partition=i % args.partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    t_produce = time.perf_counter() - t0

    # -- offline decode of the same messages (what the service does per message before buffering)
    t0 = time.perf_counter()
    for m in msgs[: max(1, n_msgs // 4)]:
        table_from_columns(codec.decode_batch(m), "flow_record")
    t_decode = (time.perf_counter() - t0) * n_msgs / max(1, n_msgs // 4)
    del msgs

    # -- the service
    svc = TimedService(s, group_id="bench-" + uuid.uuid4().hex[:6], metrics_port=0, batch_messages=64,
                       max_rows=args.file_rows)
    t0 = time.perf_counter()
    rep = svc.run(max_seconds=150, idle_exit_s=3)
    t_run = time.perf_counter() - t0
    assert rep["rows_written"] == rows, rep
    t_consume = svc.last_msg - svc.first_msg
    t_busy = svc.t_handle + svc.t_write
    fs = svc.fs
    size = sum(fs.du(f"{svc.root}/flows_raw", total=False).values())

    print(f"rows={rows:,} messages={n_msgs:,} x {args.batch:,} rows ({mbytes / n_msgs * 1e3:.0f} kB each, "
          f"{mbytes * 1e6 / rows:.1f} B/row on the wire) partitions={args.partitions} "
          f"files={rep['files_written']} ({size / rows:.1f} B/row in Parquet) commits={rep['commits']}")
    print(f"{'stage':<34}{'rows/s':>14}{'seconds':>10}")
    for name, secs in (
        ("encode FlowBatch (bench input)", t_encode),
        ("produce to Tansu (bench input)", t_produce),
        ("decode + Arrow (offline, 1 core)", t_decode),
        ("service: decode + buffer", svc.t_handle),
        ("service: Parquet to S3 + commit", svc.t_write),
        ("service: busy (the two above)", t_busy),
        ("service: first -> last message", t_consume),
        ("service: wall incl. join + idle", t_run),
    ):
        print(f"{name:<34}{rows / secs:>14,.0f}{secs:>10.2f}")


if __name__ == "__main__":
    main()
