"""Load for bench/pipeline.py: a fleet of NetFlow v9 / IPFIX exporters on loopback, paced together.

Each exporter is its own UDP socket bound to its own loopback address (127.0.1.x), so ingest sees distinct
exporters: its Kafka key (the exporter address) spreads flows over the raw partitions, its templates and sequence
numbers stay per exporter, and with ``ingest.workers > 1`` the kernel's SO_REUSEPORT hash keeps each exporter on one
worker (docs/operations.md). The addresses are chosen so that every raw partition gets the same number of
exporters under Kafka's murmur2 partitioner (the one ingest's producer uses).

Datagrams come from ``devtools.loadgen.netflow_stream`` (softflowd's templates, addresses from the 512-node pool that
``devtools.chaos_outputs.write_inventory`` names), one pool per exporter with its own seed. Flows are unique: before a pool
datagram goes out again, each of its flows gets the next value of a running counter in its source port (kept in
the ephemeral range 49152-65535), and its export time moves one second per second of load.

Not a benchmark: imported by bench/pipeline.py.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

import numpy as np

from devtools.loadgen import Sender, Stream, netflow_stream

HOSTS = 512  # the address pool of devtools.loadgen._Hosts; devtools.chaos_outputs.write_inventory names every host of it
END_SPREAD_MS = 10_000  # flows end up to 10 s before their export: inside processors.allowed_lateness_s (30 s)


def exporter_addresses(count: int, partitions: int) -> list[str]:
    """``count`` loopback addresses whose murmur2 partitions (Kafka's default for keyed messages, and ingest's
    ``murmur2_random``) cover ``partitions`` evenly: ``count // partitions`` (or one more) per partition."""
    from aiokafka.partitioner import murmur2

    want = [count // partitions + (p < count % partitions) for p in range(partitions)]
    out: list[str] = []
    for i in range(1, 65_536):
        if len(out) == count:
            break
        addr = f"127.0.{1 + i // 254}.{1 + i % 254}"
        p = (murmur2(addr.encode()) & 0x7FFFFFFF) % partitions
        if want[p]:
            want[p] -= 1
            out.append(addr)
    if len(out) < count:
        raise ValueError(f"could not spread {count} exporters over {partitions} partitions")
    return out


class Exporter(Sender):
    """One exporter: a :class:`devtools.loadgen.Sender` from its own address (``source``) whose flows get unique source
    ports (instead of the Sender's stamps, which also rewrite source addresses: these stay the inventory's)."""

    def __init__(self, stream: Stream, source: str, target: tuple[str, int]):
        super().__init__(stream, target[1], host=target[0], unique=False, source=source)
        self.source = source
        width = self.pool.shape[1]
        per = [np.asarray([s[1] for s in st], dtype=np.int64) for st in stream.stamps]  # source port offsets
        self._ports = np.concatenate([p + k * width for k, p in enumerate(per)])
        self._first = np.concatenate([[0], np.cumsum([len(p) for p in per])])
        self.flows = 0  # flow counter: the next value stamped into a source port
        self.sent = 0  # data datagrams sent (the template refresh counts these)

    def stamp(self, k0: int, k1: int) -> None:
        """Give the flows of pool datagrams ``k0 .. k1-1`` the next source ports (49152 + counter mod 16384)."""
        a, b = self._first[k0], self._first[k1]
        v = 0xC000 | (np.arange(self.flows, self.flows + (b - a), dtype=np.int64) & 0x3FFF)
        self.flows += int(b - a)
        flat = self.pool.reshape(-1)
        pp = self._ports[a:b]
        flat[pp] = v >> 8
        flat[pp + 1] = v & 255


@dataclass
class Sent:
    datagrams: int = 0
    records: int = 0
    seconds: float = 0.0
    dropped: int = 0  # datagrams the local socket refused (send buffer full): never reached ingest


class Fleet:
    """``exporters`` NetFlow v9 (``version`` 9) or IPFIX (10) exporters sending to ``target``, paced together."""

    def __init__(self, target: tuple[str, int], exporters: int, partitions: int, version: int = 9,
                 records: int = 25, pool: int = 64):
        self.members = [Exporter(netflow_stream(version, records=records, pool=pool, seed=7 + i, hosts=HOSTS,
                                                end_spread_ms=END_SPREAD_MS), addr, target)
                        for i, addr in enumerate(exporter_addresses(exporters, partitions))]
        self.records_per_datagram = records
        self.progress = 0  # records sent so far in the current blast (read by the bench's timeline)

    @property
    def addresses(self) -> list[str]:
        return [e.source for e in self.members]

    def blast(self, flows_per_s: float, seconds: float, clock: int, per_round: int = 4,
              deadline_s: float | None = None) -> Sent:
        """Send ``flows_per_s`` flow records per second for ``seconds``, exporters in turn, ``per_round``
        datagrams each per turn. Exporter ``e``'s ``j``-th data datagram carries export time
        ``clock + floor(j / its rate)``: flow times move one second per second of load and depend only on ``j``.
        Every exporter sends its templates first and again every ``refresh`` data datagrams. Stops at
        ``deadline_s`` (monotonic) at the latest."""
        n = len(self.members)
        rate = flows_per_s / self.records_per_datagram  # datagrams/s, all exporters
        per_exp = rate / n
        total = int(rate * seconds) // n  # data datagrams per exporter
        out = Sent()
        self.progress = 0
        start = {id(e): e.sent for e in self.members}
        for e in self.members:
            e.send_templates()
        t0 = time.perf_counter()
        i = 0  # data datagrams sent per exporter so far
        while i < total:
            if deadline_s is not None and time.monotonic() > deadline_s:
                break
            k = min(per_round, total - i)
            for e in self.members:
                st = e.stream
                npool = len(e.bufs)
                j0, js = e.sent, start[id(e)]
                j = j0
                while j < j0 + k:  # segments that do not wrap around the pool: stamped, then sent
                    seg = min(j0 + k - j, npool - j % npool)
                    e.stamp(j % npool, j % npool + seg)
                    for jj in range(j, j + seg):
                        b = e.bufs[jj % npool]
                        struct.pack_into("!I", b, st.seq_offset, e.seq & 0xFFFFFFFF)
                        struct.pack_into("!I", b, st.time_offset, (clock + int((jj - js) / per_exp)) & 0xFFFFFFFF)
                        e.seq += st.records[jj % npool] if st.seq_per_record else 1
                        try:
                            e.sock.send(b)
                            out.datagrams += 1
                            out.records += st.records[jj % npool]
                        except OSError:  # send buffer full, or nothing listens (ingest died): never reached ingest
                            out.dropped += 1
                        if st.refresh and jj % st.refresh == st.refresh - 1:
                            e.send_templates()
                    j += seg
                e.sent += k
            i += k
            self.progress = out.records
            due = t0 + i * n / rate
            ahead = due - time.perf_counter()
            if ahead > 0.002:
                time.sleep(ahead - 0.001)
            while time.perf_counter() < due:
                pass
        out.seconds = time.perf_counter() - t0
        return out

    def close(self) -> None:
        for e in self.members:
            e.close()
