"""An archive of random flows for the rollup, compaction and view tests, the rollup reports compared, and a crash to inject."""

from __future__ import annotations

import os
import numpy as np
from schemas.columns import addr16, dtype_for
from sinks.archive.buffer import HourlyBuffer
from sinks.archive.parquet import ParquetWriter
from sinks.archive.arrow_schema import table_from_columns
from sinks.archive.layout import HOUR_MS
from tests.support.archive import T0, flows

MIN = 60_000

NODES = ["g1", "g2", "g3", "g4", "s1", ""]  # "" = outside the inventory: the address stands for it

GROUP = {"g1": "gpu", "g2": "gpu", "g3": "gpu", "g4": "gpu", "s1": "storage", "": "unknown"}

JOB = {"g1": "jobA", "g2": "jobA", "g3": "jobB", "g4": "jobB", "s1": "", "": ""}

CATS = ["collective", "storage", "other"]


def random_flows(rng: np.random.Generator, times) -> np.ndarray:
    """Enriched flows at ``times``: random node pairs (some outside, several addresses), categories, sizes,
    exporter protocols, duplicates."""
    times = np.asarray(times, dtype=np.int64)
    n = len(times)
    dt = dtype_for("flow_enriched")
    out = np.zeros(n, dtype=dt)
    base = flows(times)
    for name in base.dtype.names:
        out[name] = base[name]
    s = rng.integers(0, len(NODES), n)
    d = rng.integers(0, len(NODES), n)
    ext = [np.frombuffer(addr16(a), dtype=np.uint8) for a in ("198.51.100.7", "198.51.100.8", "2001:db8::9")]
    for col, idx in (("src", s), ("dst", d)):
        nodes = np.array(NODES, dtype=object)[idx]
        out[f"{col}_node"] = nodes
        out[f"{col}_group"] = np.array([GROUP[x] for x in nodes], dtype=object)
        out[f"{col}_job"] = np.array([JOB[x] for x in nodes], dtype=object)
        out[f"{col}_rack"] = np.array(["r1" if x else "" for x in nodes], dtype=object)
        out[f"{col}_switch"] = out[f"{col}_rack"]
        pick = rng.integers(0, len(ext), n)
        for i in np.flatnonzero(idx == len(NODES) - 1):
            out[f"{col}_addr"][i] = ext[pick[i]]
    out["category"] = np.array(CATS, dtype=object)[rng.integers(0, len(CATS), n)]
    out["bytes"] = rng.integers(64, 9000, n)
    out["packets"] = rng.integers(1, 7, n)
    rate = rng.choice([1, 1000, 4096], n)
    out["bytes_est"] = out["bytes"] * rate
    out["packets_est"] = out["packets"] * rate
    out["export_protocol"] = rng.choice([1, 9, 10], n)
    out["duplicate"] = rng.random(n) < 0.25
    return out


def write_through(w, buf, tables) -> None:
    """Each table into ``buf`` as one message (offset = its index), the files it plans written by ``w`` and confirmed
    as the sink does, then a forced flush."""
    for o, t in enumerate(tables):
        buf.add(t, o)
        plan = buf.flush_plan(o * 1000)
        w.write_plan(plan)
        buf.confirm(plan)
    plan = buf.flush_plan(force=True)
    w.write_plan(plan)
    buf.confirm(plan)


def write_archive(root: str, rng, hours=(0, 1, 2), per_hour=600, partitions=2, max_rows=150, msg_rows=20) -> None:
    """Flows over ``hours`` (at random seconds, with rows out of order and late), through the sink's
    buffers and writer: several files per hour and partition."""
    w = ParquetWriter(None, root)
    times = np.concatenate([T0 + h * HOUR_MS + rng.integers(0, HOUR_MS, per_hour) for h in hours])
    rng.shuffle(times)
    for p in range(partitions):
        b = HourlyBuffer("flows_enriched", p, max_rows=max_rows, grace_ms=5 * MIN)
        mine = times[p::partitions]
        write_through(w, b, (table_from_columns(random_flows(rng, mine[i:i + msg_rows]), "flow_enriched")
                             for i in range(0, len(mine), msg_rows)))

REPORTS = {
    "top_talkers": lambda q, f, t, s: q.top_talkers(f, t, n=1000, source=s),
    "matrix node": lambda q, f, t, s: q.matrix(f, t, level="node", source=s),
    "matrix group": lambda q, f, t, s: q.matrix(f, t, level="group", source=s),
    "node": lambda q, f, t, s: q.node("g1", f, t, source=s),
    "node outside": lambda q, f, t, s: q.node("g3", f, t, source=s),
    "job": lambda q, f, t, s: q.job("jobA", f, t, source=s),
}


def rollup_names(root, dataset) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), f"{root}/{dataset}")
            for d, _, ns in os.walk(f"{root}/{dataset}") for n in ns}


class Crash(Exception):
    pass
