"""Decode throughput of the sFlow v5 decoder on one core.

How it works: bench/README.md, "bench/decode_sflow.py"; results: docs/performance.md#sflow-v5.

    .venv/bin/python bench/decode_sflow.py [--seconds 2] [--samples 7] [--batch 512] [--reference]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ingest.decode import TemplateCache, decode  # noqa: E402
from tests.support import sflow_build as b  # noqa: E402


def _frame(rng: random.Random) -> bytes:
    kind = rng.random()
    a = f"10.30.{rng.randrange(0, 4)}.{rng.randrange(1, 250)}"
    z = f"10.30.{rng.randrange(0, 4)}.{rng.randrange(1, 250)}"
    if kind < 0.45:
        seg = b.tcp(rng.randrange(1024, 65535), 29400, 0x10, b"\x00" * 80)
        tags = [(0x8100, 210)] if rng.random() < 0.3 else []
        return b.eth(b.ipv4(seg, 6, a, z, tos=0x68, total_len=9000), 0x0800, tags)
    if kind < 0.75:
        return b.eth(b.ipv4(b.udp(rng.randrange(49152, 65535), 4791, b.bth(10, rng.randrange(1 << 24)) +
                                  b"\x00" * 40), 17, a, z, tos=0x6A, total_len=4158))
    if kind < 0.85:
        inner = b.eth(b.ipv4(b.tcp(40000, 2049, 0x18, b"\x00" * 20), 6, "192.168.0.1", "192.168.0.2"))
        return b.eth(b.ipv4(b.udp(50000, 4789, b.vxlan(5001, inner)), 17, a, z, total_len=1550))
    if kind < 0.95:
        return b.eth(b.ipv6(b.tcp(5555, 9100, 0x18, b"\x00" * 40), 6, "fd00:99::30", "fd00:30::1", payload_len=1400),
                     0x86DD)
    return b.eth(b.ipv4(b.udp(33333, 53, b"\x00" * 40), 17, a, "10.40.0.53"))


def synthetic(k: int, per: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    pool = 0
    for i in range(k):
        samples = []
        for j in range(per):
            fr = _frame(rng)
            pool += 4096
            samples.append(b.flow_sample([b.ext_switch(rng.choice((0, 0, 110, 210))), b.raw_header(fr)],
                                         seq=i * per + j, rate=4096, pool=pool, in_if=rng.randrange(1, 65),
                                         out_if=rng.randrange(1, 65)))
        if i % 20 == 0:
            samples.append(b.counter_sample([b.generic_counters(if_index=1, if_speed=400_000_000_000,
                                                                in_octets=1 << 40), b.ethernet_counters()]))
        out.append(b.datagram(samples, agent="10.254.1.1", seq=i + 1, uptime=i * 10))
    return out


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
