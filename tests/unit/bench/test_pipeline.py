"""Pieces of bench/pipeline.py on tiny inputs, so the whole-pipeline benchmark cannot rot.

The exporter fleet (distinct loopback exporters spread evenly over the raw partitions, unique flows, flow times
moving with the load), the lag and ladder rules, and the profile summary. The whole bench on the embedded stack:
tests/e2e/test_pipeline_bench.py.
"""

from __future__ import annotations

import socket
import struct
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and loopback addresses")

from bench import pipeline as bp  # noqa: E402
from bench.pipeline_load import Fleet, exporter_addresses  # noqa: E402
from bench.pipeline_profile import summarise  # noqa: E402
from ingest.decode import TemplateCache, decode  # noqa: E402


def test_exporters_spread_evenly_over_the_partitions():
    from aiokafka.partitioner import murmur2

    for count, parts in ((16, 4), (12, 8), (64, 32)):
        addrs = exporter_addresses(count, parts)
        assert len(set(addrs)) == count and all(a.startswith("127.0.") for a in addrs)
        per = np.bincount([(murmur2(a.encode()) & 0x7FFFFFFF) % parts for a in addrs], minlength=parts)
        assert per.max() - per.min() <= 1, per


def test_fleet_sends_unique_flows_from_distinct_exporters_with_moving_time():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(2)
    fleet = Fleet(("127.0.0.1", rx.getsockname()[1]), exporters=4, partitions=2, records=25, pool=3)
    try:
        # 4 exporters x 20 data datagrams (of 25 flows) over 2 s: every pool datagram goes out ~7 times
        sent = fleet.blast(flows_per_s=1000, seconds=2.0, clock=1_796_083_200)
    finally:
        fleet.close()
    got = []
    while True:
        try:
            got.append(rx.recvfrom(65535))
        except TimeoutError:
            break
    rx.close()
    assert sent.records == 2000 and sent.dropped == 0
    cache, keys, flows, by_src, times = TemplateCache(), set(), 0, {}, set()
    for data, (src, _port) in got:
        r = decode(data, src, 0, cache)
        by_src.setdefault(src, []).append(struct.unpack_from("!I", data, 12)[0])  # v9 header sequence
        if len(r.flows):
            times.add(struct.unpack_from("!I", data, 8)[0])
            flows += len(r.flows)
            for f in r.flows:
                keys.add((src, bytes(f["src_addr"]), bytes(f["dst_addr"]), int(f["src_port"]), int(f["dst_port"]),
                          int(f["time_end_ms"])))
    assert flows == 2000
    assert len(keys) == flows  # no flow repeats, although the pool does
    assert sorted(by_src) == sorted(fleet.addresses)  # one exporter per address, each its own sequence
    assert all(seq == list(range(len(seq))) for seq in by_src.values())
    assert times == {1_796_083_200, 1_796_083_201}  # export time moves one second per second of load


def test_a_climbing_lag_grows_and_a_sawtooth_does_not():
    rate, seconds = 100_000, 40
    climbing = [(t, 0.1 * rate * t) for t in range(1, 41)]  # consumer 10 % slower than the load
    saw = [(t, (t % 7) * 150_000) for t in range(1, 41)]  # Parquet files of 1 M rows every 7 s
    assert bp.grew(climbing, seconds, rate)
    assert not bp.grew(saw, seconds, rate)
    assert not bp.grew([(t, 20_000) for t in range(1, 41)], seconds, rate)


def test_ladder_and_worker_counts():
    assert bp.ladder(20_000, 1.4, 60_000) == [20_000, 28_000, 39_000, 55_000]
    assert bp.worker_counts(None) == [1]
    assert bp.worker_counts("2") == [1, 2]
    assert bp.worker_counts("6") == [1, 2, 4, 6]


def test_ramp_retries_bisects_and_stops():
    def step(ok: bool, drained: bool = True) -> bp.Step:
        return bp.Step("this", 1, 0, 0, 1, done_s=1.0 if drained else None, problems=[] if ok else ["lag grew"])

    r = bp.Ramp([20_000, 28_000, 39_000, 55_000], retries=1, bisect=1, max_steps=10)
    outcomes = iter((True, True, False, False, True))  # 39 k fails twice, the bisection between 28 k and 39 k holds
    offered = []
    while r.next():
        offered.append(r.next())
        r.record(step(next(outcomes)))
    assert offered == [20_000, 28_000, 39_000, 39_000, 33_000]
    assert r.good == 33_000
    r = bp.Ramp([20_000, 28_000], retries=1, bisect=1, max_steps=10)
    r.record(step(False, drained=False))  # still behind after the drain: later steps would measure the backlog
    assert r.next() is None
    r = bp.Ramp([20_000, 28_000, 39_000], retries=0, bisect=0, max_steps=2)
    r.record(step(True))
    r.record(step(True))
    assert r.next() is None  # max_steps


def test_step_judgement_counts_every_stage():
    st = bp.Step("this", 1, 0, 10_000, 10, sent=100, kafka_raw=100, kafka_enriched=99, archive_raw=100,
                 archive_enriched=100, done_s=5.0, caught_up_s=5.0, cpu={"ingest": 1e-4, "archive": 3e-4, "broker": 1.0})
    b = bp.Bench.__new__(bp.Bench)
    b.a = type("A", (), {"drain": 240})()
    b.judge(st, {}, {})
    assert st.problems == ["flows.enriched -1 against sent"] and not st.ok
    assert st.total_per_m == pytest.approx(4.0)  # broker apart


def test_profile_summary_shares():
    stacks = {"process 1:\"x\";thread (0x1);_bootstrap (/usr/lib/python3.11/threading.py);loop (/work/wt/a/sinks/x.py);"
              "write (/v/lib/python3.11/site-packages/pyarrow/parquet/core.py)": 3,
              "thread (0x2);main (/work/wt/a/processors/worker/w.py)": 1}
    text = "\n".join(summarise("archive", stacks, {"main": 1.0, "rdk:broker1": 1.0}))
    assert "75.0 %  pyarrow" in text
    assert "75.0 %  loop (sinks/x.py)" in text
    assert "50.0 %  rdk:broker1" in text


def test_a_step_is_sustained_only_with_a_steady_lag_and_the_archive_in_time():
    def judged(**kw) -> bp.Step:
        st = bp.Step("this", 1, 0, 10_000, 40, sent=100, kafka_raw=100, kafka_enriched=100, archive_raw=100,
                     archive_enriched=100, **kw)
        b = bp.Bench.__new__(bp.Bench)
        b.a = type("A", (), {"drain": 240})()
        b.judge(st, {}, {})
        return st

    steady = {"processors": {"end": 5_000, "max": 9_000, "grew": False}}
    assert judged(done_s=5.0, caught_up_s=5.0, lags=steady).ok
    st = judged(done_s=5.0, caught_up_s=5.0, lags={**steady, "archive raw": {"end": 1, "max": 1, "grew": True}})
    assert st.problems == ["lag grew: archive raw"]
    st = judged(done_s=75.0, caught_up_s=None, lags=steady)  # drained, but the archive was late
    assert st.problems == ["archive complete only 75 s after the load (> 60 s)"]
    st = judged(done_s=None, caught_up_s=None, lags=steady)
    assert st.problems == ["still behind 240 s after the load"]


def test_outputs_differ_names_every_difference_and_missing_digests():
    ref = {"alert": "a1 (3)", "matrix": "m1 (40)", "archive": "z1 (12 cells)"}
    assert bp.outputs_differ(ref, dict(ref)) == []
    assert bp.outputs_differ(ref, {**ref, "matrix": "m2 (40)"}) == ["matrix"]
    assert bp.outputs_differ(ref, {"alert": "a1 (3)", "archive": "z1 (12 cells)"}) == ["matrix"]
    assert bp.outputs_differ(ref, {**ref, "extra": "e (1)"}) == ["extra"]
    assert bp.outputs_differ(ref, {}) == sorted(ref)  # no digests with N workers: nothing proven
    assert bp.outputs_differ({}, {}) == ["no digests"]


def test_report_fails_when_outputs_with_n_workers_differ(capsys):
    def ramp(n: int, digests: dict) -> list[bp.Step]:
        return [bp.Step("this", n, 0, 20_000, 40, sent=800_000, done_s=3.0, caught_up_s=3.0, digests=digests,
                        cpu={"ingest": 4.0, "processors": 8.0, "archive": 6.0, "metrics": 1.0, "broker": 2.0})]

    ref = {"matrix": "m1 (40)", "archive": "z1 (12 cells)"}
    assert bp.report({"this N=1": ramp(1, ref), "this N=2": ramp(2, dict(ref))}, [1, 2]) == 0
    assert "N=2: 20,000 flows/s sustained; outputs equal N=1" in capsys.readouterr().out
    assert bp.report({"this N=1": ramp(1, ref), "this N=2": ramp(2, {**ref, "matrix": "m2 (41)"})}, [1, 2]) == 1
    out = capsys.readouterr().out
    assert "N=2: 20,000 flows/s sustained; OUTPUTS DIFFER from N=1: matrix" in out
    assert out.strip().splitlines()[-1] == ("pipeline: 20000 flows/s sustained, 23.75 CPU-s per 1 M flows; "
                                            "baseline - flows/s, - CPU-s per 1 M flows; ratio -")


def test_sizing_follows_the_issue_arithmetic_and_rounds_workers_up():
    from bench.pipeline_sizing import Assumptions, partitions_for, size, table

    a = Assumptions()
    # issue 27: a 4,096-port 400G fabric sampled 1:8192 gives ~1.5 k samples/s per busy port, ~6 M/s at full load
    assert a.samples_per_port(8192) == pytest.approx(1_470, rel=0.01)
    assert a.flows_per_s(4096, 8192) == pytest.approx(6.0e6, rel=0.01)
    assert a.flows_per_s(1024, 4096) == pytest.approx(2 * a.flows_per_s(1024, 8192))
    cores = size({"ingest": 1.0, "processors": 7.0, "metrics": 9.0}, 1e6, a)
    assert cores == pytest.approx({"ingest": 1.6 / 0.7, "processors": 10.0, "metrics": 1.0})
    assert [partitions_for(n) for n in (1, 2, 3, 10, 16)] == [2, 4, 8, 32, 32]
    rows = table({"ingest": 1.0, "processors": 7.0, "archive": 5.0, "metrics": 3.0}, fabrics=(1024,), samplings=(8192,))
    # 1.50 M flows/s: ingest 3.4 -> 4, processors 15.03 -> 16, archive 10.7 -> 11, metrics 1; 16 consumers x 2 -> 32
    assert rows[2] == "| 1,024 | 1:8192 | 1,468 | 1.50 M | 4 | 16 | 11 | 1 | 32 | 32 |"
