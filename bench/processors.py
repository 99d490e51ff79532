"""Benchmark: records/s through one processor worker (Faust) on the embedded broker, and through the pure core.

How it works: bench/README.md, "bench/processors.py"; results: docs/performance.md#processors.

    .venv/bin/python -m bench.processors [--messages 240 --records 4096 --nodes 256 --job-size 32]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The code measured: this checkout, or FF_BENCH_CODE=/other/checkout (baselines; bench/ never on sys.path: it shadows)
CODE = Path(os.environ.get("FF_BENCH_CODE") or REPO).resolve()


def _run_on_code() -> None:
    """Run again with ``PYTHONPATH=CODE:REPO`` and ``-P`` unless so run (no sys.path edit; as decode_netflow)."""
    path = os.pathsep.join((str(CODE), str(REPO)))
    if not (sys.flags.safe_path and os.environ.get("PYTHONPATH") == path):
        os.execve(sys.executable, [sys.executable, "-P", str(Path(__file__).resolve()), *sys.argv[1:]],
                  {**os.environ, "PYTHONPATH": path})


_run_on_code()

from devtools.loadgen import pin  # noqa: E402
from bench.processors_input import inventory_dict, make_input  # noqa: E402


def _this_checkouts(name: str):
    """This checkout's bench/<name>.py, also under FF_BENCH_CODE (whose own bench/ comes first on sys.path): the
    harness (how the worker is started, watched and scraped) stays the same for both codes of a comparison."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_bench_{name}", REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_worker_phase = _this_checkouts("processors_worker")
pin_tree, run_worker, produce_raw = _worker_phase.pin_tree, _worker_phase.run_worker, _worker_phase.produce_raw


# --------------------------------------------------------------------------- in-process measurements


def pure_core(settings, inventory_path: str, flows, counters) -> dict:
    """Replay's core path (``replay.core.replay_batches``): enrich, ``shard_of``, one ``ProcessorCore`` per shard,
    counter batches to their shard and to every other shard's port state. No codec, no Kafka. Timed up to the last
    batch (the final flush is not: a live worker keeps its windows open); outputs before the flush are kept."""
    from processors.logic.core import ProcessorCore, engine_config
    from replay.core import replay_batches

    inv = read_inventory(inventory_path)
    cfg = engine_config(settings.processors)
    parts = settings.kafka.partitions
    cores = [ProcessorCore(inv, cfg) for _ in range(parts)]
    flushed = [0]

    def counted_flush(flush):
        def wrapped():
            out = flush()
            flushed[0] += len(out)
            return out
        return wrapped

    for c in cores:
        c.flush = counted_flush(c.flush)
    end = [0.0, 0.0]

    def on_batch(_kind, _rows):
        end[0], end[1] = time.process_time(), time.perf_counter()

    c0, w0 = time.process_time(), time.perf_counter()
    outs = replay_batches([a for _e, a in flows], [a for _e, a in counters], lambda: ProcessorCore(inv, cfg), parts,
                          on_batch=on_batch, cores=cores)
    before = outs[: len(outs) - flushed[0]]
    kinds: dict[str, int] = {}
    for o in before:
        kinds[o.kind] = kinds.get(o.kind, 0) + 1
    return {"cpu": end[0] - c0, "wall": end[1] - w0, "kinds": kinds, "final": flushed[0], "outputs": before,
            "too_late": {k: sum(c.engine.stats.get(k, 0) for c in cores) for k in ("too_late_main", "too_late_incast")}}


def read_inventory(path: str):
    """The inventory file, read as the measured code reads it (FF_BENCH_CODE may predate processors/config_files.py)."""
    try:
        from processors.config_files import read_inventory as read
    except ImportError:
        from processors.logic.inventory import Inventory

        read = Inventory.load
    return read(path)


def output_pairs(outputs, topic_of: dict[str, str]) -> dict[str, list[tuple[bytes, bytes]]]:
    """Output topic -> the (key, value) messages a worker would produce for ``outputs``."""
    from schemas.outputs import encode_outputs

    by_kind: dict[str, list] = {}
    for o in outputs:
        by_kind.setdefault(o.kind, []).append(o)
    return {topic_of[k]: list(zip((o.key.encode() for o in os_), encode_outputs(k, [o.value for o in os_])))
            for k, os_ in by_kind.items()}


def output_topics(settings) -> dict[str, str]:
    """Output kind -> topic (``{}`` for FF_BENCH_CODE older than the stream catalog: no set comparison)."""
    try:
        from fabricflow import streams
    except ImportError:
        return {}
    return streams.output_topics(settings.kafka)


def set_digests(pairs_by_topic: dict[str, list], alerts_topic: str) -> dict[str, str]:
    """Per output topic, a digest of its (key, value) messages as a set (order aside): the pure core orders its
    outputs by shard per batch, a worker by message. Alerts by key only: an alert carries the evidence of the
    batch that raised it, and the worker's ``prepare`` takes several raw messages per batch where the pure core
    takes one (same alerts, more flows)."""
    out = {}
    for topic, pairs in pairs_by_topic.items():
        h = hashlib.sha256()
        for key, value in sorted(pairs):
            value = b"" if topic == alerts_topic else value
            h.update(len(key).to_bytes(4, "little") + key + len(value).to_bytes(4, "little") + value)
        out[topic] = h.hexdigest()[:16]
    return out


#: Output fields that read the port state (the counter samples applied so far) when a window closes. The pure core
#: applies each counter message to its shard at once; a worker's shard queues its own ones for link health until
#: ``processors.counter_batch_rows`` samples wait or the next tick (docs/operations.md, "Processor workers"), so these
#: fields may cite older counter samples in the worker. Equal in full with ``--set counter_batch_rows=1``.
COUNTER_EVIDENCE = {"incast": ("diagnosis",), "straggler": ("diagnosis",)}


def without_fields(pairs: list[tuple[bytes, bytes]], fields: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
    """``pairs`` with each (Avro) value decoded, ``fields`` dropped and written as canonical JSON."""
    import json

    from schemas import codec
    return [(k, json.dumps({f: x for f, x in codec.decode_record(v).items() if f not in fields}, sort_keys=True).encode())
            for k, v in pairs]


def compare_sets(pure_pairs: dict[str, list], worker_pairs: dict[str, list], topic_of: dict[str, str], alerts: str) -> str:
    """"yes" when the worker path's detector outputs equal the pure core's as sets (:func:`set_digests`); else whether
    they differ only in the :data:`COUNTER_EVIDENCE` fields (and in how many records), or "NO" and the topics."""
    from collections import Counter

    pure, worker = set_digests(pure_pairs, alerts), set_digests(worker_pairs, alerts)
    differ = sorted(t for t in set(pure) | set(worker) if pure.get(t) != worker.get(t))
    if not differ:
        return "yes"
    kind_of = {t: k for k, t in topic_of.items()}
    evidence = []
    for t in differ:
        fields = COUNTER_EVIDENCE.get(kind_of.get(t, ""))
        a, b = pure_pairs.get(t, []), worker_pairs.get(t, [])
        if not fields or Counter(without_fields(a, fields)) != Counter(without_fields(b, fields)):
            return f"NO (differ: {differ})"
        evidence.append(f"{sum((Counter(b) - Counter(a)).values())} of {len(b)} {kind_of[t]}")
    return (f"yes, but for the counter evidence ({'/'.join(COUNTER_EVIDENCE[kind_of[differ[0]]])}) of "
            f"{', '.join(evidence)} records: the worker's shards queue their own counter samples "
            f"(processors.counter_batch_rows, bench/processors.py COUNTER_EVIDENCE)")


def matrix_cell_digest(pairs: list[tuple[bytes, bytes]]) -> str:
    """SHA-256 of the traffic-matrix cells of ``matrix.windows`` messages, v1 (a cell per message, the shard last in
    its key) or v2 (a window per message), as a sorted set of (cell, shard): equal across wire versions."""
    import json

    from schemas import codec
    SCHEMA = decode_window = None
    if (CODE / "schemas" / "matrix.py").exists():  # not in FF_BENCH_CODE before matrix.windows.v2
        from schemas.matrix import SCHEMA, decode_window
    lines = []
    for key, value in pairs:
        if SCHEMA and codec.schema_of(value) == SCHEMA:
            w = decode_window(value)
            lines += [json.dumps(c | {"shard": w.shard}, sort_keys=True) for c in w.cells()]
        else:
            lines.append(json.dumps(codec.decode_record(value) | {"shard": int(key.rsplit(b"|", 1)[1])}, sort_keys=True))
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode() + b"\n")
    return f"{h.hexdigest()[:16]} ({len(lines)} cells)"


class _Capture:
    """Stands in for the worker's confluent-kafka producer: keeps shuffle messages, counts the rest."""

    def __init__(self, shuffle_topic: str, keep: frozenset = frozenset()):
        self.shuffle_topic = shuffle_topic
        self.keep = keep
        self.shuffle: list[tuple[int, bytes, list | None]] = []
        self.messages: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.digests: dict[str, object] = {}  # topic -> SHA-256 of its (key, value) sequence (not the shuffle)
        self.kept: dict[str, list] = {}  # detector output topic -> its (key, value) messages
        self.enriched: list[tuple[bytes, bytes]] = []  # flows.enriched (any version): digested decoded, after timing

    def enriched_content(self) -> str:
        """SHA-256 of the enriched records in order, decoded and written as v1 batches: equal for flows.enriched.v1
        and flows.enriched.v2 of the same records (the v2 bytes differ by design: labels are coded)."""
        from schemas import codec

        h = hashlib.sha256()
        for key, value in self.enriched:
            v1 = codec.encode_batch("flow_enriched_batch", codec.decode_batch(value))
            h.update(len(key).to_bytes(4, "little") + key + len(v1).to_bytes(4, "little") + v1)
        return h.hexdigest()[:16]

    def __call__(self, topic, key, value, partition=None, headers=None):
        self.messages[topic] = self.messages.get(topic, 0) + 1
        self.bytes[topic] = self.bytes.get(topic, 0) + len(value)
        if topic == self.shuffle_topic:
            self.shuffle.append((partition, value, headers))
        else:
            h = self.digests.get(topic)
            if h is None:
                h = self.digests[topic] = hashlib.sha256()
            h.update(len(key).to_bytes(4, "little") + key + len(value).to_bytes(4, "little") + value)
            if "flows.enriched" in topic:
                self.enriched.append((key, value))
            if topic in self.keep:
                self.kept.setdefault(topic, []).append((key, value))


class _Timers:
    """Wall seconds spent inside selected functions, by monkeypatching them (a few calls per batch: cheap)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        secs = self.seconds
        secs.setdefault(label, 0.0)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                secs[label] += time.perf_counter() - t0

        self._undo.append((owner, attr, fn))
        setattr(owner, attr, timed)

    def restore(self) -> None:
        for owner, attr, fn in reversed(self._undo):
            setattr(owner, attr, fn)
        self._undo.clear()


def worker_path(settings, raw_msgs: list[tuple[str, bytes, bytes]], breakdown: bool, profile: str | None = None) -> dict:
    """``Processors.handle_raw`` then ``handle_shuffle`` on every message, Kafka producer replaced by a capture.

    ``breakdown``: time the stages (codec, enrichment, detectors, snapshot, output encoding) by wrapping them.
    """
    import json
    import zlib

    try:
        from processors.worker import prepare as prepare_mod, service as app_mod, shuffle as shuffle_mod
    except ImportError:  # FF_BENCH_CODE before processors/worker/
        import processors.app as app_mod
        prepare_mod = shuffle_mod = app_mod
    from processors.logic.core import ProcessorCore
    from schemas import codec

    # FF_BENCH_CODE from before the compiled decoders (numba): compile its walk here, outside the measurement
    getattr(codec, "warm_up", lambda: None)()

    proc = app_mod.Processors(settings)
    cap = _Capture(settings.kafka.topics.shuffle, frozenset(output_topics(settings).values()))
    proc.publisher.produce = cap
    proc.publisher.poll = lambda: None
    timers = _Timers()
    if breakdown:
        timers.wrap(codec, "decode_batch", "Avro decode (raw + shuffle)")
        timers.wrap(codec, "encode_batch", "Avro encode (enriched + shuffle)")
        for attr in ("enrich", "enrich_labels"):  # the worker path calls enrich_labels (older code: enrich)
            if hasattr(ProcessorCore, attr):
                timers.wrap(ProcessorCore, attr, "enrichment (prepare + detect)")
        timers.wrap(prepare_mod, "shard_of", "shard_of")
        from processors.logic.engine import Engine

        try:
            from processors.logic.rules.policy import PolicyEngine
        except ImportError:  # FF_BENCH_CODE before processors/logic/rules/policy.py
            from processors.logic.policy import PolicyEngine

        timers.wrap(Engine, "process_flows", "detectors (Engine.process_flows)")
        timers.wrap(PolicyEngine, "process", "policy (PolicyEngine.process)")
        timers.wrap(ProcessorCore, "process_counters", "link health (process_counters)")
        timers.wrap(proc.publisher, "outputs", "output records -> Avro (publisher.outputs)")
        timers.wrap(ProcessorCore, "snapshot", "state snapshot: core.snapshot()")
        timers.wrap(json, "dumps", "state snapshot: json.dumps")
        timers.wrap(zlib, "compress", "state snapshot: zlib.compress")
    prof = cProfile.Profile() if profile else None
    snaps = snap_bytes = 0
    offsets: dict[int, int] = {}

    class _Msg:
        __slots__ = ("partition", "offset", "headers", "generation_id")

        def __init__(self, partition, offset, headers):
            self.partition, self.offset, self.headers, self.generation_id = partition, offset, headers, None

    class _Event:
        __slots__ = ("message", "value")

        def __init__(self, partition, offset, value, headers):
            self.message, self.value = _Msg(partition, offset, headers), value

    store = {}
    proc.state = store
    legacy = not hasattr(proc, "handle_shuffle_events")  # code before manual acks: a snapshot per shuffle message
    take = getattr(settings.processors, "detect_batch_messages", 1)
    src_of = getattr(shuffle_mod, "source_of", lambda h: None)

    def count_new_snapshots(before):
        nonlocal snaps, snap_bytes
        for k, v in store.items():
            if before.get(k) is not v:
                snaps += 1
                snap_bytes += len(v)

    t_raw = 0.0
    backlog: list = []
    try:
        c0, w0 = time.process_time(), time.perf_counter()
        if prof:
            prof.enable()
        # As a worker that keeps up: prepare takes prepare_batch_messages raw messages at a time, detect applies
        # each shuffle message as it comes and writes the snapshots that are due (code of earlier versions: their
        # detect_batch_messages at a time).
        group = getattr(settings.processors, "prepare_batch_messages", 1) if hasattr(proc, "handle_raw_many") else 1
        for i, (topic, key, value) in enumerate(raw_msgs):
            if (i + 1) % group and i != len(raw_msgs) - 1:
                continue
            t0 = time.perf_counter()
            n0 = len(cap.shuffle)
            if group > 1:
                first = i - i % group
                proc.handle_raw_many([(t, k, v, 0, j) for j, (t, k, v) in enumerate(raw_msgs[first : i + 1], first)])
            else:
                proc.handle_raw(topic, key, value, 0, i)
            t_raw += time.perf_counter() - t0
            events = []
            for part, v, h in cap.shuffle[n0:]:
                off = offsets.get(part, -1) + 1
                offsets[part] = off
                events.append(_Event(part, off, v, h))
            if legacy:
                for ev in events:
                    snap = proc.handle_shuffle(ev.message.partition, ev.message.offset, ev.value, src_of(ev.message.headers))
                    if snap is not None:
                        snaps += 1
                        snap_bytes += len(snap)
                continue
            backlog += events
            while len(backlog) >= take or (backlog and i == len(raw_msgs) - 1):
                proc.handle_shuffle_events(backlog[:take])
                del backlog[:take]
                before = dict(store)
                proc.write_due_snapshots(time.monotonic())
                count_new_snapshots(before)
        if not legacy:
            if hasattr(proc, "apply_waiting_counters"):  # what the worker's next tick does
                proc.apply_waiting_counters()
            before = dict(store)
            proc.write_due_snapshots(time.monotonic(), force=True)
            count_new_snapshots(before)
        if prof:
            prof.disable()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    finally:
        timers.restore()
    if prof:
        prof.dump_stats(profile)
    return {"cpu": cpu, "wall": wall, "raw_s": t_raw, "shuffle_s": wall - t_raw, "shuffle_messages": len(cap.shuffle),
            "snapshots": snaps, "snapshot_bytes": snap_bytes, "legacy": legacy, "messages": dict(cap.messages), "bytes": dict(cap.bytes),
            "stages": timers.seconds, "digests": {t: h.hexdigest()[:16] for t, h in cap.digests.items()},
            "enriched_content": cap.enriched_content(),
            "kept": cap.kept, "reused": proc.metrics.registry.get_sample_value("fabricflow_processors_reused_batches_total") or 0}


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--job-size", type=int, default=32)
    ap.add_argument("--rack-size", type=int, default=16, help="nodes per ToR switch = per exporter")
    ap.add_argument("--messages", type=int, default=240, help="raw flow messages (rounded to a multiple of the racks)")
    ap.add_argument("--records", type=int, default=4096, help="flow records per raw message")
    ap.add_argument("--sampling", type=int, default=1024)
    ap.add_argument("--event-seconds", type=float, default=300.0)
    ap.add_argument("--phase-seconds", type=float, default=1.0, help="event-time span of one step's records")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--kafka-port", type=int, default=21292)
    ap.add_argument("--spread", action="store_true",
                    help="pre-produce raw messages keyed by exporter over all partitions (default: all in partition 0, see docs)")
    ap.add_argument("--cpu", type=int, default=1, help="CPU for the measured code (worker / in-process runs); -1 = no pinning")
    ap.add_argument("--broker-cpu", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for the worker phase")
    ap.add_argument("--no-breakdown", action="store_true", help="no stage timers in the in-process worker path")
    ap.add_argument("--profile", metavar="FILE", help="cProfile the in-process worker path into FILE (pstats)")
    ap.add_argument("--skip-worker", action="store_true", help="in-process measurements only (no broker)")
    ap.add_argument("--rate", type=float, default=0.0, metavar="RECORDS_PER_S",
                    help="produce the raw messages at this many flow records/s once the worker is ready, as a live "
                         "pipeline would (default 0: all produced before the worker starts, it runs flat out)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, config)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="processors setting for the in-process path and the worker, e.g. --set prepare_batch_messages=1")
    args = ap.parse_args()

    import yaml

    from fabricflow.settings import load_settings
    from schemas import codec

    work = Path(tempfile.mkdtemp(prefix="ff-bench-proc-"))
    inv_path = work / "inventory.yaml"
    inv_path.write_text(yaml.safe_dump(inventory_dict(args.nodes, args.job_size, args.rack_size), sort_keys=False))
    g0 = time.perf_counter()
    flows, counters = make_input(args.nodes, args.job_size, args.rack_size, args.messages, args.records,
                                            args.sampling, args.event_seconds, args.phase_seconds)
    n_records = sum(len(a) for _e, a in flows)
    prefix = f"b{uuid.uuid4().hex[:8]}."
    topics = {k: prefix + v for k, v in load_settings().kafka.topics.model_dump().items() if k != "replay_prefix"}
    settings = load_settings(
        None,
        log_level="INFO",
        kafka={"bootstrap_servers": f"127.0.0.1:{args.kafka_port}", "partitions": args.partitions, "topics": topics},
        processors={**{k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)},
                    "app_id": "ffbench-" + prefix.strip("."), "inventory": str(inv_path), "datadir": str(work / "faust"),
                    "web_port": 0, "metrics_port": args.kafka_port + 7},
        stack={"state_dir": str(work / "stack"), "kafka_port": args.kafka_port},
    )
    raw = [(topics["flows_raw"], e.encode(), codec.encode_batch("flow_batch", a)) for e, a in flows]
    raw += [(topics["counters_raw"], e.encode(), codec.encode_batch("counter_batch", a)) for e, a in counters]
    t_first = {id(v): int(a["time_received_ms"].min()) for (_t, _k, v), (_e, a) in zip(raw, flows + counters)}
    rows_of = {id(v): len(a) for (_t, _k, v), (_e, a) in zip(raw, flows)}  # flow records per raw flow message
    raw.sort(key=lambda m: t_first[id(m[2])])
    raw_bytes = sum(len(v) for _t, _k, v in raw)
    print(f"input: {len(flows)} flow messages, {n_records:,} flow records ({args.nodes} nodes, jobs of {args.job_size}, "
          f"{math.ceil(args.nodes / args.rack_size)} exporters, 1:{args.sampling}, {args.event_seconds:.0f} s event time), "
          f"{len(counters)} counter messages; {raw_bytes / 1e6:.1f} MB Avro; built in {time.perf_counter() - g0:.1f} s")
    print(f"code: {CODE}")
    print(f"partitions: {args.partitions}  cpu: {args.cpu}  (machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})")

    from devtools.stack import EmbeddedStack

    with EmbeddedStack(settings, with_s3=False) as st:
        if args.cpu >= 0:
            pin_tree(int(st.broker.pid()), args.broker_cpu)
        ok = measure(args, settings, st, work, inv_path, flows, counters, raw, n_records, prefix, topics, rows_of)
    if args.keep or not ok:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def measure(args, settings, st, work, inv_path, flows, counters, raw, n_records, prefix, topics, rows_of) -> bool:
    import yaml
    from confluent_kafka import Producer

    try:
        from fabricflow.kafka import ensure_topics
    except ImportError:  # FF_BENCH_CODE before fabricflow/kafka.py created the topics
        from fabricflow.streams import ensure_topics

    if args.cpu >= 0:
        pin(0, args.cpu)
    pc = pure_core(settings, str(inv_path), flows, counters)
    print(f"\n[1] pure core (replay's path: enrich + shard + detectors + every shard's port state, no codec): "
          f"{n_records / pc['cpu']:,.0f} records/CPU-s, "
          f"{n_records / pc['wall']:,.0f} records/s wall ({pc['wall']:.2f} s)")
    print(f"    outputs before final flush: {pc['kinds']}  (+{pc['final']} at flush); too late: {pc['too_late']}")

    wp = worker_path(settings, raw, breakdown=not args.no_breakdown, profile=args.profile)
    print(f"\n[2] worker path in process (handle_raw + handle_shuffle, producer stubbed): {n_records / wp['cpu']:,.0f} records/CPU-s, "
          f"{n_records / wp['wall']:,.0f} records/s wall ({wp['wall']:.2f} s: prepare {wp['raw_s']:.2f} s, detect {wp['shuffle_s']:.2f} s)")
    print(f"    shuffle messages: {wp['shuffle_messages']} ({wp['reused']:.0f} reused prepare's enriched records), state snapshots: {wp['snapshots']} "
          f"({wp['snapshot_bytes'] / max(1, wp['snapshots']) / 1e3:.0f} kB each, {wp['snapshot_bytes'] / 1e6:.0f} MB total)")
    print("    produced:", {k.removeprefix(prefix): f"{v} msgs / {wp['bytes'][k] / 1e6:.1f} MB" for k, v in wp["messages"].items()})
    print("    SHA-256 of each output topic's (key, value) sequence (same input and settings -> same digests):")
    for k, v in sorted(wp["digests"].items()):
        print(f"      {k.removeprefix(prefix):24s} {v}")
    print(f"      {'flows.enriched records':24s} {wp['enriched_content']}  (decoded, as v1 batches: equal across wire versions)")
    mx_pairs = wp["kept"].get(topics["matrix"], [])
    print(f"      {'matrix cells':24s} {matrix_cell_digest(mx_pairs)}  (decoded cells with their shard: equal across wire versions)")
    topic_of = output_topics(settings)
    if topic_of:
        alerts = settings.kafka.topics.alerts
        pure_pairs = output_pairs(pc["outputs"], topic_of)
        pure = set_digests(pure_pairs, alerts)
        print("    detector outputs as sets (order aside; alerts by key) equal the pure core's before its flush: "
              + compare_sets(pure_pairs, wp["kept"], topic_of, alerts).replace(prefix, ""))
        print("    SHA-256 of the pure core's outputs before its flush, as sets (order aside; alerts by key):")
        for k, v in sorted(pure.items()):
            print(f"      {k.removeprefix(prefix):24s} {v}")
        print("    SHA-256 of the worker path's outputs, as sets (order aside; alerts by key; incast and straggler also "
              "without their counter evidence): equal for any prepare_batch_messages")
        worker_pairs = {t: v for t, v in wp["kept"].items() if t in pure}
        plain = {t: without_fields(v, COUNTER_EVIDENCE[k]) for k, t in topic_of.items() if k in COUNTER_EVIDENCE
                 for v in [worker_pairs.get(t, [])]}
        for k, v in sorted(set_digests(worker_pairs, alerts).items()):
            extra = f"  {set_digests({k: plain[k]}, alerts)[k]}" if k in plain else ""
            print(f"      {k.removeprefix(prefix):24s} {v}{extra}")
    if wp["stages"]:
        total = wp["wall"]
        print("    where time goes (stage timers; us per input flow record):")
        for k, v in sorted(wp["stages"].items(), key=lambda kv: -kv[1]):
            print(f"      {k:44s} {v:6.2f} s {100 * v / total:5.1f} % {1e6 * v / n_records:6.2f} us")
        rest = total - sum(wp["stages"].values())
        print(f"      {'rest (handlers, numpy splits, Python glue)':44s} {rest:6.2f} s {100 * rest / total:5.1f} % {1e6 * rest / n_records:6.2f} us")
    if args.profile:
        print(f"    cProfile: {args.profile}")
    if args.cpu >= 0:
        pin(0, args.broker_cpu)
    if args.skip_worker:
        return True
    want_enriched = wp["messages"].get(topics["flows_enriched"], 0)
    want_shuffle = wp["shuffle_messages"]
    ensure_topics(settings.kafka)
    p = Producer({"bootstrap.servers": st.bootstrap, "compression.type": settings.ingest.producer.compression,
                  "linger.ms": 20, "message.max.bytes": 8_000_000, "partitioner": "murmur2_random"})
    w0 = time.perf_counter()
    kw = {} if args.spread else {"partition": 0}

    def produce_all():
        produce_raw(p, raw, kw, args.rate, rows_of)

    if args.rate:
        print(f"\n[3] Faust worker: {len(raw)} raw messages produced at {args.rate:,.0f} flow records/s "
              f"({n_records / args.rate:.1f} s) once it is ready; one `fabricflow process` on CPU {args.cpu}")
    else:
        produce_all()
        print(f"\n[3] Faust worker: pre-produced {len(raw)} raw messages in {time.perf_counter() - w0:.1f} s; "
              f"starting one `fabricflow process` on CPU {args.cpu}")
    cfg = work / "config.yaml"
    cfg.write_text(yaml.safe_dump(settings.model_dump(mode="json", exclude={"stack"}, exclude_none=True)))
    res = run_worker(settings, str(cfg), work, args.cpu, want_enriched, want_shuffle, args.timeout, legacy=wp["legacy"],
                     want_records=n_records, feed=produce_all if args.rate else None)
    ready_ms = int(res["ready"] * 1000) if res["ready"] else None
    en, cl, mx = topics["flows_enriched"], res["changelog"], topics["matrix"]
    print(f"    seen: enriched {res['seen'][en]}/{want_enriched} msgs, state snapshots {res['seen'][cl]}, "
          f"matrix messages {res['seen'][mx]} (pure core: {pc['kinds'].get('matrix', 0)} before flush)")
    if ready_ms and en in res["last_ms"] and res["seen"][en] >= want_enriched:
        t_enr = (res["last_ms"][en] - ready_ms) / 1000
        t_first = (res["first_ms"][en] - ready_ms) / 1000
        print(f"    enrichment done {t_enr:.2f} s after 'Worker ready' -> {n_records / t_enr:,.0f} records/s "
              f"(first enriched message after {t_first:.2f} s)")
    if res["done"] and ready_ms:
        t_all = max(res["detect_done"] - res["ready"], (res["last_ms"][en] - ready_ms) / 1000)
        print(f"    all detectors done {t_all:.2f} s after 'Worker ready' -> {n_records / t_all:,.0f} records/s per worker "
              f"(target 300,000); worker CPU {res['cpu']:.2f} s -> {n_records / res['cpu']:,.0f} records/CPU-s, "
              f"{1e6 * res['cpu'] / n_records:.2f} CPU-s per 1 M flows "
              f"({res.get('scrapes', 0)} scrapes of its /metrics by this bench)")
        print(f"    worker / pure core, records/CPU-s: {pc['cpu'] / res['cpu']:.2f}x (issue #20 target: 0.75x); "
              f"in process / pure core: {pc['cpu'] / wp['cpu']:.2f}x")
        if res["committed"]:
            print(f"    shuffle messages committed by the worker's group (acked after their snapshot): "
                  f"{res['committed'][0]} / {res['committed'][1]}")
        if res["durable"]:
            print(f"    state durable (every applied shuffle message covered by a snapshot) {res['durable'] - res['ready']:.2f} s "
                  f"after 'Worker ready' (snapshot_interval_s {getattr(settings.processors, 'snapshot_interval_s', '-')})")
    else:
        print(f"    NOT DONE within {args.timeout:.0f} s (ready: {res['ready']}); log: {res['log']}")
    if res["metrics"]:
        keep = {k.removeprefix("fabricflow_processors_"): v for k, v in res["metrics"].items() if any(w in k for w in ("too_late", "outputs_total", "errors", "reused", "snapshots", "shuffle_messages"))}
        print("    worker metrics:", keep)
    return bool(res["done"])


if __name__ == "__main__":
    sys.exit(main())
