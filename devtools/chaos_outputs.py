"""Chaos harness accounting: flow records in Kafka against rows in the archive, and the live output windows against
a replay of the same raw records (docs/reliability.md, "The chaos suite"). Used by :mod:`devtools.chaos`."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path


from fabricflow.kafka import client_config

from .stack import read_from_start

HOSTS = 512  # the sender's host pool (devtools.loadgen.Hosts); write_inventory names every one of them


def count_topic(settings, topic: str, idle_s: float = 5.0, deadline_s: float = 300.0) -> int:
    """Flow records in ``topic``, read from the beginning with a fresh group until idle (Tansu's high
    watermark cannot be trusted: count what is read)."""
    from confluent_kafka import Consumer

    from schemas import codec

    c = Consumer({**client_config(settings.kafka), "group.id": "chaos-count-" + uuid.uuid4().hex[:8],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    read_from_start(c, topic)
    n, last, t0 = 0, time.monotonic(), time.monotonic()
    while time.monotonic() - last < idle_s and time.monotonic() - t0 < deadline_s:
        msgs = c.consume(500, 0.5)
        for m in msgs:
            if m.error() is None:
                n += len(codec.decode_batch(m.value()))
                last = time.monotonic()
    c.close()
    return n


def archive_counts(settings) -> tuple[int, int]:
    """(rows of flows_raw, rows in files whose offset range overlaps another file of the same hour and partition;
    one Kafka message may hold rows of two hours, so files of different hours may share offsets)."""
    import pyarrow.parquet as pq

    from sinks.archive.fs import archive_filesystem
    from sinks.archive.layout import parse_key

    fs, root = archive_filesystem(settings.archive)
    fs.invalidate_cache()
    files = [f for f in fs.find(f"{root}/flows_raw") if f.endswith(".parquet")]
    rows, ranges = 0, {}
    for f in files:
        n = pq.ParquetFile(fs.open(f, "rb")).metadata.num_rows
        rows += n
        k = parse_key(f)
        if k is not None:
            ranges.setdefault((k.hour, k.partition), []).append((k.first_offset, k.last_offset, n))
    dup = 0
    for spans in ranges.values():
        spans.sort()
        for (a0, a1, _na), (b0, _b1, nb) in zip(spans, spans[1:]):
            if b0 <= a1:
                dup += nb
    return rows, dup


def write_inventory(path: Path, hosts: int = HOSTS, jobs: int = 4) -> Path:
    """An inventory naming every host the sender uses (``devtools.loadgen.Hosts``: IPv4 and IPv6 twins), 32 nodes
    per rack/ToR and ``jobs`` training jobs, so that windows carry node-level cells and per-job scores."""
    import random

    from devtools.loadgen import Hosts

    h = Hosts(random.Random(0), hosts)
    lines = ["version: 1", "cluster_ranges: [10.16.0.0/12, \"fd00:1::/32\"]", "nodes:"]
    for i, (v4, v6) in enumerate(zip(h.v4, h.v6)):
        a4 = ".".join(map(str, v4))
        a6 = ":".join(v6[k:k + 2].hex() for k in range(0, 16, 2))
        lines.append(f"  - {{name: gpu-{i:03d}, addresses: [{a4}, \"{a6}\"], group: gpu, rack: r{i // 32}, "
                     f"switch: tor-{i // 32}, capacity: 400G}}")
    lines.append("jobs:")
    per = hosts // jobs
    for j in range(jobs):
        members = ", ".join(f"gpu-{i:03d}" for i in range(j * per, (j + 1) * per))
        lines.append(f"  - {{name: train-{j}, nodes: [{members}]}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _canonical(kind: str, value: dict) -> str:
    """One output value as the wire gives it back (Avro round trip), as sorted JSON."""
    from schemas.outputs import decode_output, encode_outputs

    return json.dumps(decode_output(kind, encode_outputs(kind, [value])[0]), sort_keys=True, default=str)


def _entries(kind: str, key: str, value) -> list[tuple[str, str]]:
    """(key, sorted JSON) of one output; a ``matrix.windows.v2`` window as its cells, each under the v1 cell key
    ``window|level|src|dst|category|shard`` (the comparison below is per cell)."""
    from schemas.matrix import MatrixWindow

    if not isinstance(value, MatrixWindow):
        return [(key, _canonical(kind, value) if isinstance(value, dict) else
                 json.dumps(value, sort_keys=True, default=str))]
    return [(f"{c['window_start_ms']}|{c['level']}|{c['src']}|{c['dst']}|{c['category']}|{value.shard}",
             json.dumps(c, sort_keys=True, default=str)) for c in value.cells()]


#: Alerts compare by identity: their running figures cover the records up to the firing batch, and live batches
#: are not the replay's slices (docs/replay.md, "Policy alerts: same alerts, batch-dependent totals"). So does
#: first_seen_ms (the earliest flow end in the batch where a shard first saw the condition) when flows do not
#: arrive in event-time order: compared apart, as the largest difference.
ALERT_IDENTITY = ("dedup_key", "rule", "severity", "state", "entities")


def _identity(kind: str, v: str) -> str:
    if kind != "alert":
        return v
    d = json.loads(v)
    return json.dumps({k: d.get(k) for k in ALERT_IDENTITY}, sort_keys=True)


def live_outputs(settings, idle_s: float = 5.0, deadline_s: float = 600.0) -> tuple[dict, int]:
    """Every output message the live processors produced: {kind: {key: set of values (sorted JSON)}}, and how
    many messages repeated an earlier (key, value) (at-least-once re-delivery after a crash)."""
    from confluent_kafka import Consumer

    from fabricflow.streams import OUTPUTS, topic_of
    from schemas.outputs import decode_output

    topics = {topic_of(settings.kafka, st): kind for kind, st in OUTPUTS.items()}
    c = Consumer({**client_config(settings.kafka), "group.id": "chaos-outputs-" + uuid.uuid4().hex[:8],
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000})
    read_from_start(c, topics)
    out: dict[str, dict[str, set]] = {k: {} for k in OUTPUTS}
    repeats = 0
    last = t0 = time.monotonic()
    while time.monotonic() - last < idle_s and time.monotonic() - t0 < deadline_s:
        for m in c.consume(1000, 0.5):
            if m.error() is not None:
                continue
            kind = topics[m.topic()]
            for key, v in _entries(kind, m.key().decode(), decode_output(kind, m.value())):
                vals = out[kind].setdefault(key, set())
                repeats += v in vals
                vals.add(v)
            last = time.monotonic()
    c.close()
    return out, repeats


def read_raw(settings):
    """Every record of ``flows.raw.v1`` (what ingest had acknowledged), read once: the Kafka count and the
    replay's input."""
    from replay import kafka_source

    parts = settings.kafka.partitions
    # Tansu's s3 engine under load can take seconds to answer; kafka_source also retries with a long fetch wait
    return kafka_source(settings.kafka, offsets={("flows", p): (0, None) for p in range(parts)}, timeout_s=15.0)


def replay_outputs(settings, src) -> dict:
    """The uninterrupted run: ``fabricflow replay`` (same logic, settings, inventory and shard count) of every
    record ``flows.raw.v1`` holds (``src``: :func:`read_raw`), in one canonical order. {kind: {key: set of values}}."""
    from replay import core_factory_from, replay_batches

    batches = src.flow_batches()
    src.flows = None  # the slices hold the rows now
    outs = replay_batches(batches, [], core_factory_from(settings.processors), settings.kafka.partitions)
    del batches
    res: dict[str, dict[str, set]] = {}
    for o in outs:
        for key, v in _entries(o.kind, o.key, o.value):
            res.setdefault(o.kind, {}).setdefault(key, set()).add(v)
    return res


def compare_outputs(live: dict, rep: dict, too_late: dict) -> dict:
    """Per output kind: keys with the same values live and in the replay, keys that differ, keys only on one
    side; for the traffic matrix also per window, and the node-level records and bytes the live run is missing
    (to hold against the records counted too late)."""
    report: dict = {}
    for kind in sorted(set(live) | set(rep)):
        lv, rv = live.get(kind, {}), rep.get(kind, {})
        if kind == "alert":
            report["alert_first_seen_max_diff_ms"] = _first_seen_diff(lv, rv)
            lv = {k: {_identity(kind, v) for v in vals} for k, vals in lv.items()}
            rv = {k: {_identity(kind, v) for v in vals} for k, vals in rv.items()}
        if not lv and not rv:
            continue
        same = sum(1 for k in lv.keys() & rv.keys() if lv[k] == rv[k])
        differ = sorted(k for k in lv.keys() & rv.keys() if lv[k] != rv[k])
        only_live, only_rep = sorted(lv.keys() - rv.keys()), sorted(rv.keys() - lv.keys())
        r = {"keys_live": len(lv), "keys_replay": len(rv), "identical": same, "differ": len(differ),
             "only_live": len(only_live), "only_replay": len(only_rep),
             "conflicting_live": sum(1 for v in lv.values() if len(v) > 1),
             "examples": [{"key": k, "live": sorted(lv.get(k, ())), "replay": sorted(rv.get(k, ()))}
                          for k in differ[:2] + only_live[:2] + only_rep[:2]] if kind != "matrix" else
                         differ[:3] + only_live[:3] + only_rep[:3]}
        if kind == "matrix":
            r.update(_matrix_windows(lv, rv))
        report[kind] = r
    report["too_late"] = too_late
    m = report.get("matrix", {})
    if m:
        explained = (m.get("node_records_missing_live", 0) == too_late.get("main", 0)
                     and m.get("node_records_extra_live", 0) == 0)
        report["identical"] = all(report[k]["differ"] == report[k]["only_live"] == report[k]["only_replay"] == 0
                                  for k in report if isinstance(report[k], dict) and "differ" in report[k])
        report["explained_by_too_late"] = explained
    return report


def _first_seen_diff(lv: dict, rv: dict) -> int:
    """Largest difference of an alert's first_seen_ms live vs replay (per key and state, values sorted)."""
    def firsts(side):
        out: dict = {}
        for k, vals in side.items():
            for v in vals:
                d = json.loads(v)
                out.setdefault((k, d["state"]), set()).add(d["first_seen_ms"])
        return {k: sorted(v) for k, v in out.items()}

    a, b = firsts(lv), firsts(rv)
    diffs = [abs(x - y) for k in a.keys() & b.keys() if len(a[k]) == len(b[k]) for x, y in zip(a[k], b[k])]
    return max(diffs, default=0)


def _matrix_windows(lv: dict, rv: dict) -> dict:
    """Node-level cells per window: windows equal, windows that differ, and the records/bytes behind it."""
    def node_cells(side):
        cells = {}
        for key, vals in side.items():
            v = json.loads(max(vals))  # one value per key unless conflicting (reported separately)
            if v["level"] == "node":
                cells[key] = v
        return cells

    lc, rc = node_cells(lv), node_cells(rv)
    win = lambda k: int(k.split("|", 1)[0])  # noqa: E731
    windows = sorted({win(k) for k in lc} | {win(k) for k in rc})
    differing, missing_rec, extra_rec, missing_bytes = [], 0, 0, 0
    for w in windows:
        keys = {k for k in lc if win(k) == w} | {k for k in rc if win(k) == w}
        d_rec = d_bytes = 0
        same = True
        for k in keys:
            a, b = lc.get(k), rc.get(k)
            if a != b:
                same = False
                d_rec += (b or {}).get("flow_records", 0) - (a or {}).get("flow_records", 0)
                d_bytes += (b or {}).get("bytes_est", 0) - (a or {}).get("bytes_est", 0)
        if not same:
            differing.append({"window_start_ms": w, "records_replay_minus_live": d_rec,
                              "bytes_replay_minus_live": d_bytes})
            missing_rec += max(0, d_rec)
            extra_rec += max(0, -d_rec)
            missing_bytes += max(0, d_bytes)
    return {"windows": len(windows), "windows_identical": len(windows) - len(differing), "windows_differing": differing,
            "node_records_missing_live": missing_rec, "node_records_extra_live": extra_rec,
            "node_bytes_missing_live": missing_bytes}
