"""Sizing from the whole-pipeline bench: cores and partitions per service for a GPU fabric, derived from the
measured CPU-s per 1 M flows of each service (bench/pipeline.py).

The arithmetic, so the table in docs/performance.md ("Sizing") can be re-derived from any run's figures:

    packets/s per port = port speed x load / (8 x bytes per packet)
    samples/s per port = packets/s per port / sampling rate
    flows/s            = GPUs x ports per GPU x samples/s per port x flow records per sample
    cores of a service = flows/s x its CPU-s per flow / target utilisation (the headroom)

The bench sends NetFlow v9; a GPU fabric's switches export sFlow, whose decoding costs ingest more per record
(bench/ingest.py: 1.52 against 0.95 CPU-s per 1 M records): ingest's figure is scaled by ``sflow_ingest_factor``.
The flow-metrics sink is not sized per flow: it reads matrix windows, whose cells follow the node pairs that talk,
not the flow rate (the pipeline bench sees it at the same ~0.1 core at every rate; bench/metrics_sink.py: 0.07
core at 512 nodes, 0.43 at 4,096 nodes for a 1 M flows/s stream): one core (``METRICS_SINK_CORES``) at every size.

One worker of a scaled service (ingest worker, processors worker, archive sink) keeps about one core busy, so its
workers are its cores rounded up. The consumers of a topic never outnumber its partitions: partitions are the
largest consumer group's workers, doubled (room to add workers: adding partitions later moves keys between
partitions), rounded up to a power of two.

Not a benchmark: imported by bench/pipeline.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPU_FABRICS = (1024, 4096, 16384)
SAMPLING_RATES = (4096, 8192)
#: services whose workers consume the flow topics, one worker a core, one partition each at least
CONSUMERS = ("processors", "archive")
#: the flow-metrics sink's cores at every fabric size (see above: its cost follows the matrix, not the flows)
METRICS_SINK_CORES = 1


@dataclass(frozen=True)
class Assumptions:
    ports_per_gpu: int = 1  # one 400G back-end NIC port per GPU, sampled where it enters the fabric (leaf port)
    port_gbps: float = 400.0
    load: float = 1.0  # share of line rate at the peak (collectives run at line rate)
    packet_bytes: float = 4158.0  # RoCEv2 with a 4096-byte MTU: payload + IB BTH/UDP/IP/Ethernet/FCS headers
    flows_per_sample: float = 1.0  # an sFlow flow sample is one flow record
    utilisation: float = 0.7  # each core at most 70 % busy: 30 % headroom for bursts, restarts, catch-up
    sflow_ingest_factor: float = 1.6  # ingest's CPU per sFlow record against per NetFlow v9 record (bench/ingest.py)

    def samples_per_port(self, sampling: int) -> float:
        return self.port_gbps * 1e9 * self.load / (8 * self.packet_bytes) / sampling

    def flows_per_s(self, gpus: int, sampling: int) -> float:
        return gpus * self.ports_per_gpu * self.samples_per_port(sampling) * self.flows_per_sample


def partitions_for(workers: int) -> int:
    """The partitions of the flow topics for a consumer group of ``workers``: doubled, then a power of two."""
    return 1 << max(0, math.ceil(math.log2(2 * max(1, workers))))


def size(cpu_s_per_m: dict[str, float], flows_per_s: float, a: Assumptions) -> dict[str, float]:
    """Cores per service (fractional) for ``flows_per_s`` of sFlow from each service's CPU-s per 1 M flows measured
    on NetFlow v9; the flow-metrics sink at its fixed ``METRICS_SINK_CORES``."""
    out = {}
    for name, c in cpu_s_per_m.items():
        if name == "metrics":
            out[name] = float(METRICS_SINK_CORES)
        else:
            out[name] = flows_per_s * c * (a.sflow_ingest_factor if name == "ingest" else 1.0) / 1e6 / a.utilisation
    return out


def table(cpu_s_per_m: dict[str, float], a: Assumptions = Assumptions(), fabrics=GPU_FABRICS,
          samplings=SAMPLING_RATES) -> list[str]:
    """The sizing table as Markdown lines: per fabric and sampling rate, flows/s, cores per service (workers =
    cores rounded up), total cores and the partitions of the flow topics."""
    names = list(cpu_s_per_m)
    out = ["| GPUs | sampling | samples/s per port | flows/s | " + " | ".join(f"{n} cores" for n in names)
           + " | total cores | partitions |", "|" + "---|" * (len(names) + 6)]
    for gpus in fabrics:
        for sampling in samplings:
            f = a.flows_per_s(gpus, sampling)
            cores = size(cpu_s_per_m, f, a)
            workers = {n: math.ceil(c) for n, c in cores.items()}
            parts = partitions_for(max((workers[n] for n in CONSUMERS if n in workers), default=1))
            out.append(f"| {gpus:,} | 1:{sampling} | {a.samples_per_port(sampling):,.0f} | {f / 1e6:.2f} M | "
                       + " | ".join(str(workers[n]) for n in names) + f" | {sum(workers.values())} | {parts} |")
    return out


def assumptions_line(cpu_s_per_m: dict[str, float], a: Assumptions = Assumptions()) -> str:
    per = ", ".join(f"{n} {c:.2f}" for n, c in cpu_s_per_m.items() if n != "metrics")
    return (f"CPU-s per 1 M flows: {per}; ingest x {a.sflow_ingest_factor:g} for sFlow; metrics sink "
            f"{METRICS_SINK_CORES} core; {a.ports_per_gpu} x {a.port_gbps:.0f}G port per GPU at {a.load:.0%} load, "
            f"{a.packet_bytes:.0f}-byte packets, {a.flows_per_sample:g} flow record per sample, cores at most "
            f"{a.utilisation:.0%} busy")
