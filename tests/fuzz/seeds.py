"""Build the seed corpus of every target from the real captures (plus hand-built structures they lack).

    .venv/bin/python -m tests.fuzz.seeds [--out tests/fuzz/corpus]

Real exporter datagrams come from ``tests/captures/*/*.pcap`` and the shared fixtures (pmacct sFlow,
softflowd NetFlow v5/v9/IPFIX incl. RFC 5103 biflow, pmacct NetFlow v9/IPFIX). Large sFlow datagrams are
cut to one or two of their real samples, one seed per distinct sample shape, so mutations stay cheap
and aimed. NetFlow v9/IPFIX seeds are sequences: template then data, data before its template, two
exporters, a flush in between, clock jumps past the pending hold and the template expiry. The hand-built
part adds what no capture has: options templates with sampling and system init time, variable-length
and enterprise fields, withdrawal, biflow, expanded sFlow samples, sampled IPv4/IPv6 records. The
committed corpus is this output merged with what the fuzzing campaigns found (docs/fuzzing.md).
"""

from __future__ import annotations

import argparse
import hashlib
import struct
from pathlib import Path

from ingest.decode import TemplateCache, decode
from ingest.pcapread import read_udp
from schemas import codec
from tests.support.fixtures_path import SHARED_FIXTURES
from devtools import nfbuild as nb
from devtools import sflow_build as sb

from . import framing, sflow_tree
from .framing import ctl

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
CORPUS = Path(__file__).resolve().parent / "corpus"


def _pcap(path: Path) -> list[bytes]:
    return [p.payload for p in read_udp(path)] if path.exists() else []


def _sflow_shape(sample: list) -> tuple:
    fmt, _fixed, recs = sample
    if recs is None:
        return (fmt,)
    key: list = [fmt]
    for rf, rb in recs:
        key.append(rf)
        if rf == 1 and len(rb) >= 16 + 24:
            frame = rb[16:]
            key += [frame[12:14], frame[16:18], frame[23] if frame[12:14] == b"\x08\x00" else frame[20]]
    return tuple(key)


def _sflow_cut(captures: list[list[bytes]], per_shape: int = 1) -> list[bytes]:
    """Datagrams of one real sample each, one per distinct sample shape, and one with its two first samples."""
    seen: dict = {}
    out = []
    for pkts in captures:
        for d in pkts:
            dg = sflow_tree.parse(d)
            if dg is None:
                continue
            for s in dg.samples:
                key = _sflow_shape(s)
                if seen.get(key, 0) >= per_shape:
                    continue
                seen[key] = seen.get(key, 0) + 1
                out.append(sflow_tree.serialize(sflow_tree.Datagram(dg.version, dg.atype, dg.agent, dg.head, [s])))
        if pkts:
            dg = sflow_tree.parse(pkts[0])
            if dg is not None and len(dg.samples) >= 2:
                out.append(sflow_tree.serialize(sflow_tree.Datagram(dg.version, dg.atype, dg.agent, dg.head,
                                                                    dg.samples[:2])))
    return out


def _sflow_hand() -> list[bytes]:
    vx = sb.vxlan_roce_frame()
    return [
        sb.datagram([sb.flow_sample_expanded([sb.ext_switch(5, 1, 7, 2), sb.raw_header(vx), sb.ext_router()], rate=0)],
                    agent="2001:db8::5"),
        sb.datagram([sb.flow_sample([sb.sampled_ipv4(100, 6, "10.1.1.1", "10.2.2.2", 1, 2, 0x12, 4),
                                     sb.record(99, b"abcd")], rate=64)]),
        sb.datagram([sb.flow_sample([sb.sampled_ipv6(1500, 58, "fd00::1", "fd00::2", 128, 0)]),
                     sb.raw_sample(77, b"\x00" * 8)], sub_agent=3),
        sb.datagram([sb.counter_sample_expanded([sb.generic_counters(in_octets=1 << 63), sb.ethernet_counters(1, 2)]),
                     sb.counter_sample([sb.generic_counters(if_speed=25_000_000_000)])]),
        sb.datagram([sb.flow_sample([sb.raw_header(sb.tcp_frame(vlan=110), proto=1)], rate=4096),
                     sb.flow_sample([sb.raw_header(sb.ipv4(sb.udp(5, 6), 17)[:20], proto=11)], rate=0)]),
        # dropped packet notifications (sample format 5): with a sampled header and switch record, and bare
        sb.datagram([sb.discard_sample([sb.raw_header(sb.tcp_frame()), sb.ext_switch(5, 1, 7, 2)], drops=3),
                     sb.discard_sample([], reason=0x40000001), sb.flow_sample([sb.raw_header(sb.tcp_frame())])]),
    ]


def sflow_seeds() -> list[bytes]:
    caps = [_pcap(CAPTURES / "pmacct_sfprobe_fabric" / "pmacct_sfprobe_fabric.pcap"),
            _pcap(SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate8.pcap"),
            _pcap(SHARED_FIXTURES / "exports" / "pmacct_sfprobe_rate1.pcap")]
    single = _sflow_cut(caps) + _sflow_hand()
    seeds = [framing.build([(ctl(i % 4, step=1 + i % 3), d)]) for i, d in enumerate(single)]
    # several datagrams at once (decode_sflow_many, the pipeline's group), two exporters, the last real one with counters
    last = caps[0][-1] if caps[0] else single[0]
    seeds.append(framing.build([(ctl(0), single[0]), (ctl(1), single[1]), (ctl(0), last), (ctl(2), single[-1])]))
    return seeds


def netflow5_seeds() -> list[bytes]:
    pkts = _pcap(CAPTURES / "softflowd_v5" / "softflowd_v5.pcap")
    seeds = []
    for d in pkts[:3]:
        for k in (1, 3):  # the header with its first k records
            seeds.append(framing.build([(ctl(), d[:2] + struct.pack(">H", k) + d[4:24 + 48 * k])]))
    seeds.append(framing.build([(ctl(1), pkts[-1])] if pkts else []))
    seeds.append(framing.build([(ctl(), nb.v5([nb.v5_record(proto=1, dport=0x0303)], sampling=0x4000 | 100))]))
    return seeds


def _nf_sequences(pkts: list[bytes], k: int = 3) -> list[bytes]:
    """Template-then-data, data-before-template, two exporters, a flush, clock jumps (pending hold, expiry)."""
    if not pkts:
        return []
    first = pkts[:k]
    return [
        framing.build([(ctl(0, step=1), d) for d in first]),
        framing.build([(ctl(0, step=1), d) for d in reversed(first)]),
        framing.build([(ctl(i % 2, flush=i == 1, step=2), d) for i, d in enumerate(first + first)]),
        framing.build([(ctl(0, step=1), first[0]), (ctl(0, step=4), pkts[-1]), (ctl(0, step=5), pkts[len(pkts) // 2])]),
    ]


_V9_T = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (1, 4), (2, 4), (22, 4), (21, 4), (48, 1), (10, 2), (14, 2)]


def netflow9_seeds() -> list[bytes]:
    seeds = []
    for path in (SHARED_FIXTURES / "exports" / "softflowd_v9.pcap", CAPTURES / "pmacct_nfprobe_v9" / "pmacct_nfprobe_v9.pcap"):
        seeds += _nf_sequences(_pcap(path))
    rec = struct.pack("!4s4sHHBIIIIBHH", b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 1, 2, 6, 100, 1, 90_000, 99_000, 1, 3, 4)
    tmpl = nb.v9(nb.v9_template_set((300, _V9_T)),
                 nb.v9_options_template_set(257, [(1, 4)], [(48, 1), (34, 4), (35, 1)], pad=False))
    opts = nb.v9(nb.data_set(257, struct.pack("!IBIB", 0, 1, 10, 2), pad=False), nb.data_set(300, rec * 3))
    seeds.append(framing.build([(ctl(0), tmpl), (ctl(0), opts)]))
    seeds.append(framing.build([(ctl(0), opts), (ctl(0, step=2), tmpl), (ctl(0, flush=True), opts)]))
    return seeds


_BIFLOW = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (1, 8), (2, 8), (6, 1), (152, 8), (153, 8),
           (1, 8, 29305), (2, 8, 29305), (6, 1, 29305), (152, 8, 29305), (153, 8, 29305)]


def ipfix_seeds() -> list[bytes]:
    seeds = []
    for path in (SHARED_FIXTURES / "exports" / "softflowd_ipfix.pcap",
                 CAPTURES / "pmacct_nfprobe_ipfix" / "pmacct_nfprobe_ipfix.pcap",
                 CAPTURES / "softflowd_ipfix_biflow" / "softflowd_ipfix_biflow.pcap"):
        seeds += _nf_sequences(_pcap(path))
    var = nb.ipfix(
        nb.ipfix_template_set((256, [(8, 4), (96, 0xFFFF), (1, 4, 9), (300, 0xFFFF, 29305), (1, 4), (2, 4)])),
        nb.ipfix_options_template_set(400, [(302, 4)], [(305, 4), (306, 4), (160, 8)]),
        nb.data_set(400, struct.pack("!IIIQ", 7, 1, 9, 1_700_000_000_000)),
        nb.data_set(256, b"\x0a\x00\x00\x01" + nb.varlen(b"eth0") + bytes(4) + nb.varlen(b"z" * 300) + struct.pack("!II", 9, 1)),
    )
    bi_rec = struct.pack("!4s4sHHBQQBQQQQBQQ", b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 40000, 443, 6, 5000, 10, 0x1A,
                         1, 2, 900, 7, 0x12, 3, 4)
    bi = nb.ipfix(nb.ipfix_template_set((256, _BIFLOW)), nb.data_set(256, bi_rec * 2))
    withdraw = nb.ipfix(nb.ipfix_withdraw(256), nb.data_set(256, bi_rec), nb.ipfix_withdraw(3, options=True))
    seeds.append(framing.build([(ctl(0), var), (ctl(1), bi), (ctl(0, flush=True), withdraw), (ctl(0), var)]))
    seeds.append(framing.build([(ctl(0), nb.ipfix(nb.data_set(256, bi_rec), domain=5)),
                                (ctl(0, step=3), nb.ipfix(nb.ipfix_template_set((256, _BIFLOW)), domain=5))]))
    return seeds


def pipeline_seeds() -> list[bytes]:
    sf = sflow_seeds()
    v9, ipfix, v5 = netflow9_seeds(), ipfix_seeds(), netflow5_seeds()
    mixes = []
    for i in range(4):
        frames = []
        for src in (sf, v9, ipfix, v5):
            frames += framing.parse(src[(i * 3) % len(src)])[:3]
        frames = [((c & ~3) | (j % 4), p) for j, (c, p) in enumerate(frames)][: framing.MAX_FRAMES]
        if i % 2:  # first frame: uptime event time (bit 6), small batches (bit 7)
            frames[0] = (frames[0][0] | 0xC0, frames[0][1])
        mixes.append(framing.build(frames))
    return mixes


def _value(schema, names: dict):
    """A valid value of an Avro schema (fastavro's parsed form): the first branch of unions, one array item."""
    if isinstance(schema, str):
        if schema in names:
            return _value(names[schema], names)
        return {"null": None, "boolean": True, "int": 7, "long": 1_700_000_000_123, "float": 1.5, "double": 2.5,
                "bytes": b"ab", "string": "gpu-01"}[schema]
    if isinstance(schema, list):
        return _value(next((s for s in schema if s != "null"), "null"), names)
    t = schema["type"]
    if t in ("record", "error"):
        names[schema["name"]] = schema
        return {f["name"]: _value(f["type"], names) for f in schema["fields"]}
    if t == "enum":
        names[schema["name"]] = schema
        return schema["symbols"][-1]
    if t == "fixed":
        names[schema["name"]] = schema
        return bytes(range(schema["size"]))
    if t == "array":
        return [_value(schema["items"], names) for _ in range(2)]
    if t == "map":
        return {"k": _value(schema["values"], names)}
    return _value(t, names)


def codec_seeds() -> list[bytes]:
    import io

    import fastavro

    from schemas.registry import _history

    cache = TemplateCache()
    sf = _pcap(CAPTURES / "pmacct_sfprobe_fabric" / "pmacct_sfprobe_fabric.pcap")
    ipfix = _pcap(CAPTURES / "softflowd_ipfix_biflow" / "softflowd_ipfix_biflow.pcap")
    flows = decode(sf[0], "10.0.0.1", 1, cache).flows[:3] if sf else None
    counters = decode(sf[-1], "10.0.0.1", 1, cache).counters[:2] if sf else None
    out = []
    if flows is not None:
        out += [codec.encode_batch("flow_batch", flows), codec.encode_batch("flow_batch", flows[:0]),
                codec.encode_batch("counter_batch", counters)]
    if ipfix:
        out.append(codec.encode_batch("flow_batch", decode(ipfix[0], "2001:db8::1", 1, cache).flows[:2]))
    for name in list(codec.BATCHES) + list(codec.RECORD_SCHEMAS):
        writer = codec.parsed(name)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer, _value(writer, {}))
        out.append(codec.header(name) + buf.getvalue())
    for fp, (_name, writer) in sorted(_history().items()):  # messages of earlier schema versions
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer, _value(writer, {}))
        out.append(codec.MAGIC + fp + buf.getvalue())
    return out


SEEDS = {"sflow": sflow_seeds, "netflow5": netflow5_seeds, "netflow9": netflow9_seeds, "ipfix": ipfix_seeds,
         "pipeline": pipeline_seeds, "codec": codec_seeds}


def write(out: Path, targets: list[str]) -> None:
    for name in targets:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        seeds = [s for s in SEEDS[name]() if s]
        for s in seeds:
            (d / hashlib.sha1(s).hexdigest()).write_bytes(s)
        print(f"{name}: {len(seeds)} seeds, {sum(map(len, seeds))} bytes -> {d}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=CORPUS, help="corpus root (one folder per target)")
    ap.add_argument("targets", nargs="*", default=list(SEEDS), help="targets (default: all)")
    args = ap.parse_args(argv)
    write(args.out, args.targets)


if __name__ == "__main__":
    main()
