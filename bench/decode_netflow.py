"""Decode throughput of the NetFlow v5 / v9 / IPFIX decoders on one core.

Builds realistic export datagrams (1500-byte MTU class: v5 with 30 records,
v9 and IPFIX with softflowd's IPv4 template, 33 records of 42 bytes) plus the
real softflowd captures from the shared fixtures when present, decodes them in
a loop through ``ingest.decode.decode`` and prints records/s per protocol.

    .venv/bin/python bench/decode_netflow.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.decode import TemplateCache, decode  # noqa: E402

EXPORT_S = 1_719_835_200
UPTIME = 3_600_000
# softflowd's IPv4 template (IE, length): 42-byte records.
V4_FIELDS = [(8, 4), (12, 4), (22, 4), (21, 4), (1, 4), (2, 4), (10, 4), (14, 4), (61, 1), (136, 1), (7, 2), (11, 2), (4, 1), (6, 1), (60, 1), (5, 1)]


def _v4_record(rng: random.Random) -> bytes:
    first = UPTIME - rng.randrange(1, 60_000)
    return struct.pack(
        "!4s4sIIIIIIBBHHBBBB",
        bytes([10, 30, 0, rng.randrange(1, 9)]), bytes([10, 30, 0, rng.randrange(1, 9)]),
        first, first + rng.randrange(0, 30_000), rng.randrange(40, 10**7), rng.randrange(1, 10**4),
        3, 4, 0, 2, rng.randrange(1024, 65535), 4791, 17, 0, 4, 0x68,
    )


def v5_datagrams(k: int, nrec: int = 30) -> list[bytes]:
    rng = random.Random(5)
    out = []
    for i in range(k):
        hdr = struct.pack("!HHIIIIBBH", 5, nrec, UPTIME, EXPORT_S, 0, i * nrec, 0, 0, 0x4000 | 1)
        recs = b"".join(
            struct.pack(
                "!4s4s4sHHIIIIHHBBBBHHBBH",
                bytes([10, 30, 0, rng.randrange(1, 9)]), bytes([10, 30, 0, rng.randrange(1, 9)]), bytes(4),
                3, 4, rng.randrange(1, 10**4), rng.randrange(40, 10**7), UPTIME - 50_000, UPTIME - 10,
                rng.randrange(1024, 65535), 4791, 0, 0x18, 17, 0, 0, 0, 24, 24, 0,
            )
            for _ in range(nrec)
        )
        out.append(hdr + recs)
    return out


def _v9_template() -> bytes:
    body = struct.pack("!HH", 1024, len(V4_FIELDS)) + b"".join(struct.pack("!HH", ie, ln) for ie, ln in V4_FIELDS)
    opt = struct.pack("!HHH", 256, 4, 8) + struct.pack("!HHHHHH", 1, 4, 34, 4, 35, 1)
    opt_data = struct.pack("!IIB", 0, 1, 2) + bytes(3)
    return (struct.pack("!HH", 0, 4 + len(body)) + body + struct.pack("!HH", 1, 4 + len(opt) + 2) + opt + bytes(2)
            + struct.pack("!HH", 256, 4 + len(opt_data)) + opt_data)


def v9_datagrams(k: int, nrec: int = 33) -> list[bytes]:
    rng = random.Random(9)
    out = [struct.pack("!HHIIII", 9, 1, UPTIME, EXPORT_S, 0, 0) + _v9_template()]
    for i in range(k):
        recs = b"".join(_v4_record(rng) for _ in range(nrec))
        pad = (-len(recs)) % 4
        fs = struct.pack("!HH", 1024, 4 + len(recs) + pad) + recs + bytes(pad)
        out.append(struct.pack("!HHIIII", 9, nrec, UPTIME, EXPORT_S, i + 1, 0) + fs)
    return out


def ipfix_datagrams(k: int, nrec: int = 33) -> list[bytes]:
    rng = random.Random(10)
    tmpl = struct.pack("!HH", 1024, len(V4_FIELDS)) + b"".join(struct.pack("!HH", ie, ln) for ie, ln in V4_FIELDS)
    opt = struct.pack("!HHH", 256, 4, 1) + struct.pack("!HHHHHHHH", 143, 4, 160, 8, 305, 4, 306, 4)
    opt_data = struct.pack("!IQII", 0, EXPORT_S * 1000 - UPTIME, 1, 0)
    sets = (struct.pack("!HH", 2, 4 + len(tmpl)) + tmpl + struct.pack("!HH", 3, 4 + len(opt)) + opt
            + struct.pack("!HH", 256, 4 + len(opt_data)) + opt_data)
    out = [struct.pack("!HHIII", 10, 16 + len(sets), EXPORT_S, 0, 0) + sets]
    seq = 0
    for _ in range(k):
        recs = b"".join(_v4_record(rng) for _ in range(nrec))
        s = struct.pack("!HH", 1024, 4 + len(recs)) + recs
        seq += nrec
        out.append(struct.pack("!HHIII", 10, 16 + len(s), EXPORT_S, seq, 0) + s)
    return out


def fixture_datagrams(name: str) -> list[bytes]:
    try:
        import dpkt

        from tests.fixtures_path import SHARED_FIXTURES
    except ImportError:
        return []
    path = SHARED_FIXTURES / "exports" / f"{name}.pcap"
    if not path.exists():
        return []
    with open(path, "rb") as fh:
        return [bytes(dpkt.ethernet.Ethernet(buf).data.data.data) for _ts, buf in dpkt.pcap.Reader(fh)]


def run(name: str, datagrams: list[bytes], seconds: float, warm: int) -> None:
    cache = TemplateCache(expiry_s=0)
    for d in datagrams[:warm]:
        decode(d, "192.0.2.1", 0, cache)
    data = datagrams[warm:] or datagrams
    records = loops = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while True:
        for d in data:
            records += len(decode(d, "192.0.2.1", 0, cache).flows)
        loops += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            break
    cpu = max(time.process_time() - c0, 1e-9)
    dg = loops * len(data)
    print(f"{name:26s} {records / el:12,.0f} records/s wall  {records / cpu:12,.0f} records/CPU-s  "
          f"{dg / el:9,.0f} datagrams/s  ({records / dg:.1f} records/datagram)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    run("netflow5 (30/dgram)", v5_datagrams(200), a.seconds, 0)
    run("netflow9 (33/dgram)", v9_datagrams(200), a.seconds, 1)
    run("ipfix (33/dgram)", ipfix_datagrams(200), a.seconds, 1)
    for name in ("softflowd_v9", "softflowd_ipfix"):
        d = fixture_datagrams(name)
        if d:
            # the template datagram stays in the loop (it is re-decoded as a refresh)
            run(f"{name} (fixture)", d, a.seconds, 0)


if __name__ == "__main__":
    main()
