"""End-to-end ingest benchmark on loopback: fabricflow against pmacct (print and Kafka plugins), goflow2 and nfcapd.

For each protocol (NetFlow v9 and IPFIX with softflowd's templates, sFlow v5) and collector, a paced
sender on one CPU sends datagrams at increasing rates to the collector pinned to the other CPU and
keeps the highest rate with less than 0.1 % loss, with the collector's CPU time from /proc. Binds
127.0.0.1 only; bounded by ``--step-seconds`` and ``--max-steps``. Stream, placement, steps, counting
per collector, sinks: bench/README.md; results: docs/performance.md#ingest-end-to-end.

    .venv/bin/python -m bench.ingest [--protocols netflow9,ipfix,sflow]
                                     [--collectors fabricflow,nfacctd,nfacctd-kafka,goflow2,nfcapd]
                                     [--step-seconds 2] [--rounds 1] [--sink kafka|null|discard] [--json out.json]
                                     [--kafka-port 21192] [--goflow2 PATH] [--ports LO-HI]
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from devtools.loadgen import (
    Sender, Stream, cpu_seconds, free_tcp_port, free_udp_port, netflow_stream, pin, sflow_stream, udp_socket_stats,
    use_port_range, wait_quiet,
)
from bench.ingest_peers import (  # noqa: F401  (PeerCollector, udp_bound: used by tests through this module)
    CHILDREN, KAFKA_PEERS, RCVBUF, PeerCollector, cleanup_children, udp_bound, goflow2_binary,
)

LOSS_MAX = 0.001
PROTOCOLS = ("netflow9", "ipfix", "sflow")
COLLECTORS = ("fabricflow", "nfacctd", "nfacctd-kafka", "goflow2", "nfcapd")
PMACCT = ("nfacctd", "nfacctd-kafka")  # sfacctd for sFlow


# --------------------------------------------------------------------------- fabricflow worker process


class NullSink:
    """Counts what would be produced (``--sink null``: measures receive + decode + batching only)."""

    def __init__(self, metrics, encode: bool = True):
        self.metrics, self.encode = metrics, encode
        self.produced_records = 0

    def publish_flows(self, exporter, flows) -> bool:
        if self.encode:
            from schemas import codec

            codec.encode_batch("flow_batch", flows)
        self.produced_records += len(flows)
        return True

    def publish_counters(self, exporter, counters) -> bool:
        self.produced_records += len(counters)
        return True

    def publish_dlq(self, *a, **k) -> bool:
        return True

    def poll(self) -> None:
        pass

    def close(self) -> dict:
        return {"produced_records": self.produced_records, "undelivered_records": 0}


def _ff_worker(conf: dict, ready, out) -> None:
    """Child process: one pinned IngestWorker until SIGTERM; its stop report goes to ``out``."""
    pin(0, conf["cpu"])
    import logging

    from fabricflow.settings import load_settings
    from ingest.listener import parse_listen
    from ingest.service import IngestWorker

    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(None, **conf["settings"])
    specs = [parse_listen(u) for u in conf["listen"]]
    sink = None
    if conf["sink"] in ("null", "discard"):
        from ingest.metrics import IngestMetrics

        sink = NullSink(IngestMetrics(), encode=conf["sink"] == "null")
    w = IngestWorker(settings, specs, sink=sink)
    if sink is not None:  # the worker's metrics object must be the sink's
        sink.metrics = w.metrics
    profile = conf.get("profile")

    def stop(_s, _f):
        w.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    w.open()
    ready.set()
    if profile:
        import cProfile

        prof = cProfile.Profile()
        report = prof.runcall(w.run, max_seconds=conf["max_seconds"])
        prof.dump_stats(profile)
    else:
        report = w.run(max_seconds=conf["max_seconds"])
    out.put(report)


def scrape(port: int) -> dict[str, float]:
    """Sum of every sample per metric name (labels summed) from a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def scrape_labeled(port: int, name: str, label_part: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and label_part in line:
            total += float(line.rpartition(" ")[2])
    return total


class FabricflowCollector:
    """One IngestWorker process, kept running across rate steps; counts come from /metrics deltas."""

    name = "fabricflow"
    per_step = False

    def __init__(self, port: int, cpu: int, bootstrap: str | None, max_seconds: float = 600, profile: str | None = None,
                 sink: str | None = None):
        self.port, self.cpu, self.bootstrap = port, cpu, bootstrap
        self.sink = sink or ("kafka" if bootstrap else "null")
        self.metrics_port = free_tcp_port()
        self.max_seconds = max_seconds
        self.profile = profile
        self.proc = None
        self.report = None

    def start(self) -> None:
        ingest = {
            "listen": [f"netflow://127.0.0.1:{self.port}"],
            "rcvbuf_bytes": RCVBUF,
            "metrics_port": self.metrics_port,
            "metrics_bind": "127.0.0.1",
            "allowlist": ["127.0.0.0/8"],
        }
        settings = {"ingest": ingest, "log_level": "WARNING"}
        if self.bootstrap:
            settings["kafka"] = {"bootstrap_servers": self.bootstrap, "partitions": 2}
        ctx = mp.get_context("spawn")
        self._ready, self._out = ctx.Event(), ctx.Queue()
        conf = {"cpu": self.cpu, "settings": settings, "listen": ingest["listen"], "profile": self.profile,
                "sink": self.sink, "max_seconds": self.max_seconds}
        self.proc = ctx.Process(target=_ff_worker, args=(conf, self._ready, self._out),
                                name="bench-ingest-worker", daemon=True)
        self.proc.start()
        CHILDREN.append(self.proc.pid)
        if not self._ready.wait(60):
            raise RuntimeError("fabricflow worker did not start within 60 s")
        deadline = time.monotonic() + 20
        while True:
            try:
                scrape(self.metrics_port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def counts(self) -> dict:
        m = scrape(self.metrics_port)
        flows = scrape_labeled(self.metrics_port, "fabricflow_ingest_records_total", 'kind="flow"')
        return {
            "datagrams": m.get("fabricflow_ingest_datagrams_total", 0.0),
            "records": flows,
            "decode_errors": m.get("fabricflow_ingest_decode_errors_total", 0.0),
            "delivered": m.get("fabricflow_ingest_kafka_delivered_records_total", 0.0),
            "dropped": m.get("fabricflow_ingest_kafka_dropped_records_total", 0.0),
            "failed": m.get("fabricflow_ingest_kafka_failed_records_total", 0.0),
            "queue": m.get("fabricflow_ingest_kafka_queue_messages", 0.0),
        }

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.report = self._out.get(timeout=30)
        except Exception:
            self.report = None
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.proc = None
        return self.report


# --------------------------------------------------------------------------- steps and ladder


@dataclass
class Step:
    protocol: str
    collector: str
    target_rate: float
    rate: float  # datagrams/s the sender achieved
    sent_datagrams: int
    sent_records: int
    received_datagrams: float
    received_records: float
    kernel_drops: int
    loss: float
    cpu_s: float
    clean: bool
    note: str = ""


def run_step(coll, stream: Stream, packets_per_dg: float, rate: float, seconds: float, sender_cpu: int) -> Step:
    sender = Sender(stream, coll.port)
    try:
        if coll.per_step:
            coll.start()
            coll.prime(stream.templates, sender.sock)
            c0 = None
        else:
            c0 = coll.counts()
        _, d0 = udp_socket_stats(coll.port)
        cpu0 = cpu_seconds(coll.pid)
        pin(0, sender_cpu)
        res = sender.blast(rate, seconds)
        # drain: socket queue empty and the collector's counters/CPU stop moving
        def progress():
            q, _ = udp_socket_stats(coll.port)
            if coll.per_step:
                return (q, round(cpu_seconds(coll.pid), 2)) + coll.progress()
            c = coll.counts()
            return (q, c["datagrams"], c["delivered"] + c["dropped"] + c["failed"], c["queue"])

        # pmacct's Kafka plugin publishes its cache every kafka_refresh_time (1 s): wait past one
        wait_quiet(progress, timeout_s=20, stable_s=2.5 if coll.name == "nfacctd-kafka" else 0.4, poll_s=0.1)
        cpu1 = cpu_seconds(coll.pid)
        _, d1 = udp_socket_stats(coll.port)
        drops = d1 - d0
        sent_pk = res.records * packets_per_dg / stream.records_per_datagram
        note = ""
        if coll.per_step:
            r = coll.stop()
            if r.get("cpu_total") is not None:  # CPU up to its exit, from its rusage (goflow2 flushes then)
                cpu1 = max(cpu1, r["cpu_total"])
            note = r.get("note", "")
            if r["records"] is not None:
                recv_records = float(r["records"])
                if recv_records > res.records:
                    note = (note + f" counted {recv_records:.0f} records > sent {res.records}").strip()
            else:
                recv_records = res.records * min(r["packets"] / sent_pk, 1.0) if sent_pk else 0.0
                if r["packets"] > sent_pk * 1.001:
                    note = (note + f" counted {r['packets']} packets > sent {sent_pk:.0f}").strip()
            refreshes = 1 + res.datagrams // max(stream.refresh, 1)
            recv_dg = recv_records / stream.records_per_datagram + len(stream.templates) * refreshes
            loss = max(0.0, 1 - recv_records / res.records) if res.records else 1.0
            if "objects" in r:
                note = (note + f" published {r['objects']:,} records").strip()
            if loss >= LOSS_MAX and r.get("log"):
                note = (note + f" log: {r['log']}").strip()
        else:
            c1 = coll.counts()
            recv_dg = c1["datagrams"] - c0["datagrams"]
            recv_records = c1["records"] - c0["records"]
            kafka_lost = (c1["dropped"] - c0["dropped"]) + (c1["failed"] - c0["failed"])
            undelivered = recv_records - (c1["delivered"] - c0["delivered"]) if coll.bootstrap else 0
            if res.datagrams:  # every record must be acknowledged by Kafka
                loss = max((res.datagrams - recv_dg) / res.datagrams,
                           (kafka_lost + max(undelivered, 0)) / max(recv_records, 1))
            else:
                loss = 1.0
            if kafka_lost or undelivered > 0:
                note = f"kafka dropped/failed {kafka_lost:.0f}, undelivered {undelivered:.0f}"
        clean = loss < LOSS_MAX and drops <= res.datagrams * LOSS_MAX
        return Step(stream.protocol, coll.name, rate, res.rate, res.datagrams, res.records, recv_dg, recv_records,
                    drops, loss, cpu1 - cpu0, clean, note)
    finally:
        sender.close()
        if coll.per_step and coll.proc is not None:
            coll.stop()


def ladder(step_fn, start: float, max_rate: float, max_steps: int, log,
           retries: int = 0) -> tuple[Step | None, list[Step]]:
    """Double the rate until a step loses >= 0.1 %, then bisect (geometric) between clean and lossy.

    A lossy step is repeated up to ``retries`` times (the CPUs are shared with
    other work here; a clean repeat shows the collector can take the rate).
    """
    steps: list[Step] = []
    inner = step_fn
    tried = [0]

    def step_fn(rate):  # noqa: F811
        tried[0] += 1
        s = inner(rate)
        for _ in range(retries):
            if s.clean:
                break
            log(s)
            steps.append(s)
            s = inner(rate)
            s.note = (s.note + " retry").strip()
        return s

    best = bad = None
    rate = start
    while tried[0] < max_steps and rate <= max_rate:
        s = step_fn(rate)
        steps.append(s)
        log(s)
        if s.clean:
            best = s
            if s.rate < 0.9 * s.target_rate:  # the sender cannot go faster
                s.note = (s.note + " sender-bound").strip()
                break
            rate *= 2
        else:
            bad = s
            if best is None and rate > start / 8:
                rate /= 4
                continue
            break
    while best is not None and bad is not None and tried[0] < max_steps and bad.target_rate / best.target_rate > 1.15:
        mid = math.sqrt(best.target_rate * bad.target_rate)
        s = step_fn(mid)
        steps.append(s)
        log(s)
        if s.clean and s.rate > best.rate:
            best = s
        elif not s.clean:
            bad = s
    return best, steps


# --------------------------------------------------------------------------- report


def stream_for(protocol: str, records: int, samples: int) -> Stream:
    if protocol == "netflow9":
        return netflow_stream(9, records)
    if protocol == "ipfix":
        return netflow_stream(10, records)
    return sflow_stream(samples)


def packets_per_datagram(stream: Stream) -> float:
    from ingest.decode import TemplateCache, decode

    cache = TemplateCache()
    for t in stream.templates:
        decode(t, "127.0.0.1", 0, cache)
    tot = sum(int(decode(d, "127.0.0.1", 0, cache).flows["packets"].sum()) for d in stream.data)
    return tot / len(stream.data)


def display(protocol: str, collector: str) -> str:
    """pmacct's sFlow daemon is sfacctd."""
    return collector.replace("nfacctd", "sfacctd") if protocol == "sflow" else collector


def table(best: dict, lines=print) -> None:
    """Per protocol and collector: highest clean rate, its records/s, CPU cost; fabricflow's ratio to every peer."""
    hdr = (f"{'protocol':9s} {'collector':14s} {'clean dg/s':>11s} {'records/s':>11s} {'CPU s/1M rec':>12s} "
           f"{'rec/CPU-s':>11s}")
    lines(hdr)
    lines("-" * len(hdr))
    for proto in PROTOCOLS:
        rows = {c: s for (p, c), s in best.items() if p == proto}
        if not rows:
            continue
        for coll in COLLECTORS:
            if coll not in rows:
                continue
            s = rows[coll]
            name = display(proto, coll)
            if s is None:
                lines(f"{proto:9s} {name:14s} {'none clean':>11s}")
                continue
            rpc = _rec_per_cpu(s)
            mark = ">=" if "sender-bound" in s.note else ""
            cost = 1e6 / rpc if rpc else 0.0
            lines(f"{proto:9s} {name:14s} {mark + format(s.rate, ',.0f'):>11s} {s.rate * _rpd(s):>11,.0f} "
                  f"{cost:>12.2f} {rpc:>11,.0f}")
        ff = rows.get("fabricflow")
        for coll in COLLECTORS:
            peer = rows.get(coll)
            if coll == "fabricflow" or coll not in rows or not ff or not peer:
                continue
            rate = ff.rate * _rpd(ff) / (peer.rate * _rpd(peer))
            cpu = _rec_per_cpu(ff) / _rec_per_cpu(peer) if _rec_per_cpu(peer) else float("nan")
            bound = " (peer sender-bound: its ceiling is higher)" if "sender-bound" in peer.note else ""
            lines(f"{proto:9s} fabricflow / {display(proto, coll):14s} rate {rate:5.2f}x  CPU per record {cpu:5.2f}x{bound}")


def _rec_per_cpu(s: Step) -> float:
    return s.received_records / s.cpu_s if s.cpu_s > 0 else 0.0


def _rpd(s: Step) -> float:
    return s.sent_records / s.sent_datagrams if s.sent_datagrams else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--collectors", default=",".join(COLLECTORS))
    ap.add_argument("--step-seconds", type=float, default=2.0)
    ap.add_argument("--start-rate", type=float, default=4000, help="first step, datagrams/s")
    ap.add_argument("--max-rate", type=float, default=256_000, help="datagrams/s")
    ap.add_argument("--max-steps", type=int, default=8, help="rates per collector and protocol (retries not counted)")
    ap.add_argument("--retries", type=int, default=1, help="repeat a lossy step this often before calling it lossy")
    ap.add_argument("--records", type=int, default=25, help="NetFlow v9/IPFIX records per datagram")
    ap.add_argument("--samples", type=int, default=7, help="sFlow flow samples per datagram")
    ap.add_argument("--sink", choices=("kafka", "null", "discard"), default="kafka",
                    help="fabricflow output: embedded broker; null = Avro-encode, discard; discard = no encode")
    ap.add_argument("--kafka-port", type=int, default=21192)
    ap.add_argument("--goflow2", default=None, metavar="PATH",
                    help="goflow2 executable (v2.2.6 measured; default $FF_GOFLOW2, then goflow2 on PATH); "
                         "skipped when absent")
    ap.add_argument("--ports", default=None, metavar="LO-HI",
                    help="take the collectors' UDP and metrics ports from this range (a port block on a shared "
                         "machine); default: free ports the kernel picks")
    ap.add_argument("--sender-cpu", type=int, default=0)
    ap.add_argument("--collector-cpu", type=int, default=1)
    ap.add_argument("--profile", help="write a cProfile of the fabricflow worker to this file (one run)")
    ap.add_argument("--json", help="write every step as JSON here")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the collectors this often; best round kept")
    a = ap.parse_args(argv)
    protocols = [p for p in a.protocols.split(",") if p]
    collectors = [c for c in a.collectors.split(",") if c]
    unknown = sorted(set(collectors) - set(COLLECTORS))
    if unknown:
        ap.error(f"unknown collector(s) {', '.join(unknown)}: choose from {', '.join(COLLECTORS)}")
    if a.ports:
        try:
            use_port_range(a.ports)
        except ValueError as e:
            ap.error(str(e))
    goflow2 = goflow2_binary(a.goflow2) if "goflow2" in collectors else None
    if "goflow2" in collectors and goflow2 is None:
        where = a.goflow2 or os.environ.get("FF_GOFLOW2") or "goflow2 on PATH"
        print(f"goflow2: no executable at {where} (pass --goflow2 PATH or set FF_GOFLOW2; build goflow2 v2.2.6 "
              "from its sources): skipped")
        collectors.remove("goflow2")
    atexit.register(cleanup_children)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    pin(0, a.sender_cpu)
    workdir = Path(tempfile.mkdtemp(prefix="fabricflow-bench-"))
    stack = None
    all_steps: list[Step] = []
    best: dict = {}
    t_start = time.monotonic()

    def log(s: Step) -> None:
        print(f"  {s.protocol:8s} {s.collector:10s} target {s.target_rate:9,.0f} dg/s sent {s.rate:9,.0f} dg/s "
              f"{s.sent_records:>9,} rec  loss {s.loss * 100:6.3f}%  drops {s.kernel_drops:>6}  cpu {s.cpu_s:5.2f}s  "
              f"{'clean' if s.clean else 'LOSSY'} {s.note}", flush=True)

    try:
        bootstrap = None
        if ("fabricflow" in collectors and a.sink == "kafka") or set(KAFKA_PEERS) & set(collectors):
            from fabricflow.settings import load_settings
            from devtools.stack import EmbeddedStack
            from fabricflow.kafka import ensure_topics

            from devtools.stack import port_free

            kport = a.kafka_port if port_free(a.kafka_port) else free_tcp_port()
            if kport != a.kafka_port:
                print(f"port {a.kafka_port} is taken: embedded broker on {kport}")
            st = load_settings(None, stack={"state_dir": str(workdir / "stack"), "kafka_port": kport,
                                            "s3_port": 21533, "s3_base_port": 21600, "storage_engine": "memory"})
            stack = EmbeddedStack(st, with_s3=False)
            stack.up()
            pin(stack.broker.pid() or 0, a.sender_cpu)  # broker shares the sender's CPU
            bootstrap = stack.bootstrap
            ensure_topics(load_settings(None, kafka={"bootstrap_servers": bootstrap, "partitions": 2}).kafka)
        print(f"fabricflow ingest bench: sender CPU {a.sender_cpu}, collector CPU {a.collector_cpu}, "
              f"step {a.step_seconds}s, loss threshold {LOSS_MAX:.1%}, "
              f"sink {a.sink if 'fabricflow' in collectors else '-'}, "
              f"load average {os.getloadavg()[0]:.2f}")
        if goflow2:
            print(f"goflow2: {goflow2}")
        for proto in protocols:
            stream = stream_for(proto, a.records, a.samples)
            ppd = packets_per_datagram(stream)
            print(f"{proto}: {stream.source}, {stream.records_per_datagram:.1f} records/datagram, "
                  f"{sum(map(len, stream.data)) / len(stream.data):.0f} bytes/datagram", flush=True)
            # Rounds alternate the collectors (fabricflow, then each peer, then again), so
            # drifting load on the shared machine hits all of them; each keeps its best round.
            for rnd in range(a.rounds):
                for coll_name in collectors:
                    if coll_name == "nfcapd" and proto == "sflow":
                        continue
                    port = free_udp_port()
                    if coll_name == "fabricflow":
                        coll = FabricflowCollector(port, a.collector_cpu, bootstrap, profile=a.profile, sink=a.sink)
                        coll.start()
                    elif coll_name == "goflow2":
                        coll = PeerCollector(coll_name, proto, port, a.collector_cpu, workdir, bootstrap, goflow2)
                    else:
                        binary = ("sfacctd" if proto == "sflow" else "nfacctd") if coll_name in PMACCT else coll_name
                        if shutil.which(binary) is None:
                            print(f"  {coll_name}: {binary} not installed, skipped")
                            continue
                        coll = PeerCollector(coll_name, proto, port, a.collector_cpu, workdir, bootstrap)
                    try:
                        b, steps = ladder(lambda r: run_step(coll, stream, ppd, r, a.step_seconds, a.sender_cpu),
                                          a.start_rate, a.max_rate, a.max_steps, log, a.retries)
                    finally:
                        if coll_name == "fabricflow":
                            rep = coll.stop()
                            if rep:
                                print(f"  fabricflow worker report: {rep}")
                    prev = best.get((proto, coll_name))
                    if prev is None or (b is not None and b.rate * _rpd(b) > prev.rate * _rpd(prev)):
                        best[(proto, coll_name)] = b
                    all_steps += steps
                    if b is not None:
                        print(f"  round {rnd + 1}: {display(proto, coll_name)} {b.rate * _rpd(b):,.0f} records/s "
                              f"loss-free, {1e6 / max(_rec_per_cpu(b), 1e-9):.2f} CPU-s per 1 M records", flush=True)
        print()
        print(f"Highest rate with < {LOSS_MAX:.1%} loss (one worker / one collector process tree on one pinned CPU; "
              f"total {time.monotonic() - t_start:.0f} s, load average {os.getloadavg()[0]:.2f})")
        table(best)
        if a.json:
            Path(a.json).write_text(json.dumps([asdict(s) for s in all_steps], indent=1))
    finally:
        if stack is not None:
            stack.down()
        cleanup_children()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
