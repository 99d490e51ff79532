"""Archive sink on the embedded broker + embedded S3: batches and records -> hourly Parquet, exactly once.

Covers: right dt=/hour= partitions and values for every kind of topic, late rows,
undecodable messages skipped and committed, hourly summaries produced and archived,
crash injection at every step of the write/commit sequence (subprocess, restart,
every record exactly once), SIGTERM, and a rebalance between two instances.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter as Multiset
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from schemas import codec
from schemas.columns import addr16, dtype_for, empty_counters, empty_flows, load_avsc
from sinks.archive import layout
from sinks.archive.service import ArchiveService
from tests.support.matrix import window_message

from .crashing_sink import CRASH_EXIT_CODE

from .kafka_helpers import consume, create_topics, settings_for

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
MIN = 60_000
HOUR = layout.HOUR_MS
GRACE_S = 60


# ----------------------------------------------------------------------------- data


def blank_record(schema: str) -> dict:
    """A dict with every field of ``schema`` at a neutral value."""
    out = {}
    for f in load_avsc(schema)["fields"]:
        t = f["type"]
        if isinstance(t, list):  # an optional field (a union with null): absent
            out[f["name"]] = None
            continue
        kind = t if isinstance(t, str) else t["type"]
        out[f["name"]] = {
            "long": 0, "int": 0, "double": 0.0, "float": 0.0, "boolean": False, "string": "",
            "array": [], "map": {},
        }.get(kind, t["symbols"][0] if kind == "enum" else None)
    return out


class Ids:
    def __init__(self):
        self.n = 0

    def take(self, k: int) -> np.ndarray:
        out = np.arange(self.n, self.n + k, dtype=np.int64)
        self.n += k
        return out


def flow_batch(times, ids) -> bytes:
    times = np.asarray(times, dtype=np.int64)
    f = empty_flows(len(times))
    f["time_end_ms"] = times
    f["time_start_ms"] = times - 500
    f["time_received_ms"] = times + 20
    f["time_export_ms"] = times + 10
    f["in_if"] = ids  # unique row id
    f["bytes"] = 100 + ids % 1400
    f["packets"] = 1 + ids % 7
    f["sampling_rate"] = 1000
    f["bytes_est"] = f["bytes"] * 1000
    f["packets_est"] = f["packets"] * 1000
    f["ip_version"] = 4
    f["ip_protocol"] = 17
    f["src_port"] = 49152 + ids % 1000
    f["dst_port"] = 4791
    f["export_protocol"] = 1
    f["exporter_addr"] = np.frombuffer(addr16("192.0.2.10"), dtype=np.uint8)
    f["src_addr"][:, 10:12] = 0xFF
    f["src_addr"][:, 12] = 10
    f["src_addr"][:, 15] = 1 + ids % 200
    f["dst_addr"] = np.frombuffer(addr16("10.0.1.1"), dtype=np.uint8)
    return codec.encode_batch("flow_batch", f)


NODES = ["gpu-01", "gpu-02", "gpu-03", "stor-1"]


def enriched_batch(times, ids) -> tuple[bytes, np.ndarray]:
    times = np.asarray(times, dtype=np.int64)
    n = len(times)
    e = np.zeros(n, dtype=dtype_for("flow_enriched"))
    for name in e.dtype.names:
        if e.dtype[name] == np.dtype(object):
            e[name] = ""
    e["time_end_ms"] = times
    e["time_start_ms"] = times - 500
    e["in_if"] = ids
    e["bytes_est"] = 1000 * (1 + ids % 5)
    e["packets_est"] = 1 + ids % 5
    e["sampling_rate"] = 1
    e["ip_version"] = 4
    e["export_protocol"] = 1
    e["src_node"] = np.array([NODES[i % 3] for i in ids], dtype=object)
    e["dst_node"] = np.array([NODES[(i + 1) % 4] for i in ids], dtype=object)
    e["src_group"] = "gpu"
    e["dst_group"] = np.array(["storage" if NODES[(i + 1) % 4] == "stor-1" else "gpu" for i in ids], dtype=object)
    e["category"] = np.array(["storage" if NODES[(i + 1) % 4] == "stor-1" else "collective" for i in ids], dtype=object)
    e["src_job"] = "jobA"
    e["dst_job"] = np.array(["" if NODES[(i + 1) % 4] == "stor-1" else "jobA" for i in ids], dtype=object)
    return codec.encode_batch("flow_enriched_batch", e), e


def counter_batch(times, ids) -> bytes:
    c = empty_counters(len(times))
    c["time_received_ms"] = times
    c["if_index"] = ids
    c["if_speed"] = 25_000_000_000
    c["in_octets"] = ids * 1000
    c["if_oper_up"] = True
    c["exporter_addr"] = np.frombuffer(addr16("192.0.2.20"), dtype=np.uint8)
    return codec.encode_batch("counter_batch", c)


def matrix_cell(t: int, rid: int) -> bytes:
    """A matrix.windows.v2 message of one cell."""
    r = blank_record("matrix_cell")
    r.update(window_start_ms=t, window_end_ms=t + 10_000, level="node", src="gpu-01", dst="gpu-02",
             category="collective", bytes_est=rid * 10, samples=rid)  # samples carries the row id
    return window_message([r])


def alert(t: int, rid: int) -> bytes:
    r = blank_record("alert")
    r.update(dedup_key=f"k{rid}", rule="segmentation", summary="x", entities={"src": "gpu-01"},
             window_start_ms=t, window_end_ms=t + MIN, first_seen_ms=t, last_seen_ms=t, flows=rid)
    return codec.encode_record("alert", r)


def incast(t: int, rid: int) -> bytes:
    r = blank_record("incast_event")
    r.update(event_id=f"e{rid}", window_start_ms=t, window_end_ms=t + 10_000, destination="stor-1",
             destination_group="storage", sources=["gpu-01", "gpu-02"], source_rates_bps=[1.0, 2.0], samples=rid)
    return codec.encode_record("incast_event", r)


def flow_stream(rng, ids: Ids, messages=40, start=T0, step=4.5 * MIN, late_every=9):
    """(message, ids) of raw flow batches spanning ~3 event hours, with late messages for hour 0."""
    out = []
    cursor = start
    for i in range(messages):
        n = int(rng.integers(3, 30))
        k = ids.take(n)
        if i and i % late_every == 0 and cursor > start + HOUR + 2 * MIN:
            times = start + rng.integers(0, 50 * MIN, n)  # hour 0, after it closed
        else:
            times = np.maximum(cursor + rng.integers(-3 * MIN, 3 * MIN, n), start)
        out.append((flow_batch(times, k), k))
        cursor += step
    return out


def produce(bootstrap: str, items):
    """items: (topic, partition, value); delivered in order per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for topic, part, value in items:
        p.produce(topic, value=value, partition=part)
    assert p.flush(30) == 0


def archive_section(backend, prefix: str) -> dict:
    o = backend.s3_options
    return {
        "url": f"s3://{backend.bucket}/{prefix}", "s3_endpoint": o["client_kwargs"]["endpoint_url"],
        "s3_access_key": o["key"], "s3_secret_key": o["secret"], "grace_s": GRACE_S, "idle_flush_s": 1.0,
    }


def make_settings(backend, topic_prefix: str, archive_prefix: str):
    s = settings_for(backend.bootstrap, topic_prefix, archive=archive_section(backend, archive_prefix))
    return s.model_copy(update={"kafka": s.kafka.model_copy(update={"session_timeout_ms": 3000})})


def fresh_pipeline(backend, topic_prefix: str, tag: str):
    """(settings, archive root) of a pipeline of its own: its topics created, its archive under a new prefix."""
    prefix = f"{tag}-{uuid.uuid4().hex[:8]}"
    s = make_settings(backend, topic_prefix, prefix)
    create_topics(s)
    return s, f"{backend.bucket}/{prefix}"


def read_dataset(fs, root: str, dataset: str):
    """(rows as pyarrow Table concatenated, list of KeyInfo) with every row checked to be in its file's hour."""
    import pyarrow as pa

    try:
        files = sorted(f for f in fs.find(f"{root}/{dataset}") if layout.parse_key(f))
    except FileNotFoundError:
        files = []
    tables, keys = [], []
    col = layout.spec(dataset).time_column
    for f in files:
        k = layout.parse_key(f)
        t = pq.read_table(f, filesystem=fs)
        hours = layout.hour_index(t[col].to_numpy())
        assert (hours == k.hour).all(), f"{f}: rows outside the file's hour"
        assert t.num_rows > 0
        tables.append(t.replace_schema_metadata(None))
        keys.append(k)
    return (pa.concat_tables(tables) if tables else None), keys


def committed(bootstrap: str, group: str, topic: str, partitions=(0, 1)) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)]
    finally:
        c.close()


def exactly_once(got, expected_ids) -> None:
    dup = [k for k, v in Multiset(got).items() if v > 1]
    assert not dup, f"{len(dup)} duplicated rows, e.g. {dup[:5]}"
    missing = set(expected_ids) - set(got)
    assert not missing, f"{len(missing)} rows missing, e.g. {sorted(missing)[:5]}"
    assert len(got) == len(expected_ids)


# ----------------------------------------------------------------------------- in-process service


def test_archives_every_topic_into_hourly_partitions(backend, unique_topic, monkeypatch):
    s, root = fresh_pipeline(backend, unique_topic, "it")
    t = s.kafka.topics
    rng = np.random.default_rng(1)
    ids = Ids()
    items, raw_ids, raw_by_hour = [], [], Multiset()
    for part in (0, 1):
        for msg, k in flow_stream(rng, ids, messages=24, start=T0 + part * 2 * MIN):
            items.append((t.flows_raw, part, msg))
            raw_ids += k.tolist()
    # undecodable messages in the middle of partition 0: garbage, wrong schema, empty
    items.insert(5, (t.flows_raw, 0, b"not avro at all"))
    items.insert(9, (t.flows_raw, 0, matrix_cell(T0, 1)))
    items.insert(12, (t.flows_raw, 0, b""))
    # enriched flows: hours 0, 1 and 2 on one partition (summaries close hours 0 and 1)
    enriched_rows = []
    for h, count in ((0, 3), (1, 3), (2, 2)):
        for j in range(count):
            k = ids.take(20)
            times = T0 + h * HOUR + j * 10 * MIN + rng.integers(0, 5 * MIN, 20)
            if h == 2:
                times = times + 10 * MIN
            msg, arr = enriched_batch(times, k)
            items.append((t.flows_enriched, 0, msg))
            enriched_rows.append(arr)
    enr = np.concatenate(enriched_rows)
    counter_ids = ids.take(30)
    counter_times = T0 + np.repeat([10 * MIN, 70 * MIN, 130 * MIN], 10)
    items += [(t.counters_raw, 1, counter_batch(counter_times[i:i + 10], counter_ids[i:i + 10])) for i in (0, 10, 20)]
    matrix_ids = list(range(1, 13))
    items += [(t.matrix, i % 2, matrix_cell(T0 + (i % 3) * HOUR + i * MIN, i)) for i in matrix_ids]
    items += [(t.alerts, 0, alert(T0 + 5 * MIN, 7)), (t.alerts, 0, alert(T0 + 65 * MIN, 8))]
    items += [(t.incast, 1, incast(T0 + 20 * MIN, 3))]
    produce(backend.bootstrap, items)

    # flush between messages, however fast they come (the service plans at most every FLUSH_EVERY_S): an hour's
    # first file is written before its late rows arrive, so they go to late files
    monkeypatch.setattr("sinks.archive.service.FLUSH_EVERY_S", 0.0)
    svc = ArchiveService(s, group_id="g-" + uuid.uuid4().hex[:8], metrics_port=0, batch_messages=1)
    report = svc.run(max_seconds=60, idle_exit_s=3)
    fs = backend.s3fs()

    raw, keys = read_dataset(fs, root, "flows_raw")
    exactly_once(raw["in_if"].to_pylist(), raw_ids)
    assert {k.hour - T0 // HOUR for k in keys} == {0, 1}
    # values survive: bytes and the derived text address column
    ids_np = raw["in_if"].to_numpy()
    assert (raw["bytes"].to_numpy() == 100 + ids_np % 1400).all()
    assert (raw["bytes_est"].to_numpy() == (100 + ids_np % 1400) * 1000).all()
    assert raw["src_ip"].cast("string").to_pylist()[:3] == [f"10.0.0.{1 + i % 200}" for i in ids_np[:3]]
    assert set(raw["exporter"].cast("string").to_pylist()) == {"192.0.2.10"}
    # late rows of hour 0 went to files of their own, never into the first file of that hour
    assert report["undecodable"] == 3
    assert svc.metrics.registry.get_sample_value("fabricflow_sink_rows_late_total", {"dataset": "flows_raw"}) > 0
    for part in (0, 1):  # per partition: the on-time file of hour 0 and at least one late file
        assert len([k for k in keys if k.hour == T0 // HOUR and k.partition == part]) >= 2

    enr_t, _ = read_dataset(fs, root, "flows_enriched")
    assert sorted(enr_t["in_if"].to_pylist()) == sorted(enr["in_if"].tolist())
    assert enr_t["src_node"].to_pylist().count("gpu-01") == int((enr["src_node"] == "gpu-01").sum())

    cnt, _ = read_dataset(fs, root, "counters_raw")
    exactly_once(cnt["if_index"].to_pylist(), counter_ids.tolist())
    assert (cnt["in_octets"].to_numpy() == cnt["if_index"].to_numpy() * 1000).all()

    mx, mkeys = read_dataset(fs, root, "matrix_windows")
    exactly_once(mx["samples"].to_pylist(), matrix_ids)
    assert (mx["bytes_est"].to_numpy() == mx["samples"].to_numpy() * 10).all()
    assert len({k.hour for k in mkeys}) == 3
    al, _ = read_dataset(fs, root, "alerts")
    assert sorted(al["dedup_key"].to_pylist()) == ["k7", "k8"]
    assert al.column("entities").to_pylist()[0] == [("src", "gpu-01")]
    inc, _ = read_dataset(fs, root, "incast_events")
    assert inc["sources"].to_pylist() == [["gpu-01", "gpu-02"]]

    # Summaries of hours 0 and 1 were produced to Kafka, then archived by the same service.
    msgs = consume(backend.bootstrap, t.summaries, until=lambda ms: len(ms) >= 2, timeout_s=15)
    sums = {r["hour_start_ms"]: r for r in (codec.decode_record(m.value()) for m in msgs)}
    assert sorted(sums) == [T0, T0 + HOUR]
    for h in (0, 1):
        rows = enr[(enr["time_end_ms"] >= T0 + h * HOUR) & (enr["time_end_ms"] < T0 + (h + 1) * HOUR)]
        s_h = sums[T0 + h * HOUR]
        assert s_h["flow_records"] == len(rows)
        assert s_h["bytes_est"] == int(rows["bytes_est"].sum())
        assert s_h["quality"] == []  # complete (not resumed from a commit)
    # Detector events count in their hour's summary unless read after the hour closed (a backlog is read in
    # no particular topic order): then they are counted as late, never in a second summary.
    counted = [(h, e["kind"], e["detail"]) for h, r in sums.items() for e in r["events"] for _ in range(e["count"])]
    assert set(counted) <= {(T0, "alert", "segmentation"), (T0 + HOUR, "alert", "segmentation"),
                            (T0, "incast", "storage")}
    assert len(counted) + svc.summaries.book.late_events == 3
    summ, _ = read_dataset(fs, root, "summaries_hourly")
    assert sorted(summ["hour_start_ms"].to_pylist()) == [T0, T0 + HOUR]

    # Everything consumed is committed, including the undecodable messages' offsets.
    n0 = sum(1 for it in items if it[0] == t.flows_raw and it[1] == 0)
    n1 = sum(1 for it in items if it[0] == t.flows_raw and it[1] == 1)
    assert committed(backend.bootstrap, svc.group_id, t.flows_raw) == [n0, n1]
    reg = svc.metrics.registry
    assert reg.get_sample_value("fabricflow_sink_rows_written_total", {"dataset": "flows_raw"}) == len(raw_ids)
    assert reg.get_sample_value("fabricflow_sink_undecodable_messages_total",
                                {"dataset": "flows_raw", "reason": "not_avro"}) == 1
    assert reg.get_sample_value("fabricflow_sink_undecodable_messages_total",
                                {"dataset": "flows_raw", "reason": "wrong_schema"}) == 1
    assert reg.get_sample_value("fabricflow_sink_undecodable_messages_total",
                                {"dataset": "flows_raw", "reason": "empty"}) == 1
    assert reg.get_sample_value("fabricflow_sink_commit_lag_records", {"dataset": "flows_raw"}) == 0
    assert (reg.get_sample_value("fabricflow_sink_errors_total", {"stage": "write"}) or 0) == 0
    assert report["summaries"] == 2


def test_rebalance_between_two_instances_keeps_every_row_once(backend, unique_topic):
    s, root = fresh_pipeline(backend, unique_topic, "rb")
    t = s.kafka.topics
    rng = np.random.default_rng(5)
    ids = Ids()
    first, second, all_ids = [], [], []
    for part in (0, 1):
        stream = flow_stream(rng, ids, messages=30, start=T0 + part * MIN)
        for i, (msg, k) in enumerate(stream):
            (first if i < 15 else second).append((t.flows_raw, part, msg))
            all_ids += k.tolist()
    group = "g-" + uuid.uuid4().hex[:8]
    produce(backend.bootstrap, first)
    a = ArchiveService(s, group_id=group, metrics_port=0, batch_messages=5)
    stop_a = threading.Event()
    ta = threading.Thread(target=a.run, kwargs={"max_seconds": 60, "stop_event": stop_a}, daemon=True)
    ta.start()
    deadline = time.monotonic() + 30
    while a.report["messages"] < len(first) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert a.report["messages"] >= len(first)
    b = ArchiveService(s, group_id=group, metrics_port=0, batch_messages=5)
    tb = threading.Thread(target=b.run, kwargs={"max_seconds": 60, "idle_exit_s": 4}, daemon=True)
    tb.start()
    deadline = time.monotonic() + 30
    while not b._assigned and time.monotonic() < deadline:
        time.sleep(0.1)
    produce(backend.bootstrap, second)
    tb.join(70)
    stop_a.set()
    ta.join(30)
    assert not ta.is_alive() and not tb.is_alive()
    assert b.report["messages"] > 0, "the second instance never got a partition"
    raw, _ = read_dataset(backend.s3fs(), root, "flows_raw")
    exactly_once(raw["in_if"].to_pylist(), all_ids)
    assert committed(backend.bootstrap, group, t.flows_raw) == [
        sum(1 for x in first + second if x[1] == p) for p in (0, 1)]


# ----------------------------------------------------------------------------- subprocess: crashes, SIGTERM


def write_config(path: Path, s) -> Path:
    a = s.archive
    cfg = {
        "log_level": "INFO",
        "kafka": {"bootstrap_servers": s.kafka.bootstrap_servers, "partitions": s.kafka.partitions,
                  "session_timeout_ms": s.kafka.session_timeout_ms,
                  "topics": s.kafka.topics.model_dump()},
        "archive": {"url": a.url, "s3_endpoint": a.s3_endpoint, "s3_access_key": a.s3_access_key,
                    "s3_secret_key": a.s3_secret_key.get_secret_value(), "grace_s": a.grace_s,
                    "idle_flush_s": a.idle_flush_s},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def spawn(config: Path, group: str, *args, crash: str | None = None, after: int = 2):
    """Start ``fabricflow sink archive`` (``crash``: killed at that step, tests/integration/crashing_sink.py);
    returns (process, stderr log path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICFLOW_")}
    env["FABRICFLOW_CONFIG"] = str(config)
    sink_args = ["--group", group, "--metrics-port", "0", "--batch-messages", "4", *args]
    if crash:
        cmd = [sys.executable, str(Path(__file__).with_name("crashing_sink.py")), crash, str(after), "--", *sink_args]
    else:
        cmd = [sys.executable, "-m", "cli", "sink", "archive", *sink_args]
    errlog = config.with_suffix(f".{uuid.uuid4().hex[:6]}.log")
    with open(errlog, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=fh)
    return proc, errlog


def finish(proc, errlog: Path, timeout: float) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return errlog.read_text()


STEPS = ("before_write", "mid_write", "after_write", "after_commit", "in_flight")


def test_crash_at_every_step_then_restart_archives_every_record_once(backend, tmp_path):
    """Four independent pipelines (topics, group, archive prefix) run side by side, one per crash step."""
    cases = {}
    items = []
    for step in STEPS:
        tp = f"t{uuid.uuid4().hex[:10]}."
        s, root = fresh_pipeline(backend, tp, f"crash-{step}")
        t = s.kafka.topics
        rng = np.random.default_rng(11)
        ids = Ids()
        raw_ids = []
        for part in (0, 1):
            for msg, k in flow_stream(rng, ids, messages=30, start=T0 + part * 3 * MIN):
                items.append((t.flows_raw, part, msg))
                raw_ids += k.tolist()
        items.insert(len(items) - 20, (t.flows_raw, 1, b"\xc3\x01garbage-with-marker"))
        mids = list(range(1, 41))
        items += [(t.matrix, i % 2, matrix_cell(T0 + i * 4 * MIN, i)) for i in mids]
        cfg = write_config(tmp_path / f"{step}.yaml", s)
        cases[step] = {"settings": s, "root": root, "raw": raw_ids, "matrix": mids, "cfg": cfg,
                       "group": "g-" + uuid.uuid4().hex[:8]}
    produce(backend.bootstrap, items)

    crashed = {step: spawn(c["cfg"], c["group"], "--idle-exit", "5", "--max-seconds", "40", crash=step)
               for step, c in cases.items()}
    for step, (p, errlog) in crashed.items():
        err = finish(p, errlog, 60)
        assert p.returncode == CRASH_EXIT_CODE, f"{step}: rc={p.returncode}\n{err[-2000:]}"
        assert f"crashing at {step}" in err
    restarted = {step: spawn(c["cfg"], c["group"], "--idle-exit", "4", "--max-seconds", "50")
                 for step, c in cases.items()}
    fs = backend.s3fs()
    for step, (p, errlog) in restarted.items():
        err = finish(p, errlog, 70)
        assert p.returncode == 0, f"{step}: rc={p.returncode}\n{err[-2000:]}"
        c = cases[step]
        root = c["root"]
        raw, keys = read_dataset(fs, root, "flows_raw")
        exactly_once(raw["in_if"].to_pylist(), c["raw"])
        mx, _ = read_dataset(fs, root, "matrix_windows")
        exactly_once(mx["samples"].to_pylist(), c["matrix"])
        last = [ln for ln in err.splitlines() if ln.startswith("messages=")][-1]
        report = dict(kv.split("=") for kv in last.split())
        if step in ("mid_write", "after_write"):
            assert int(report["duplicates"]) > 0, "re-read rows already written must be dropped"
        t = c["settings"].kafka.topics
        n = [sum(1 for it in items if it[0] == t.flows_raw and it[1] == p) for p in (0, 1)]
        assert committed(backend.bootstrap, c["group"], t.flows_raw) == n


def test_sigterm_flushes_commits_and_exits(backend, unique_topic, tmp_path):
    s, root = fresh_pipeline(backend, unique_topic, "term")
    s = s.model_copy(update={"archive": s.archive.model_copy(update={"idle_flush_s": 3600.0})})
    t = s.kafka.topics
    ids = Ids()
    k = ids.take(50)
    produce(backend.bootstrap, [(t.flows_raw, 0, flow_batch(T0 + k * 1000, k))])  # one open hour: nothing due
    group = "g-" + uuid.uuid4().hex[:8]
    with socket.socket() as probe:  # a free port for the metrics endpoint
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    p, errlog = spawn(write_config(tmp_path / "c.yaml", s), group, "--max-seconds", "60", "--metrics-port", str(port))
    url = f"http://127.0.0.1:{port}/metrics"
    received = 0.0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and p.poll() is None and received < 50:
        time.sleep(0.3)
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith('fabricflow_sink_rows_received_total{dataset="flows_raw"}'):
                received = float(line.split()[-1])
    assert received == 50, errlog.read_text()[-2000:]
    assert 'fabricflow_sink_buffered_rows{dataset="flows_raw"} 50.0' in text  # the hour is open: nothing written yet
    p.send_signal(signal.SIGTERM)
    err = finish(p, errlog, 30)
    assert p.returncode == 0, err[-2000:]
    raw, keys = read_dataset(backend.s3fs(), root, "flows_raw")
    assert raw is not None, err[-2000:]
    exactly_once(raw["in_if"].to_pylist(), k.tolist())
    assert committed(backend.bootstrap, group, t.flows_raw, (0,)) == [1]
