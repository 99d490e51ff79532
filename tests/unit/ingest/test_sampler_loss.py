"""sFlow sampler loss from the flow samples' sequence numbers, sample_pool and drops (ingest/sampler_loss.py)."""

from __future__ import annotations

import pytest

from fabricflow.settings import load_settings
from ingest.decode import TemplateCache
from ingest.decode.sflow import decode_sflow
from ingest.metrics import IngestMetrics
from ingest.pipeline import IngestPipeline
from ingest.sampler_loss import SamplerLoss
from devtools import sflow_build as b
from tests.support.ingest_sinks import QualitySink

FRAME = b.raw_header(b.tcp_frame())


def _dg(samples, seq=1, agent="10.254.0.1"):
    return b.datagram(samples, agent=agent, seq=seq)


def _fs(seq, pool, drops, index=1, rate=100, expanded=False):
    mk = b.flow_sample_expanded if expanded else b.flow_sample
    return mk([FRAME], seq=seq, source_index=index, rate=rate, pool=pool, drops=drops)


def _observe(tracker, datagram, exporter="10.254.0.1"):
    r = decode_sflow(datagram, exporter, 1000, TemplateCache())
    return tracker.observe(exporter, r.samples)


def test_deltas_per_source_between_consecutive_samples():
    t = SamplerLoss()
    # source 1: 3 samples, 2 generated + 8 dropped between them, pool +1000 at 1:100 -> 10 expected
    d = _observe(t, _dg([_fs(10, 5000, 3), _fs(11, 5500, 6, expanded=True), _fs(12, 6000, 11),
                         _fs(7, 100, 0, index=2)]))
    assert (d.samples, d.drops, d.pool, d.samples_expected) == (2, 8, 1000, pytest.approx(10.0))
    assert d.loss_ratio == pytest.approx(0.8) and d.worst() == (0, 1, pytest.approx(0.8))
    # the next datagram continues from the kept counters; source 2 now has a delta too (no drops)
    d = _observe(t, _dg([_fs(9, 300, 0, index=2), _fs(13, 6100, 11)], seq=2))
    assert (d.samples, d.drops, d.pool) == (3, 0, 300) and d.worst() is None and d.loss_ratio == 0.0
    assert len(t) == 2


def test_counters_wrap_and_restarts_reset():
    t = SamplerLoss()
    d = _observe(t, _dg([_fs(2**32 - 1, 2**32 - 50, 2**32 - 1), _fs(1, 50, 3)]))
    assert (d.samples, d.pool, d.drops) == (2, 100, 4)  # modulo 2**32
    t = SamplerLoss()
    _observe(t, _dg([_fs(1000, 5000, 7)]))
    d = _observe(t, _dg([_fs(3, 60, 0), _fs(4, 160, 1)], seq=2))  # sequence went back: agent restart
    assert (d.samples, d.pool, d.drops) == (1, 100, 1)  # only the delta after the restart


def test_sources_are_per_agent():
    t = SamplerLoss()
    _observe(t, _dg([_fs(1, 100, 0)]), exporter="10.0.0.1")
    d = _observe(t, _dg([_fs(50, 9999, 40)]), exporter="10.0.0.2")
    assert d.samples == 0 and d.drops == 0  # first sample of that agent's source: no delta


def test_pipeline_counts_metrics_and_publishes_sampler_quality():
    s = load_settings(None, ingest={"quality_window_s": 60})
    sink, m = QualitySink(), IngestMetrics()
    p = IngestPipeline(s.ingest, sink, m)
    seq = 10
    for i in range(40):  # every datagram: 2 samples of source 1, the sampler dropping 1 sample in 5
        p.handle(_dg([_fs(seq, 1000 * i, 0 + i // 2), _fs(seq + 1, 1000 * i + 150, i // 2)], seq=i + 1),
                 "10.254.0.1", 1_700_000_010_000)
        seq += 2
    p.close()
    ((_, r),) = sink.quality
    # 79 deltas: 79 samples generated, 19 drops, pool 39 * 1000 + ... at 1:100
    assert (r["protocol"], r["sampler_samples"], r["sampler_drops"]) == ("sflow5", 79, 19)
    assert r["sampler_loss_ratio"] == pytest.approx(19 / 98)
    assert r["sampler_pool"] == 39_150 - 0 and r["sampler_samples_expected"] == pytest.approx(391.5)
    assert r["sampler_worst_source"] == 1 and r["sampler_worst_loss_ratio"] == pytest.approx(19 / 98)
    val = lambda name: m.registry.get_sample_value(name, {"exporter": "10.254.0.1"})  # noqa: E731
    assert val("fabricflow_ingest_sflow_sampler_samples_total") == 79
    assert val("fabricflow_ingest_sflow_sampler_drops_total") == 19
    assert val("fabricflow_ingest_sflow_sampler_expected_samples_total") == pytest.approx(391.5)


def test_pipeline_group_path_gives_the_same_figures():
    dgs = [_dg([_fs(10 + 2 * i, 1000 * i, i), _fs(11 + 2 * i, 1000 * i + 100, i + 1)], seq=i + 1) for i in range(80)]
    out = []
    for many in (False, True):
        s = load_settings(None, ingest={"quality_window_s": 60})
        sink = QualitySink()
        p = IngestPipeline(s.ingest, sink, IngestMetrics())
        if many:
            p.handle_many(dgs, "10.254.0.1", 1_700_000_010_000)
        else:
            for d in dgs:
                p.handle(d, "10.254.0.1", 1_700_000_010_000)
        p.close()
        ((_, r),) = sink.quality
        out.append({k: v for k, v in r.items() if k.startswith("sampler_")})
    assert out[0] == out[1] and out[0]["sampler_drops"] == 80 and out[0]["sampler_samples"] == 159
