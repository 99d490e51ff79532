"""Peer collectors for bench/ingest.py: pmacct (print and Kafka plugins), nfcapd and goflow2, each
started fresh for every rate step with its process tree pinned to one CPU, and counted after it stops.

Kafka peers publish to a topic of their own per step, read back from the start after the collector
has flushed and exited (never counted from the high watermark: Tansu reports it wrong). How each is
configured and counted: bench/README.md.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from devtools.loadgen import free_tcp_port, pin

# --------------------------------------------------------------------------- process hygiene


KAFKA_PEERS = ("nfacctd-kafka", "goflow2")  # publish to a topic of their own per step

CHILDREN: list[int] = []
RCVBUF = 4 * 1024 * 1024  # = net.core.rmem_max here; every collector that can set it gets this buffer


def cleanup_children() -> None:
    for pid in CHILDREN:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def udp_bound(port: int) -> bool:
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(name) as f:
                next(f)
                if any(int(line.split()[1].rsplit(":", 1)[1], 16) == port for line in f):
                    return True
        except OSError:
            continue
    return False


# --------------------------------------------------------------------------- peer collectors


class PeerCollector:
    """nfacctd/sfacctd, nfcapd or goflow2, started fresh for every rate step; counted after it stops."""

    per_step = True

    def __init__(self, name: str, protocol: str, port: int, cpu: int, workdir: Path, bootstrap: str | None = None,
                 binary: str | None = None):
        self.name, self.protocol, self.port, self.cpu = name, protocol, port, cpu
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.binary = binary
        self.proc: subprocess.Popen | None = None
        self.step = 0
        self.topic = ""
        self.metrics_port = 0

    def _argv(self, d: Path) -> list[str]:
        if self.name == "goflow2":
            return goflow2_argv(self.binary, self.protocol, self.port, self.metrics_port, self.bootstrap, self.topic)
        if self.name == "nfcapd":
            (d / "flows").mkdir()
            return ["nfcapd", "-w", str(d / "flows"), "-p", str(self.port), "-b", "127.0.0.1", "-t", "60",
                    "-B", str(RCVBUF)]
        daemon = "sfacctd" if self.protocol == "sflow" else "nfacctd"
        pfx = daemon
        conf = d / "pmacct.conf"
        common = (
            "daemonize: false\n"
            f"{pfx}_ip: 127.0.0.1\n"
            f"{pfx}_port: {self.port}\n"
            f"{pfx}_pipe_size: {RCVBUF}\n"
            # pmacct's own advice when its core-to-plugin pipe overflows: larger buffers
            "plugin_pipe_size[p]: 67108864\n"
            "plugin_buffer_size[p]: 65536\n"
        )
        if self.name == "nfacctd-kafka":
            # Every flow is its own aggregate (the sender never repeats a 5-tuple), so every
            # record is published: one JSON message per flow, as pmacct's Kafka plugin does by default.
            host, port = self.bootstrap.rsplit(":", 1)
            # librdkafka's local queue (default 100,000 messages) must hold a whole purge (one
            # message per flow), or pmacct drops what does not fit, silently (seen: 99.9 % of a
            # 266,000-flow step). fabricflow's queue holds 100,000 messages of up to 4,096 records.
            (d / "librdkafka.conf").write_text(
                "global, queue.buffering.max.messages, 2000000\n"
                "global, queue.buffering.max.kbytes, 2097151\n"
            )
            conf.write_text(common + (
                f"kafka_config_file[p]: {d / 'librdkafka.conf'}\n"
                "plugins: kafka[p]\n"
                "kafka_output[p]: json\n"
                f"kafka_broker_host[p]: {host}\n"
                f"kafka_broker_port[p]: {port}\n"
                f"kafka_topic[p]: {self.topic}\n"
                "kafka_refresh_time[p]: 1\n"
                f"kafka_cache_entries[p]: {KAFKA_CACHE_ENTRIES}\n"
                "aggregate[p]: peer_src_ip, src_host, dst_host, src_port, dst_port, proto\n"
            ))
        else:
            # Aggregated on fields the sender does not make unique: the print plugin's cache stays small.
            conf.write_text(common + (
                "plugins: print[p]\n"
                f"print_output_file[p]: {d / 'out.csv'}\n"
                "print_output_file_append[p]: true\n"
                "print_output[p]: csv\n"
                "print_refresh_time[p]: 3600\n"
                "aggregate[p]: peer_src_ip, dst_host, proto\n"
            ))
        return [daemon, "-f", str(conf)]

    def start(self) -> None:
        self.step += 1
        self.dir = self.workdir / f"{self.name}-{self.protocol}-{self.step}"
        self.dir.mkdir(parents=True)
        env = None
        if self.name in KAFKA_PEERS:
            # never a name used before in this run: Tansu served a deleted topic's records again under a
            # topic created with its name (seen once: a pmacct step counted twice what was sent)
            self.topic = f"bench-{self.name}-{self.protocol}-{self.step}-{uuid.uuid4().hex[:12]}"
            _create_topic(self.bootstrap, self.topic)
        if self.name == "nfacctd-kafka":
            env = {**os.environ, "LD_PRELOAD": wheel_librdkafka()}
        if self.name == "goflow2":
            self.metrics_port = free_tcp_port()
        argv = self._argv(self.dir)
        self.log = open(self.dir / "log", "wb")
        cpu = self.cpu
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=lambda: pin(0, cpu), env=env)
        CHILDREN.append(self.proc.pid)
        deadline = time.monotonic() + 10
        while not udp_bound(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not start: {(self.dir / 'log').read_text()[-500:]}")
            time.sleep(0.05)
        time.sleep(0.3)  # plugins attach after the socket is bound

    def prime(self, templates: list[bytes], sock) -> None:
        """goflow2 only: give its socket the others' receive buffer, and teach it the templates before the step.

        goflow2 has no receive-buffer setting (its socket gets net.core.rmem_default, 208 KiB here); the
        bench sets the same 4 MiB on its socket from outside, as raising rmem_default would. Its decoding
        workers run in parallel, so a data datagram right behind the template datagram can be decoded
        first and is then dropped ("template error"); a long-running goflow2 has learned the templates
        long before, so they go once from the sender's socket here (goflow2 keys templates by source address
        and port) and the step starts when goflow2 has decoded them.
        """
        if self.name != "goflow2":
            return
        granted = min(set_rcvbuf(self.proc.pid, self.port, RCVBUF))
        if granted < RCVBUF:
            print(f"  goflow2: receive buffer {granted} bytes < {RCVBUF} (not root: net.core.rmem_max caps it)")
        if not templates:
            return
        for t in templates:  # from the sender's own socket: goflow2 keys templates by source address and port
            sock.sendto(t, ("127.0.0.1", self.port))
        deadline = time.monotonic() + 10
        while goflow2_metrics(self.metrics_port)["decoded"] < len(templates):
            if time.monotonic() > deadline:
                raise RuntimeError("goflow2 did not decode the template datagrams within 10 s")
            time.sleep(0.02)

    def progress(self) -> tuple:
        """What the drain waits on besides the socket queue and CPU: goflow2's datagrams decoded or dropped."""
        if self.name != "goflow2":
            return ()
        m = goflow2_metrics(self.metrics_port)
        return (m["decoded"], m["dropped"])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> dict:
        """Stop and count: {'records': flows (nfcapd, goflow2) or None, 'packets': packets seen (else None),
        'log': its last warning; goflow2 also 'cpu_total': CPU seconds of its whole life from its rusage
        when reaped, and 'note'}."""
        before = goflow2_metrics(self.metrics_port) if self.name == "goflow2" else None
        p = self.proc
        p.send_signal(signal.SIGINT if self.name != "nfcapd" else signal.SIGTERM)
        cpu_total = _reap(p, 20)
        self.log.close()
        self.proc = None
        if self.name == "goflow2":
            messages, malformed = read_goflow2_topic(self.bootstrap, self.topic)
            _delete_topic(self.bootstrap, self.topic)
            note = f"goflow2 queue dropped {before['dropped']:.0f} datagrams" if before["dropped"] else ""
            if malformed:
                note = f"{note} {malformed} messages not one length-prefixed protobuf".strip()
            # its producer batches for 5 s and flushes on exit: that work is part of the step
            res = {"records": messages, "packets": None, "messages": messages, "note": note, "cpu_total": cpu_total}
        elif self.name == "nfcapd":
            out = subprocess.run(["nfdump", "-R", str(self.dir / "flows"), "-I"],
                                 capture_output=True, text=True, timeout=60).stdout
            kv = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
            res = {"records": int(kv.get("Flows", 0)), "packets": int(kv.get("Packets", 0)),
                   "sequence_failures": int(kv.get("Sequence failures", 0))}
        elif self.name == "nfacctd-kafka":
            messages, objects, packets = read_pmacct_topic(self.bootstrap, self.topic)
            _delete_topic(self.bootstrap, self.topic)
            res = {"records": None, "packets": packets, "messages": messages, "objects": objects}
        else:
            packets = 0
            out = self.dir / "out.csv"
            if out.exists():
                with open(out) as f:
                    for line in f:
                        cols = line.rstrip("\n").split(",")
                        if len(cols) >= 4 and cols[-2].isdigit():
                            packets += int(cols[-2])
            res = {"records": None, "packets": packets}
        log_lines = (self.dir / "log").read_text(errors="replace").splitlines()
        errors = [ln for ln in log_lines if "ERROR" in ln or "WARN" in ln]
        res["log"] = errors[-1].strip()[:120] if errors else ""
        shutil.rmtree(self.dir, ignore_errors=True)
        return res


KAFKA_CACHE_ENTRIES = int(os.environ.get("BENCH_PMACCT_CACHE", 131_071))  # aggregates held between purges (~530 MB)
_PACKETS = re.compile(rb'"packets": ?(\d+)')


def wheel_librdkafka() -> str:
    """The librdkafka shipped in the confluent-kafka wheel (pmacct is LD_PRELOADed with it).

    Debian's librdkafka 2.0.2, which pmacct links, cannot parse the embedded
    broker's (Tansu) ApiVersions reply; the wheel's newer build can.
    """
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka in {libs}: pmacct's Kafka plugin cannot talk to the embedded broker")
    return str(found[0])


def _reap(p: subprocess.Popen, timeout_s: float) -> float:
    """Wait for ``p`` to exit (killed after ``timeout_s``); user + system CPU seconds of its whole life,
    all threads and reaped children, from wait4's rusage."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            p.kill()
            deadline = time.monotonic() + 5
        time.sleep(0.02)


# --------------------------------------------------------------------------- goflow2


def set_rcvbuf(pid: int, port: int, size: int) -> list[int]:
    """Set SO_RCVBUF on ``pid``'s UDP sockets bound to ``port`` (past net.core.rmem_max as root, else capped
    by it), through duplicates taken with pidfd_getfd (Linux >= 5.6); the granted sizes, one per socket."""
    import ctypes
    import socket

    inodes = set()
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        with open(name) as f:
            next(f)
            for line in f:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{cols[9]}]")
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    granted = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") not in inodes:
                    continue
            except OSError:
                continue
            dup = libc.syscall(438, pidfd, int(fd), 0)  # pidfd_getfd
            if dup < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"pidfd_getfd on pid {pid}: {os.strerror(err)}")
            with socket.socket(fileno=dup) as s:  # closing the duplicate leaves the collector's socket open
                try:
                    s.setsockopt(socket.SOL_SOCKET, 33, size)  # SO_RCVBUFFORCE
                except PermissionError:  # not root: capped at net.core.rmem_max
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
                granted.append(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2)  # Linux reports double
    finally:
        os.close(pidfd)
    if not granted:
        raise RuntimeError(f"no UDP socket of pid {pid} bound to port {port}")
    return granted


def goflow2_binary(path: str | None) -> str | None:
    """The goflow2 executable: ``path`` (``--goflow2``), else $FF_GOFLOW2, else ``goflow2`` on PATH; None if absent."""
    path = path or os.environ.get("FF_GOFLOW2") or shutil.which("goflow2")
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return os.path.abspath(path)
    return None


def goflow2_argv(binary: str, protocol: str, port: int, metrics_port: int, bootstrap: str, topic: str) -> list[str]:
    """goflow2 publishing protobuf (one flow per Kafka message, length-prefixed) to ``topic``; everything on
    127.0.0.1 (its defaults listen on every address: UDP 2055/6343, HTTP :8080). Other settings are its
    defaults: one socket and two decoding workers per listener, a non-blocking 1,000,000-datagram queue,
    sarama's async producer (Kafka protocol 2.8.0, no compression, flushed every 5 s and on exit)."""
    scheme = "sflow" if protocol == "sflow" else "netflow"  # netflow:// takes v5, v9 and IPFIX
    return [binary, "-listen", f"{scheme}://127.0.0.1:{port}", "-addr", f"127.0.0.1:{metrics_port}",
            "-transport", "kafka", "-transport.kafka.brokers", bootstrap, "-transport.kafka.topic", topic,
            "-format", "bin", "-loglevel", "warn"]


def goflow2_metrics(port: int) -> dict[str, float]:
    """Datagrams goflow2 has decoded (``goflow2_flow_decoding_time_seconds_count``, observed after each
    decode; ``..._traffic_packets_total`` counts before it) and dropped because its queue was full
    (``goflow2_flow_dropped_packets_total``), from its /metrics."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {"decoded": 0.0, "dropped": 0.0}
    names = {"goflow2_flow_decoding_time_seconds_count": "decoded", "goflow2_flow_dropped_packets_total": "dropped"}
    for line in text.splitlines():
        key = names.get(line.split("{", 1)[0].split(" ", 1)[0])
        if key:
            out[key] += float(line.rpartition(" ")[2])
    return out


def one_delimited(v: bytes) -> bool:
    """True when ``v`` is exactly one varint-length-prefixed message (goflow2's ``-format bin``)."""
    n = shift = 0
    for i, b in enumerate(v[:10]):
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return len(v) - i - 1 == n
        shift += 7
    return False


def read_goflow2_topic(bootstrap: str, topic: str) -> tuple[int, int]:
    """(messages, messages that are not one length-prefixed protobuf) on ``topic``: goflow2 publishes one
    flow per message."""
    bad = [0]

    def visit(values):
        bad[0] += sum(1 for v in values if not one_delimited(v))

    return read_topic(bootstrap, topic, visit), bad[0]


# --------------------------------------------------------------------------- topics


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for f in admin.delete_topics([topic]).values():
            f.result(30)
    except Exception as e:  # the broker keeps the topic in memory; not fatal for the bench
        print(f"  (could not delete {topic}: {e})")


def read_topic(bootstrap: str, topic: str, visit, idle_s: float = 2.0, max_s: float = 120.0) -> int:
    """Messages on ``topic``, read from offset 0 of every partition until idle for ``idle_s`` (15 s before
    the first); ``visit(values)`` sees each batch. No consumer group (its join takes seconds on Tansu).

    Counted from what was read, never from the high watermark (Tansu reports it wrong).
    """
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20})
    messages = 0
    last = time.monotonic()
    deadline = last + max_s
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        while time.monotonic() < deadline:
            got = [m.value() for m in c.consume(10_000, 0.5) if m.error() is None]
            if not got:
                if time.monotonic() - last > idle_s and (messages or time.monotonic() - last > 15):
                    break
                continue
            last = time.monotonic()
            messages += len(got)
            visit(got)
    finally:
        c.close()
    return messages


def read_pmacct_topic(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(messages, JSON objects, sum of "packets") on ``topic``."""
    objects = packets = 0
    find = _PACKETS.findall

    def visit(values):
        nonlocal objects, packets
        for v in values:
            found = find(v)
            objects += len(found)
            packets += sum(map(int, found))

    messages = read_topic(bootstrap, topic, visit)
    return messages, objects, packets
