"""Kafka over real TLS (mutual, hostname checked) with both client stacks, configured only through our settings.

The embedded broker cannot serve TLS itself (Tansu 0.6.0 accepts --cert/--key but refuses them together and
answers plain Kafka), so the test puts a TLS-terminating proxy in front of it: Tansu advertises the proxy's
address, every client connection (bootstrap and the broker connection from metadata) goes through TLS with
certificate verification, client certificates and the host name check, exactly as against a TLS listener.
Certificates come from openssl in the test.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from devtools.stack import SESSION_TIMEOUT_MS
from fabricflow.kafka import client_config
from fabricflow.settings import KafkaSettings

pytestmark = pytest.mark.integration
REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"


def _unavailable(msg):
    if REQUIRE:
        pytest.fail(msg)
    pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(d: Path, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)


def _ca(d: Path, name: str):
    _openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN={name}")


def _leaf(d: Path, ca: str, name: str, ext: str):
    (d / f"{name}.ext").write_text(ext)
    _openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    try:
        _ca(d, "ca")
        _ca(d, "other-ca")
        _leaf(d, "ca", "broker", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        _leaf(d, "ca", "client", "extendedKeyUsage=clientAuth\n")
    except (OSError, subprocess.CalledProcessError) as e:
        _unavailable(f"openssl unavailable: {e}")
    return d


class TlsProxy:
    """TLS server (client certificates required) on localhost:port forwarding bytes to a plain TCP port."""

    def __init__(self, pki: Path, port: int, upstream: int):
        import ssl

        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
        self.ctx.load_cert_chain(str(pki / "broker.pem"), str(pki / "broker.key"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.port, self.upstream = port, upstream
        self.loop = asyncio.new_event_loop()
        self.handshakes = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)

        async def pipe(r, w):
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        async def handle(reader, writer):
            self.handshakes += 1
            try:
                r2, w2 = await asyncio.open_connection("127.0.0.1", self.upstream)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, w2), pipe(r2, writer))

        async def main():
            self.server = await asyncio.start_server(handle, "localhost", self.port, ssl=self.ctx)
            ready.set()

        self.loop.run_until_complete(main())
        self.loop.run_forever()

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory):
    from devtools.stack import StackError, tansu_binary

    try:
        tansu = tansu_binary()
    except StackError as e:
        _unavailable(str(e))
    plain, tls = _free_port(), _free_port()
    log = (tmp_path_factory.mktemp("tansu") / "tansu.log").open("w")
    proc = subprocess.Popen([str(tansu), "broker", "--listener-url", f"tcp://127.0.0.1:{plain}",
                             "--advertised-listener-url", f"tcp://localhost:{tls}", "--storage-engine", "memory://tansu/"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", plain), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    proxy = TlsProxy(pki, tls, plain)
    yield f"localhost:{tls}", proxy
    proxy.close()
    proc.terminate()
    proc.wait(10)
    log.close()


def _settings(pki: Path, bootstrap: str, **kw) -> KafkaSettings:
    base = dict(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_ca_file=str(pki / "ca.pem"),
                ssl_cert_file=str(pki / "client.pem"), ssl_key_file=str(pki / "client.key"), wait_timeout_s=0)
    return KafkaSettings(**{**base, **kw})


def test_confluent_kafka_over_mutual_tls(pki, tls_broker):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap, proxy = tls_broker
    k = _settings(pki, bootstrap)
    conf = client_config(k)
    topic = "tls-" + uuid.uuid4().hex[:8]
    admin = AdminClient(conf)  # kept referenced until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    before = proxy.handshakes
    p = Producer(conf)
    p.produce(topic, key=b"k", value=b"over tls")
    assert p.flush(15) == 0
    # a group member over TLS (coordinator included); the embedded broker holds a join for half the session
    # timeout, librdkafka's default 45 s would cost 22 s here
    c = Consumer({**conf, "group.id": "g-" + topic, "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_TIMEOUT_MS})
    c.subscribe([topic])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got = m.value()
    c.close()
    assert got == b"over tls"
    assert proxy.handshakes > before  # the traffic went through the TLS listener


def test_aiokafka_with_faust_credentials_over_mutual_tls(pki, tls_broker):
    """What Faust hands to aiokafka (credentials_to_aiokafka_auth of our faust_credentials) works over TLS."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from confluent_kafka.admin import AdminClient, NewTopic
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from fabricflow.kafka_security import faust_credentials

    bootstrap, _proxy = tls_broker
    k = _settings(pki, bootstrap)
    topic = "tls-" + uuid.uuid4().hex[:8]
    admin = AdminClient(client_config(k))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    auth = credentials_to_aiokafka_auth(faust_credentials(k))

    async def roundtrip():
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, **auth)
        await prod.start()
        try:
            await prod.send_and_wait(topic, b"faust over tls", key=b"k")
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **auth)
        await cons.start()
        try:
            msg = await asyncio.wait_for(cons.getone(), 30)
        finally:
            await cons.stop()
        return msg.value

    assert asyncio.run(roundtrip()) == b"faust over tls"


def test_wrong_ca_is_reported_by_the_start_up_wait(pki, tls_broker):
    from fabricflow.readiness import Unreachable, wait_for_kafka

    bootstrap, _proxy = tls_broker
    wait_for_kafka(_settings(pki, bootstrap))  # the right CA: ready at once
    with pytest.raises(Unreachable, match="metadata request failed"):
        wait_for_kafka(_settings(pki, bootstrap, ssl_ca_file=str(pki / "other-ca.pem")))
