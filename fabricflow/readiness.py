"""Wait for the broker and the object store at start, with backoff and one clear line per attempt.

:func:`wait_for_kafka` and :func:`wait_for_object_store` open a TCP connection, then ask the service
itself (Kafka metadata through a silenced admin client, so TLS and SASL problems become the reason;
a listing of the archive bucket), log one line per attempt, back off from 0.5 s doubling to 10 s, and
raise :class:`Unreachable` (one line: address, reason, setting to look at) when the timeout passes;
services exit with status 1 on it. ``timeout_s=0`` tries once. docs/operations.md, "Start-up".
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # pragma: no cover
    from .settings import ArchiveSettings, KafkaSettings

__all__ = ["Unreachable", "kafka_addresses", "object_store_address", "wait_for_kafka", "wait_for_object_store", "wait_until"]

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
CONNECT_TIMEOUT_S = 2.0

_quiet = logging.getLogger("fabricflow.readiness.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class Unreachable(RuntimeError):
    """A service the process needs did not answer within its wait timeout (message: one line)."""


def wait_until(
    what: str,
    address: str,
    probe: Callable[[], str | None],
    timeout_s: float,
    log: logging.Logger,
    hint: str = "",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Call ``probe`` until it returns None (ready) or ``timeout_s`` passed; returns the attempts it took.

    ``probe`` returns a short reason when not ready (it must not raise for expected failures; an
    exception is taken as the reason too).
    """
    start = clock()
    delay = BACKOFF_FIRST_S
    attempt = 0
    while True:
        attempt += 1
        try:
            reason = probe()
        except Exception as e:  # noqa: BLE001 - any failure is a reason to wait, reported in one line
            reason = _one_line(e)
        if reason is None:
            if attempt > 1:
                log.info("%s at %s is reachable (after %d attempts, %.1f s)", what, address, attempt, clock() - start)
            return attempt
        left = timeout_s - (clock() - start)
        if left <= 0:
            raise Unreachable(
                f"{what} at {address} not reachable after {attempt} attempt(s) in {clock() - start:.0f} s: {reason}"
                + (f" ({hint})" if hint else "")
            )
        pause = min(delay, left)
        log.warning("waiting for %s at %s (%s); attempt %d, next in %.1f s, giving up in %.0f s",
                    what, address, reason, attempt, pause, left)
        sleep(pause)
        delay = min(delay * 2, BACKOFF_MAX_S)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _tcp(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except socket.gaierror as e:
        return f"cannot resolve {host}: {e.strerror}"
    except TimeoutError:
        return f"connect to {host}:{port} timed out"
    except OSError as e:
        return f"{host}:{port}: {e.strerror or e}"


def kafka_addresses(kafka: KafkaSettings) -> list[tuple[str, int]]:
    """(host, port) of each bootstrap server (``host:port``, ``[v6]:port``, optional ``scheme://``)."""
    out = []
    for item in kafka.bootstrap_servers.split(","):
        item = item.strip()
        if not item:
            continue
        u = urlsplit(item if "://" in item else "kafka://" + item)
        out.append((u.hostname or "", u.port or 9092))
    return out


def _kafka_probe(kafka: KafkaSettings) -> Callable[[], str | None]:
    def probe() -> str | None:
        reasons = []
        for host, port in kafka_addresses(kafka):
            r = _tcp(host, port)
            if r is None:
                break
            reasons.append(r)
        else:
            return "; ".join(reasons) or "no bootstrap servers"
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from .kafka import client_config

        errors: list[str] = []
        conf = client_config(kafka)
        conf.update({"logger": _quiet, "error_cb": lambda err: errors.append(err.str()),
                     "socket.connection.setup.timeout.ms": 5000})
        admin = AdminClient(conf)
        try:
            admin.list_topics(timeout=5)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            detail = errors[-1] if errors else (err.str() if hasattr(err, "str") else str(e))
            return f"metadata request failed: {detail}"
        finally:
            del admin
        return None

    return probe


def wait_for_kafka(kafka: KafkaSettings, timeout_s: float | None = None, log: logging.Logger | None = None, **kw) -> int:
    """Wait until the brokers answer a metadata request; :class:`Unreachable` after ``timeout_s``
    (default ``kafka.wait_timeout_s``). Returns the attempts it took."""
    timeout = kafka.wait_timeout_s if timeout_s is None else timeout_s
    return wait_until("Kafka", kafka.bootstrap_servers, _kafka_probe(kafka), timeout, log or logging.getLogger("fabricflow"),
                      hint="check kafka.bootstrap_servers and the security settings; kafka.wait_timeout_s sets the wait", **kw)


def object_store_address(archive: ArchiveSettings) -> tuple[str, int] | None:
    """(host, port) of the S3 endpoint for an ``s3://`` archive (AWS when no endpoint), else None."""
    if not archive.url.startswith("s3://"):
        return None
    u = urlsplit(archive.s3_endpoint or f"https://s3.{archive.s3_region}.amazonaws.com")
    return u.hostname or "", u.port or (443 if u.scheme == "https" else 80)


def wait_for_object_store(archive: ArchiveSettings, timeout_s: float | None = None, log: logging.Logger | None = None,
                          fs=None, **kw) -> int:
    """Wait until the archive bucket can be listed (``s3://`` only; other URLs return 0 at once).

    ``fs``: the filesystem the service will use (default: a short-timeout s3fs client from the settings).
    """
    addr = object_store_address(archive)
    if addr is None:
        return 0
    bucket = archive.url[len("s3://"):].strip("/").split("/")[0]
    timeout = archive.wait_timeout_s if timeout_s is None else timeout_s

    def probe() -> str | None:
        r = _tcp(*addr)
        if r is not None:
            return r
        client = fs if fs is not None else _s3(archive)
        try:
            client.ls(bucket, refresh=True)
        except FileNotFoundError:
            return f"bucket {bucket} does not exist (yet)"
        except PermissionError as e:
            return f"access to bucket {bucket} denied: {_one_line(e)}"
        return None

    where = f"{archive.s3_endpoint or 'AWS S3'} (bucket {bucket})"
    return wait_until("the object store", where, probe, timeout, log or logging.getLogger("fabricflow"),
                      hint="check archive.url, archive.s3_endpoint and the keys; archive.wait_timeout_s sets the wait", **kw)


def _s3(archive: ArchiveSettings):
    import s3fs

    client_kwargs = {"region_name": archive.s3_region}
    if archive.s3_endpoint:
        client_kwargs["endpoint_url"] = archive.s3_endpoint
    secret = archive.s3_secret_key.get_secret_value() if archive.s3_secret_key else None
    return s3fs.S3FileSystem(key=archive.s3_access_key, secret=secret, client_kwargs=client_kwargs, skip_instance_cache=True,
                             config_kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": 5,
                                            "retries": {"max_attempts": 1}})
