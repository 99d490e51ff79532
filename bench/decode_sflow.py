"""Decode throughput of the sFlow v5 decoder on one core.

How it works: bench/README.md, "bench/decode_sflow.py"; results: docs/performance.md#sflow-v5.

    .venv/bin/python -m bench.decode_sflow [--seconds 2] [--samples 7] [--batch 512] [--reference]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from ingest.decode import TemplateCache, decode
from devtools.sflow_build import synthetic


def fixtures() -> list[bytes]:
    from ingest.pcapread import read_udp
    from tests.support.fixtures_path import SHARED_FIXTURES

    p = SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate1.pcap"
    return [x.payload for x in read_udp(p)] if p.exists() else []


def _rate(fn, dgrams: list[bytes], seconds: float) -> tuple[float, float]:
    """(flow samples, datagrams) per CPU-second of ``fn(dgrams) -> iterable of results``."""
    for _ in fn(dgrams[:50]):  # warm up
        pass
    samples = datagrams = 0
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        for r in fn(dgrams):
            samples += len(r.flows)
        datagrams += len(dgrams)
    dt = time.process_time() - t0
    return samples / dt, datagrams / dt


def run(name: str, dgrams: list[bytes], seconds: float, batch: int, reference: bool, rounds: int) -> None:
    if not dgrams:
        return
    from ingest.decode.reference.sflow import decode_sflow as decode_sflow_reference
    from ingest.decode.sflow import decode_sflow_many

    cache = TemplateCache()
    ways = {
        "decode": lambda ds: [decode(d, "10.254.1.1", 1, cache) for d in ds],
        f"many/{batch}": lambda ds: [r for i in range(0, len(ds), batch)
                                     for r in decode_sflow_many(ds[i : i + batch], "10.254.1.1", 1, cache)],
    }
    if reference:
        ways = {"reference": lambda ds: [decode_sflow_reference(d, "10.254.1.1", 1, cache) for d in ds], **ways}
    best: dict[str, tuple[float, float]] = {}
    for _ in range(rounds):  # interleaved rounds, best of each: robust to other load on the box
        for way, fn in ways.items():
            r = _rate(fn, dgrams, seconds / rounds)
            if way not in best or r[0] > best[way][0]:
                best[way] = r
    base = best.get("reference", (0, 0))[0]
    for way, (sps, dps) in best.items():
        ratio = f"  {sps / base:4.2f}x reference" if base and way != "reference" else ""
        print(f"{name:28s} {way:10s} {sps:12,.0f} flow samples/CPU-s {dps:10,.0f} datagrams/CPU-s{ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--samples", type=int, default=7, help="flow samples per synthetic datagram")
    ap.add_argument("--batch", type=int, default=512, help="datagrams per decode_sflow_many call")
    ap.add_argument("--reference", action="store_true", help="also time the reference decoder, interleaved")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best of) per way")
    a = ap.parse_args()
    run(f"synthetic {a.samples}/datagram", synthetic(2000, a.samples), a.seconds, a.batch, a.reference, a.rounds)
    run("pmacct_sfprobe_rate1.pcap", fixtures(), a.seconds, a.batch, a.reference, a.rounds)


if __name__ == "__main__":
    main()
