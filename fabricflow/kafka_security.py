"""Kafka security settings (SASL, TLS) mapped onto both client stacks, in one place.

fabricflow talks to Kafka through confluent-kafka (librdkafka: ingest, the processors' output
producer, the archive sink, admin) and Faust/aiokafka (the processors' consumer group, tables and
changelogs). :func:`librdkafka_config` and :func:`faust_credentials` give both the same security from
:class:`fabricflow.settings.KafkaSettings` (protocol, SASL mechanism and credentials, CA, client
certificate and key, hostname check; turning the check off keeps chain verification). Secrets leave
their ``SecretStr`` only inside the returned client configuration; :func:`describe` is what may be
logged. The settings: docs/operations.md, "Secured Kafka (SASL, TLS)".
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .settings import KafkaSettings

__all__ = ["SecurityFileError", "check_files", "describe", "faust_credentials", "librdkafka_config", "ssl_context"]


class SecurityFileError(ValueError):
    """A TLS file named by the settings is missing or unreadable (one line naming the setting and the file)."""


def _uses_tls(kafka: KafkaSettings) -> bool:
    return kafka.security_protocol in ("SSL", "SASL_SSL")


def _uses_sasl(kafka: KafkaSettings) -> bool:
    return kafka.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def check_files(kafka: KafkaSettings) -> None:
    """Raise :class:`SecurityFileError` when a TLS file the settings name does not exist or is not readable."""
    if not _uses_tls(kafka):
        return
    for name in ("ssl_ca_file", "ssl_cert_file", "ssl_key_file"):
        path = getattr(kafka, name)
        if not path:
            continue
        p = Path(path)
        if not p.is_file():
            raise SecurityFileError(f"kafka.{name}: {path}: no such file")
        try:
            with p.open("rb") as f:
                head = f.read(64)
        except OSError as e:
            raise SecurityFileError(f"kafka.{name}: {path}: cannot read ({e.strerror})") from None
        if b"-----BEGIN" not in head and not head.lstrip().startswith(b"-----"):
            raise SecurityFileError(f"kafka.{name}: {path}: not a PEM file (no -----BEGIN line)")


def librdkafka_config(kafka: KafkaSettings) -> dict[str, Any]:
    """confluent-kafka configuration (bootstrap, client id, SASL, TLS) shared by producers, consumers and admins."""
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "client.id": kafka.client_id,
        "security.protocol": kafka.security_protocol,
    }
    if _uses_sasl(kafka):
        conf["sasl.mechanism"] = kafka.sasl_mechanism
        conf["sasl.username"] = kafka.sasl_username
        conf["sasl.password"] = kafka.sasl_password.get_secret_value() if kafka.sasl_password else ""
    if _uses_tls(kafka):
        if kafka.ssl_ca_file:
            conf["ssl.ca.location"] = kafka.ssl_ca_file
        if kafka.ssl_cert_file:
            conf["ssl.certificate.location"] = kafka.ssl_cert_file
            conf["ssl.key.location"] = kafka.ssl_key_file
        if kafka.ssl_key_password is not None:
            conf["ssl.key.password"] = kafka.ssl_key_password.get_secret_value()
        conf["ssl.endpoint.identification.algorithm"] = "https" if kafka.ssl_check_hostname else "none"
    return conf


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context for Python clients (aiokafka), or None without TLS.

    Verifies the broker certificate against ``ssl_ca_file`` (else the system store), presents the client
    certificate when one is set, and checks the host name unless ``ssl_check_hostname`` is off.
    """
    if not _uses_tls(kafka):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=kafka.ssl_ca_file or None)
    if kafka.ssl_cert_file:
        password = kafka.ssl_key_password.get_secret_value() if kafka.ssl_key_password else None
        ctx.load_cert_chain(kafka.ssl_cert_file, kafka.ssl_key_file, password=password)
    ctx.check_hostname = kafka.ssl_check_hostname  # the chain is verified either way (CERT_REQUIRED)
    return ctx


def faust_credentials(kafka: KafkaSettings):
    """``broker_credentials`` for ``faust.App`` (None for PLAINTEXT).

    SASL_SSL: ``faust.SASLCredentials`` with the TLS context; SASL_PLAINTEXT: without; SSL:
    ``faust.SSLCredentials`` with the context (client certificate included when set).
    """
    import faust

    ctx = ssl_context(kafka)
    if _uses_sasl(kafka):
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value() if kafka.sasl_password else "",
            mechanism=kafka.sasl_mechanism,
            ssl_context=ctx,
        )
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None


def describe(kafka: KafkaSettings) -> str:
    """What may be logged about the connection: protocol, mechanism, user, files; never a secret."""
    parts = [kafka.security_protocol]
    if _uses_sasl(kafka):
        parts.append(f"sasl={kafka.sasl_mechanism} user={kafka.sasl_username}")
    if _uses_tls(kafka):
        parts.append(f"ca={kafka.ssl_ca_file or 'system'}")
        if kafka.ssl_cert_file:
            parts.append(f"client-cert={kafka.ssl_cert_file}")
        if not kafka.ssl_check_hostname:
            parts.append("hostname-check=off")
    return " ".join(parts)
