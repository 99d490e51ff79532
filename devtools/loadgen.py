"""Load generation for the benchmarks and the chaos harness: export datagram builders, a paced UDP sender,
CPU pinning, per-process CPU time and kernel socket counters from /proc.

Builders:
* NetFlow v9 / IPFIX: the templates are taken from the real softflowd captures
  (``tests/captures/shared/exports/softflowd_{v9,ipfix}.pcap``: IPv4 template
  1024, IPv6 template 2048, 16 fields each); data records are generated for
  those templates with addresses drawn from a cluster-sized host pool, so the
  stream looks like softflowd's but carries ``records`` flows per datagram.
* sFlow v5: ``devtools.sflow_build.synthetic`` (7 flow samples per datagram,
  raw-header records).

Linux only (``/proc``, ``sched_setaffinity``). No Kafka, no collectors here.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from fabricflow.net import udp_socket_table

REPO = Path(__file__).resolve().parents[1]

CAPTURES = REPO / "tests" / "captures" / "shared" / "exports"
CLK_TCK = os.sysconf("SC_CLK_TCK")

EXPORT_S = 1_719_835_200  # export timestamp written into headers
UPTIME_MS = 3_600_000


# --------------------------------------------------------------------------- datagram builders


@dataclass
class Stream:
    """A pool of export datagrams cycled by the sender.

    ``templates``: datagrams to send first (and again every ``refresh`` datagrams).
    ``data``: data datagrams; ``records[i]`` flow records in ``data[i]``.
    ``seq_offset``/``seq_step``: where the header sequence number lives and how
    much it advances per data datagram (NetFlow v9: 1 per packet; IPFIX: records;
    sFlow: 1 per datagram); the sender rewrites it so sequences stay consecutive.
    """

    protocol: str  # netflow9 | ipfix | sflow
    templates: list[bytes]
    data: list[bytes]
    records: list[int]
    seq_offset: int
    seq_per_record: bool
    refresh: int = 1000
    source: str = ""
    meta: dict = field(default_factory=dict)
    stamps: list[list[tuple[int, int, int]]] | None = None
    """Per data datagram, per flow: (offset of the source address's last two bytes, offset of the
    source port, 1) -- where :class:`Sender` writes a running flow counter so that no flow repeats."""
    time_offset: int | None = None
    """Where the header's export time (unix seconds) lives (NetFlow v9: 8, IPFIX: 4; sFlow has none):
    :meth:`Sender.blast` with ``clock`` rewrites it so that flow times move with the stream."""

    @property
    def records_per_datagram(self) -> float:
        return sum(self.records) / len(self.records)


def _template_sets(path: Path, version: int) -> tuple[bytes, dict[int, list[tuple[int, int]]]]:
    """Template, options template and options data sets of the first datagram of a softflowd capture."""
    from ingest.pcapread import read_udp

    tmpl_ids = (0, 1) if version == 9 else (2, 3)
    first = next(iter(read_udp(path))).payload
    off = 20 if version == 9 else 16
    sets = []
    templates: dict[int, list[tuple[int, int]]] = {}
    options: set[int] = set()
    while off + 4 <= len(first):
        sid, ln = struct.unpack_from("!HH", first, off)
        if ln < 4:
            break
        if sid == tmpl_ids[1]:
            options.add(struct.unpack_from("!H", first, off + 4)[0])
        if sid in tmpl_ids or sid in options:  # templates, options templates, options data (sampling)
            sets.append(first[off : off + ln])
            if sid == tmpl_ids[0]:
                o = off + 4
                while o + 4 <= off + ln:
                    tid, fc = struct.unpack_from("!HH", first, o)
                    o += 4
                    templates[tid] = [struct.unpack_from("!HH", first, o + 4 * i) for i in range(fc)]
                    o += 4 * fc
        off += ln
    return b"".join(sets), templates


class Hosts:
    """Addresses of a training cluster: ``n`` IPv4 nodes in 10.16.0.0/12 and their IPv6 twins."""

    def __init__(self, rng: random.Random, n: int = 512):
        self.v4 = [bytes([10, 16 + (i >> 12) % 16, (i >> 5) & 0x7F, (i & 31) + 1]) for i in range(0, n * 7, 7)]
        self.v6 = [bytes.fromhex("fd000001") + bytes(8) + a for a in self.v4]
        self.rng = rng


_SERVICES = ((4791, 17), (4791, 17), (4791, 17), (29400, 6), (2049, 6), (443, 6), (53, 17))  # (dst port, protocol)


def _field_value(ie: int, ln: int, rng: random.Random, hosts: Hosts, pair: tuple[int, int],
                 svc: tuple[int, int], end_spread_ms: int = 30_000) -> bytes:
    a, b = pair
    if ie == 8:
        return hosts.v4[a]
    if ie == 12:
        return hosts.v4[b]
    if ie == 27:
        return hosts.v6[a]
    if ie == 28:
        return hosts.v6[b]
    if ie == 22:  # first switched (uptime ms)
        return struct.pack("!I", UPTIME_MS - rng.randrange(30_000, 60_000))
    if ie == 21:  # last switched
        return struct.pack("!I", UPTIME_MS - rng.randrange(0, end_spread_ms))
    if ie == 1:  # bytes
        return struct.pack("!I", rng.randrange(64, 50_000_000))
    if ie == 2:  # packets
        return struct.pack("!I", rng.randrange(1, 12_000))
    if ie in (10, 14):  # ifindex
        return struct.pack("!I", rng.randrange(1, 65))
    if ie == 7:
        return struct.pack("!H", rng.randrange(49152, 65535))
    if ie == 11:
        return struct.pack("!H", svc[0])
    if ie == 4:
        return bytes([svc[1]])
    if ie == 6:
        return bytes([0x18 if svc[1] == 6 else 0])
    if ie == 5:
        return bytes([rng.choice((0x68, 0x6A, 0x00))])
    if ie == 61:
        return b"\x00"
    if ie == 136:
        return b"\x02"
    return bytes(ln)


def _records(fields, k: int, rng: random.Random, hosts: Hosts, v6: bool, end_spread_ms: int = 30_000) -> bytes:
    out = []
    n = len(hosts.v4)
    for _ in range(k):
        pair = (rng.randrange(n), rng.randrange(n))
        svc = rng.choice(_SERVICES)
        rec = b"".join(bytes([6 if v6 else 4]) if ie == 60
                       else _field_value(ie, ln, rng, hosts, pair, svc, end_spread_ms) for ie, ln in fields)
        out.append(rec)
    return b"".join(out)


def netflow_stream(version: int, records: int = 25, pool: int = 256, v6_records: int = 3, seed: int = 7,
                   hosts: int = 512, end_spread_ms: int = 30_000) -> Stream:
    """NetFlow v9 (``version=9``) or IPFIX (10) datagrams with softflowd's templates.

    Each data datagram has ``records`` flows: ``records - v6_records`` in the
    IPv4 data set (template 1024) and ``v6_records`` in the IPv6 one (2048).
    Flows ended up to ``end_spread_ms`` before the export time (uniformly).
    """
    name = "softflowd_v9.pcap" if version == 9 else "softflowd_ipfix.pcap"
    sets, templates = _template_sets(CAPTURES / name, version)
    rng = random.Random(seed)
    h = Hosts(rng, hosts)
    v4_fields, v6_fields = templates[1024], templates[2048]

    def dataset(tid: int, body: bytes) -> bytes:
        pad = (-len(body)) % 4 if version == 9 else 0
        return struct.pack("!HH", tid, 4 + len(body) + pad) + body + bytes(pad)

    def header(count_or_len: int, body_len: int) -> bytes:
        if version == 9:
            return struct.pack("!HHIIII", 9, count_or_len, UPTIME_MS, EXPORT_S, 0, 0)
        return struct.pack("!HHIII", 10, 16 + body_len, EXPORT_S, 0, 0)

    tmpl_count = sum(len(v) > 0 for v in templates.values())  # v9 header count: records incl. templates
    tmpl = header(tmpl_count, len(sets)) + sets
    hlen = 20 if version == 9 else 16
    data, counts, stamps = [], [], []
    for _ in range(pool):
        n4 = records - v6_records
        body = dataset(1024, _records(v4_fields, n4, rng, h, False, end_spread_ms))
        st = _nf_stamps(v4_fields, n4, hlen + 4, 8)
        if v6_records:
            st += _nf_stamps(v6_fields, v6_records, hlen + len(body) + 4, 27)
            body += dataset(2048, _records(v6_fields, v6_records, rng, h, True, end_spread_ms))
        data.append(header(records, len(body)) + body)
        counts.append(records)
        stamps.append(st)
    return Stream(
        protocol="netflow9" if version == 9 else "ipfix",
        templates=[tmpl], data=data, records=counts,
        seq_offset=12 if version == 9 else 8, seq_per_record=version == 10,
        source=f"templates from {name}, generated records",
        meta={"hosts": hosts}, stamps=stamps, time_offset=8 if version == 9 else 4,
    )


def _nf_stamps(fields, n: int, start: int, addr_ie: int) -> list[tuple[int, int, int]]:
    """Stamp offsets of ``n`` records of template ``fields`` starting at byte ``start``."""
    offs, o = {}, 0
    for ie, ln in fields:
        offs[ie] = (o, ln)
        o += ln
    a_off, a_len = offs[addr_ie]
    p_off, _ = offs[7]
    return [(start + r * o + a_off + a_len - 2, start + r * o + p_off, 1) for r in range(n)]


def sflow_stamps(d: bytes) -> list[tuple[int, int, int]]:
    """Stamp offsets in every flow sample's sampled IPv4/IPv6 TCP/UDP header (outer headers)."""
    u32 = lambda o: struct.unpack_from("!I", d, o)[0]  # noqa: E731
    off = 8 + (4 if u32(4) == 1 else 16)
    nsamples = u32(off + 12)
    off += 16
    out = []
    for _ in range(nsamples):
        fmt, ln = u32(off), u32(off + 4)
        body, end = off + 8, off + 8 + ln
        if fmt in (1, 3):
            p = body + (28 if fmt == 1 else 40)  # the record count, then the records
            nrec = u32(p)
            p += 4
            for _ in range(nrec):
                rfmt, rlen = u32(p), u32(p + 4)
                if rfmt == 1 and u32(p + 8) == 1:  # raw header, Ethernet
                    h = p + 24
                    et, l3 = struct.unpack_from("!H", d, h + 12)[0], h + 14
                    while et in (0x8100, 0x88A8):
                        et, l3 = struct.unpack_from("!H", d, l3 + 2)[0], l3 + 4
                    if et == 0x0800 and d[l3 + 9] in (6, 17):
                        out.append((l3 + 14, l3 + (d[l3] & 15) * 4, 1))
                    elif et == 0x86DD and d[l3 + 6] in (6, 17):
                        out.append((l3 + 22, l3 + 40, 1))
                p += 8 + rlen
        off = end
    return out


def sflow_stream(samples: int = 7, pool: int = 256) -> Stream:
    """sFlow v5 datagrams with ``samples`` flow samples each (IPv4 agent address)."""
    from ingest.decode import TemplateCache, decode

    from devtools.sflow_build import synthetic

    data = synthetic(pool, samples)
    source = f"devtools.sflow_build.synthetic ({samples} samples/datagram)"
    cache = TemplateCache()
    counts = [len(decode(d, "127.0.0.1", 0, cache).flows) for d in data]
    keep = [(d, c) for d, c in zip(data, counts) if c > 0]
    ver = struct.unpack_from("!I", keep[0][0], 4)[0]
    seq_off = 16 if ver == 1 else 28  # after version, address type, agent address, sub-agent id
    return Stream("sflow", [], [d for d, _ in keep], [c for _, c in keep], seq_off, False, source=source,
                  stamps=[sflow_stamps(d) for d, _ in keep])


# --------------------------------------------------------------------------- sender


@dataclass
class SendResult:
    datagrams: int
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.datagrams / self.seconds if self.seconds else 0.0


class Sender:
    """Paced UDP sender of a :class:`Stream` to 127.0.0.1:port, rewriting header sequence numbers.

    With ``unique`` (and stamp offsets in the stream), no flow repeats: before a
    datagram of the pool goes out again, every flow in it gets the next values
    of a running 32-bit counter in its source port and the last two bytes of
    its source address (numpy, one pass per chunk of datagrams). Collectors
    that aggregate in memory (pmacct) then see as many distinct flows as were
    sent, as from a real fabric, instead of a pool of a few thousand.
    """

    def __init__(self, stream: Stream, port: int, host: str = "127.0.0.1", unique: bool = True, source: str | None = None):
        import numpy as np

        self.stream = stream
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        if source is not None:  # the exporter's own address (e.g. one of 127.0.0.0/8): collectors key state by it
            self.sock.bind((source, 0))
        self.sock.connect((host, port))
        self.seq = 0
        self.flow_counter = 0
        n = len(stream.data)
        width = max(map(len, stream.data))
        self.pool = np.zeros((n, width), dtype=np.uint8)
        for k, d in enumerate(stream.data):
            self.pool[k, : len(d)] = np.frombuffer(d, dtype=np.uint8)
        self.bufs = [memoryview(self.pool[k, : len(d)]) for k, d in enumerate(stream.data)]
        self.unique = bool(unique and stream.stamps)
        if self.unique:
            per = [np.asarray(st, dtype=np.int64).reshape(-1, 3) for st in stream.stamps]
            base = np.arange(n, dtype=np.int64) * width
            self._addr = np.concatenate([p[:, 0] + b for p, b in zip(per, base)])
            self._port = np.concatenate([p[:, 1] + b for p, b in zip(per, base)])
            self._first = np.concatenate([[0], np.cumsum([len(p) for p in per])])

    def _stamp(self, k0: int, k1: int) -> None:
        """Give the flows of pool datagrams ``k0 .. k1-1`` the next counter values."""
        import numpy as np

        a, b = self._first[k0], self._first[k1]
        v = np.arange(self.flow_counter, self.flow_counter + (b - a), dtype=np.int64)
        self.flow_counter += b - a
        flat = self.pool.reshape(-1)
        pa, pp = self._addr[a:b], self._port[a:b]
        flat[pa] = (v >> 24) & 255
        flat[pa + 1] = (v >> 16) & 255
        flat[pp] = (v >> 8) & 255
        flat[pp + 1] = v & 255

    def send_templates(self) -> int:
        st = self.stream
        for t in st.templates:
            b = bytearray(t)
            struct.pack_into("!I", b, st.seq_offset, self.seq & 0xFFFFFFFF)
            if not st.seq_per_record:
                self.seq += 1
            self.sock.send(b)
        return len(st.templates)

    def blast(self, rate: float, seconds: float, chunk: int = 32, clock: int | None = None) -> SendResult:
        """Send at ``rate`` datagrams/s for ``seconds`` (templates first and every ``refresh``).

        ``clock`` (unix seconds; streams with a ``time_offset``): data datagram ``j`` carries the export time
        ``clock + floor(j / rate)``, so its flows' times move with the stream (one second of them per second
        of sending) and depend only on ``j``: two runs at the same rate send the same records.
        """
        st = self.stream
        toff = st.time_offset if clock is not None else None
        send = self.sock.send
        pack = struct.pack_into
        off, per_rec = st.seq_offset, st.seq_per_record
        bufs, recs = self.bufs, st.records
        npool = len(bufs)
        total = int(rate * seconds)
        sent = records = 0
        sent += self.send_templates()
        refresh = st.refresh if st.templates else 0
        stamp = self._stamp if self.unique else None
        t0 = time.perf_counter()
        i = 0
        seq = self.seq
        while i < total:
            end = min(i + chunk, total, i - i % npool + npool)  # a chunk never wraps around the pool
            if stamp is not None:
                stamp(i % npool, (end - 1) % npool + 1)
            for j in range(i, end):
                k = j % npool
                b = bufs[k]
                pack("!I", b, off, seq & 0xFFFFFFFF)
                if toff is not None:
                    pack("!I", b, toff, (clock + int(j / rate)) & 0xFFFFFFFF)
                seq += recs[k] if per_rec else 1
                try:
                    send(b)
                except (BlockingIOError, ConnectionRefusedError, InterruptedError):
                    continue
                sent += 1
                records += recs[k]
                if refresh and j % refresh == refresh - 1:
                    self.seq = seq
                    sent += self.send_templates()
                    seq = self.seq
            i = end
            due = t0 + i / rate
            ahead = due - time.perf_counter()
            if ahead > 0.002:
                time.sleep(ahead - 0.001)
            while time.perf_counter() < due:
                pass
        self.seq = seq
        return SendResult(sent, records, time.perf_counter() - t0)

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- processes and /proc


def pin(pid: int, cpu: int) -> None:
    """Pin ``pid`` (0 = this process) to one CPU; no-op when it does not exist here."""
    try:
        os.sched_setaffinity(pid, {cpu})
    except OSError:
        pass


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc/*/stat parent ids)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (all threads), and of reaped children."""
    total = 0.0
    for p in process_tree(pid) if tree else [pid]:
        try:
            with open(f"/proc/{p}/stat") as f:
                cols = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # own user + system time, plus that of its children already reaped (pmacct forks a
        # process per cache purge: that is where its Kafka plugin serialises and produces)
        total += (int(cols[11]) + int(cols[12]) + int(cols[13]) + int(cols[14])) / CLK_TCK
    return total


def udp_socket_stats(port: int) -> tuple[int, int]:
    """(receive queue bytes, kernel drops) summed over UDP sockets bound to ``port``."""
    rxq = drops = 0
    for cols in udp_socket_table():
        if int(cols[1].rsplit(":", 1)[1], 16) == port:
            rxq += int(cols[4].split(":")[1], 16)
            drops += int(cols[12])
    return rxq, drops


_PORTS = {"range": None, "next": 0}


def use_port_range(spec: str) -> range:
    """Take every port that :func:`free_udp_port` / :func:`free_tcp_port` hand out from ``LO-HI``.

    For a shared machine where each user has a block of ports; without it the kernel picks.
    """
    try:
        lo, hi = (int(x) for x in spec.split("-"))
    except ValueError:
        raise ValueError(f"port range {spec!r}: expected LO-HI, e.g. 43500-43999") from None
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"port range {spec!r}: expected 1024 <= LO <= HI <= 65535")
    _PORTS["range"], _PORTS["next"] = range(lo, hi + 1), 0
    return _PORTS["range"]


def _free_port(kind: int) -> int:
    """A port on 127.0.0.1 free for ``kind`` now: the kernel's pick, or the next free one of the range
    (handed out in turn, so a port just given to a collector is not given again at once)."""
    ports = _PORTS["range"]
    for _ in range(len(ports) if ports else 1):
        port = 0
        if ports:
            port = ports[_PORTS["next"] % len(ports)]
            _PORTS["next"] += 1
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    where = f"{ports.start}-{ports.stop - 1}" if ports else "the kernel's range"
    raise RuntimeError(f"no free port in {where} on 127.0.0.1")


def free_udp_port() -> int:
    return _free_port(socket.SOCK_DGRAM)


def free_tcp_port() -> int:
    return _free_port(socket.SOCK_STREAM)


def wait_quiet(count, timeout_s: float = 10.0, stable_s: float = 0.5, poll_s: float = 0.1):
    """Poll ``count()`` until it stops changing for ``stable_s``; returns the last value."""
    deadline = time.monotonic() + timeout_s
    last = count()
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        v = count()
        if v != last:
            last, since = v, time.monotonic()
        elif time.monotonic() - since >= stable_s:
            break
    return last
