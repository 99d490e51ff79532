"""The short fuzz run: every target replays its corpus and regressions, then a fixed number of mutated inputs.

Deterministic and bounded by count (never by time): the mutations come from the targets' own custom
mutator driven by a seeded ``random.Random`` and the Python byte mutator, not from libFuzzer, so this
needs no atheris and gives the same inputs on every run. The long, coverage-guided campaigns are
``python -m tests.fuzz.run TARGET`` (docs/fuzzing.md). Also checked: the checks do catch what they are
for (a wrong row, a non-DecodeError exception, handle_many diverging), so a pass means something.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pytest

import ingest.decode.sflow as sflow_mod
from ingest.decode import TemplateCache
from ingest.decode import batch as batch_mod
from schemas import codec

from . import framing
from .bytemut import mutate_bytes
from .mutate import mutate_datagrams, mutate_message
from .replay import inputs
from .targets import TARGETS, Finding, check_netflow_batched, check_sflow

HERE = Path(__file__).resolve().parent
MUTATED_PER_TARGET = 250
MAX_LEN = 16384


def _corpus(name: str) -> list[Path]:
    dirs = [d for d in (HERE / "corpus" / name, HERE / "regressions" / name) if d.is_dir()]
    return inputs(dirs)


def _headers() -> list[bytes]:
    return [codec.header(n) for n in list(codec.BATCHES) + list(codec.RECORD_SCHEMAS)]


def mutated(name: str, n: int) -> list[bytes]:
    """``n`` inputs made from the target's corpus by its custom mutator, the same on every run."""
    rng = random.Random(zlib.crc32(name.encode()))
    seeds = [f.read_bytes() for f in _corpus(name)]
    kind = TARGETS[name].kind
    headers = _headers()

    def mut(b: bytes, max_size: int) -> bytes:
        return mutate_bytes(b, max_size, rng)

    out = []
    for _ in range(n):
        data = rng.choice(seeds)
        for _ in range(rng.choice((1, 2, 4))):  # stacked mutations, as libFuzzer does
            if kind == "datagrams":
                data = mutate_datagrams(data, MAX_LEN, rng, mut)
            else:
                data = mutate_message(data, MAX_LEN, rng, mut, headers)
        out.append(data)
    return out


@pytest.mark.parametrize("name", list(TARGETS))
def test_corpus_and_regressions_replay_clean(name):
    files = _corpus(name)
    assert len(files) >= 4, f"the {name} corpus is missing (python -m tests.fuzz.seeds)"
    for f in files:
        try:
            TARGETS[name].check(f.read_bytes())
        except Exception as e:
            raise AssertionError(f"{f}: {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("name", list(TARGETS))
def test_mutated_inputs(name, tmp_path):
    check = TARGETS[name].check
    for i, data in enumerate(mutated(name, MUTATED_PER_TARGET)):
        try:
            check(data)
        except Exception as e:
            path = tmp_path / f"{name}-{i}"
            path.write_bytes(data)
            raise AssertionError(f"{name} input {i} (saved to {path}; python -m tests.fuzz.replay {name} {path}): "
                                 f"{type(e).__name__}: {e}") from e


def test_mutations_keep_reaching_the_decoders():
    """Most mutated inputs still carry a datagram of the seed's protocol: the structure-aware edits work."""
    kept = 0
    for data in mutated("ipfix", 100):
        kept += any(d.payload[:2] == b"\x00\x0a" for d in framing.datagrams(data))
    assert kept >= 70


# ---- the checks catch what they are for -------------------------------------------------------------


def _seed(name: str) -> bytes:
    return max((f.read_bytes() for f in _corpus(name)), key=len)


def test_sflow_check_catches_a_compiled_row_that_differs(monkeypatch):
    real = sflow_mod.decode_sflow_many

    def wrong(*a, **k):
        out = real(*a, **k)
        for r in out:
            if not isinstance(r, Exception) and len(r.flows):
                r.flows = r.flows.copy()
                r.flows["src_port"][0] ^= 1
        return out

    monkeypatch.setattr("tests.fuzz.targets.decode_sflow_many", wrong)
    with pytest.raises(Finding, match="flow rows differ"):
        check_sflow(_seed("sflow"))


def test_sflow_check_catches_the_group_calling_a_datagram_plain_that_is_not(monkeypatch):
    real = sflow_mod.decode_sflow_group

    def all_plain(*a, **k):
        g = real(*a, **k)
        g.plain = [True] * len(g.plain)
        return g

    monkeypatch.setattr("tests.fuzz.targets.decode_sflow_group", all_plain)
    with_counters = [s for s in (f.read_bytes() for f in _corpus("sflow"))
                     if any(not isinstance(r, Exception) and (len(r.counters) or r.problems)
                            for r in sflow_mod.decode_sflow_many([d.payload for d in framing.datagrams(s)],
                                                                 "192.0.2.1", 0, TemplateCache()))]
    assert with_counters
    with pytest.raises(Finding, match="plain where"):
        check_sflow(with_counters[0])


def test_sflow_check_lets_other_exceptions_through(monkeypatch):
    def broken(*_a, **_k):
        raise IndexError("index out of range")

    monkeypatch.setattr("tests.fuzz.targets.decode_sflow_many", broken)
    with pytest.raises(IndexError):
        check_sflow(_seed("sflow"))


def test_batched_check_catches_reordered_rows(monkeypatch):
    real = batch_mod.FlowBatch.decode

    def reversed_rows(self):
        return real(self)[::-1].copy()

    monkeypatch.setattr(batch_mod.FlowBatch, "decode", reversed_rows)
    seed = next(s for s in (f.read_bytes() for f in _corpus("ipfix")) if _rows(s) > 1)
    with pytest.raises(Finding, match="differ from decode"):
        check_netflow_batched(seed)


def _rows(data: bytes) -> int:
    from ingest.decode import TemplateCache, decode

    cache, n = TemplateCache(), 0
    for d in framing.datagrams(data):
        try:
            n += len(decode(d.payload, d.exporter, d.received_ms, cache).flows)
        except Exception:
            pass
    return n


def test_pipeline_check_catches_handle_many_diverging(monkeypatch):
    import ingest.pipeline as pl

    real = pl.IngestPipeline.handle_many

    def drop_last(self, datagrams, exporters, received_ms):
        if len(datagrams) > 1:  # only the handle_many run: handle() passes one datagram
            datagrams, exporters, received_ms = datagrams[:-1], exporters[:-1], received_ms[:-1]
        return real(self, datagrams, exporters, received_ms)

    monkeypatch.setattr(pl.IngestPipeline, "handle_many", drop_last)
    seed = _seed("pipeline")
    with pytest.raises(Finding):
        TARGETS["pipeline"].check(seed)


def test_codec_check_catches_a_compiled_walk_that_differs_from_the_reference(monkeypatch):
    real = codec.decode_batch

    def wrong(message, *a, **k):
        rows = real(message, *a, **k)
        if len(rows) and rows.dtype.names and "bytes" in rows.dtype.names:
            rows = rows.copy()
            rows["bytes"][0] += 1
        return rows

    flows = next(f.read_bytes() for f in _corpus("codec") if f.read_bytes()[:10] == codec.header("flow_batch")
                 and len(codec.decode_batch(f.read_bytes())))
    TARGETS["codec"].check(flows)  # the seed decodes, and both agree on it
    monkeypatch.setattr(codec, "decode_batch", wrong)
    with pytest.raises(Finding, match="rows differ"):
        TARGETS["codec"].check(flows)


def test_codec_check_catches_a_different_error(monkeypatch):
    def other_error(message, *a, **k):
        raise codec.CodecError("something else")

    monkeypatch.setattr(codec, "decode_batch", other_error)
    with pytest.raises(Finding, match="where the reference gives"):
        TARGETS["codec"].check(_seed("codec"))
