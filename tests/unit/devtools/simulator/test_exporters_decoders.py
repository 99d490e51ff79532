"""Cross-check: the repo's decoders accept our datagrams and read back what we encoded.

Each test is skipped only while the decoder module it needs does not exist yet.
"""

from functools import lru_cache

import numpy as np
import pytest

from devtools.simulator import Simulation

from tests.support.simulator import small
from tests.support.wire import parse_sflow


@lru_cache(maxsize=None)
def run(kind, faults=()):
    sim = Simulation(small([dict(f) for f in faults]), duration_s=30, kinds={kind})
    return sim, list(sim.run())


def decode_all(dgs):
    from ingest.decode import TemplateCache, decode

    cache = TemplateCache()
    results = []
    for t, _, d in dgs:
        r = decode(d, "127.0.0.5", t, cache)
        assert not r.problems, r.problems
        results.append(r)
    return results


def test_sflow_decoder_reads_our_samples_and_counters():
    pytest.importorskip("ingest.decode.sflow")
    from schemas.columns import addr_str

    _, dgs = run("sflow")
    results = decode_all(dgs)
    ours = [parse_sflow(d) for _, _, d in dgs]
    flows = np.concatenate([r.flows for r in results])
    counters = np.concatenate([r.counters for r in results])
    assert len(flows) == sum(len(p["flows"]) for p in ours)
    assert len(counters) == sum(len(p["counters"]) for p in ours)
    ip_lens = [f["ip_len"] for p in ours for f in p["flows"]]
    assert flows["bytes"].tolist() == ip_lens
    assert set(flows["sampling_rate"].tolist()) == {512}
    assert flows["bytes_est"].sum() == sum(ip_lens) * 512
    roce = flows[flows["dst_port"] == 4791]
    assert len(roce) and (roce["roce_opcode"] == 7).all() and (roce["roce_dest_qp"] >= 0).all()
    assert {addr_str(a) for a in flows["exporter_addr"]} == {"10.9.255.1", "10.9.255.2"}
    assert set(counters["if_speed"].tolist()) == {10**10, 25 * 10**9, 100 * 10**9}
    assert counters["has_ethernet"].all()
    seqs = [r.header.sequence for r in results if r.header.domain == 0]
    assert len(seqs) == len(dgs)


@pytest.mark.parametrize("kind, module", [("netflow9", "ingest.decode.netflow9"), ("ipfix", "ingest.decode.ipfix")])
def test_template_decoders_sum_to_truth(kind, module):
    pytest.importorskip(module)
    sim, dgs = run(kind)
    results = decode_all(dgs)
    flows = np.concatenate([r.flows for r in results])
    assert int(flows["bytes"].sum()) == sim.truth.total_bytes  # observe=all, unsampled
    assert set(flows["sampling_rate"].tolist()) == {1}
    assert flows["time_start_ms"].min() >= sim.start_ms
    assert flows["time_end_ms"].max() <= sim.start_ms + 30_000
    assert all(r.header.export_time_ms == t for r, (t, _, _) in zip(results, dgs))


def test_netflow9_decoder_sees_clock_skew():
    pytest.importorskip("ingest.decode.netflow9")
    sim, dgs = run("netflow9", (tuple({"kind": "clock_skew", "start_s": 10, "end_s": 20, "exporter": "nf",
                                       "skew_s": 45}.items()),))  # fmt: skip
    results = decode_all(dgs)
    skews = {r.header.export_time_ms - t for r, (t, _, _) in zip(results, dgs)}
    assert skews == {0, 45_000}
