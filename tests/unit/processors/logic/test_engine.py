"""Engine: determinism, snapshot/restore equals an uninterrupted run, outputs encode with the Avro schemas."""

import io

import fastavro
import numpy as np
import pytest

from tests.support.flows import make_batches
from processors.logic.engine import KINDS, Engine, EngineConfig
from processors.logic.detectors.incast import IncastConfig
from processors.logic.detectors.pattern import PatternConfig
from processors.logic.windows.tumbling import WindowConfig
from schemas.columns import load_avsc

from tests.support.flows import counters

SCHEMAS = {"matrix": "matrix_window_v2", "incast": "incast_event", "straggler": "straggler_score", "link": "link_health",
           "pattern": "pattern"}


def config():
    return EngineConfig(window=WindowConfig(size_ms=2_000, lateness_ms=1_000, idle_close_s=5),
                        incast=IncastConfig(open_fraction=0.0001, close_fraction=0.00005, min_sources=2),
                        pattern=PatternConfig(baseline_windows=6))


def stream():
    batches = make_batches(nodes=24, job_size=6, batches=12, batch_size=1_500, records_per_s=1_000, seed=3)
    t0 = int(batches[0]["time_end_ms"][0])
    steps = []
    for i, b in enumerate(batches):
        if i == 5:  # late and too-late records mixed in
            b = b.copy()
            b["time_end_ms"][:50] -= 1_200
            b["time_end_ms"][50:60] -= 60_000
        steps.append(("flows", b))
        if i % 3 == 0:
            steps.append(("counters", counters([
                dict(t=t0 + i * 1_500, uptime=i * 1_500 + 1, in_octets=i * 10**9, out_octets=i * 2 * 10**9,
                     if_index=k, in_errors=i * i * 100, speed=25_000_000_000 if i < 6 else 1_000_000_000)
                for k in (1, 2)])))
    last = int(batches[-1]["time_end_ms"].max())
    steps += [("tick", last), ("tick", last + 4_000), ("tick", last + 6_000)]
    return steps


def run(engine, steps):
    out = []
    for what, arg in steps:
        if what == "flows":
            out += engine.process_flows(arg)
        elif what == "counters":
            out += engine.process_counters(arg)
        else:
            out += engine.tick(arg)
    return out


@pytest.fixture(scope="module")
def reference():
    steps = stream()
    e = Engine(config(), capacity_bps=lambda n: 100e9)
    return steps, run(e, steps), e


def test_all_kinds_present_and_too_late_counted(reference):
    _, out, e = reference
    assert {o.kind for o in out} == set(KINDS)
    assert e.stats["too_late_main"] == 10
    assert e.stats["records_in"] == 12 * 1_500


def test_replay_is_deterministic(reference):
    steps, out, _ = reference
    assert run(Engine(config(), capacity_bps=lambda n: 100e9), steps) == out


@pytest.mark.parametrize("cut", [3, 8, 14])
def test_snapshot_restore_matches_uninterrupted_run(reference, cut):
    steps, out, _ = reference
    first = Engine(config(), capacity_bps=lambda n: 100e9)
    got = run(first, steps[:cut])
    blob = first.snapshot_bytes()
    second = Engine(config(), capacity_bps=lambda n: 100e9)
    second.restore_bytes(blob)
    got += run(second, steps[cut:])
    assert got == out
    assert second.snapshot_bytes() != blob


def test_outputs_match_avro_schemas(reference):
    _, out, _ = reference
    for kind, name in SCHEMAS.items():
        schema = fastavro.parse_schema(load_avsc(name))
        recs = [o.value.to_record() if kind == "matrix" else o.value for o in out if o.kind == kind]
        assert recs, kind
        for r in recs:
            assert set(r) == {f["name"] for f in load_avsc(name)["fields"]}
        buf = io.BytesIO()
        fastavro.writer(buf, schema, recs, validator=True)
        buf.seek(0)
        assert list(fastavro.reader(buf)) == recs


def test_empty_batches():
    e = Engine()
    assert e.process_flows(make_batches(4, 2, 1, 1, 1)[0][:0]) == []
    assert e.process_counters(np.zeros(0, dtype=counters([dict(t=0)]).dtype)) == []
