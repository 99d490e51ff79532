"""SASL and TLS settings reach both client stacks (fabricflow/kafka_security.py) and never leak."""

import logging
import ssl
import subprocess
from pathlib import Path

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from fabricflow.kafka_security import SecurityFileError, check_files, describe, faust_credentials, librdkafka_config, ssl_context
from fabricflow.settings import ConfigError, KafkaSettings, dump_yaml, load_settings


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a client certificate signed by it and its key (openssl, EC P-256)."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "1", "-subj", "/CN=test CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "client.key",
        "-out", "client.csr", "-subj", "/CN=fabricflow")
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "client.pem", "-days", "1")
    return d


def _k(**kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers="b1:9093,b2:9093", **kw)


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_both_stacks(mech):
    k = _k(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mech, sasl_username="ff", sasl_password="s3cret")
    conf = librdkafka_config(k)
    assert conf["security.protocol"] == "SASL_PLAINTEXT"
    assert (conf["sasl.mechanism"], conf["sasl.username"], conf["sasl.password"]) == (mech, "ff", "s3cret")
    assert not any(key.startswith("ssl.") for key in conf)
    creds = faust_credentials(k)
    assert isinstance(creds, faust.SASLCredentials)
    auth = credentials_to_aiokafka_auth(creds)  # what Faust hands to aiokafka's consumer and producer
    assert auth["security_protocol"] == "SASL_PLAINTEXT"
    assert (auth["sasl_mechanism"], auth["sasl_plain_username"], auth["sasl_plain_password"]) == (mech, "ff", "s3cret")
    assert auth["ssl_context"] is None


def test_sasl_ssl_with_ca_and_hostname_check(pki):
    k = _k(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="ff", sasl_password="pw",
           ssl_ca_file=str(pki / "ca.pem"))
    conf = librdkafka_config(k)
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["ssl.ca.location"] == str(pki / "ca.pem")
    assert conf["ssl.endpoint.identification.algorithm"] == "https"
    assert "ssl.certificate.location" not in conf
    auth = credentials_to_aiokafka_auth(faust_credentials(k))
    assert auth["security_protocol"] == "SASL_SSL"
    ctx = auth["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert any(c["subject"] == ((("commonName", "test CA"),),) for c in ctx.get_ca_certs())


def test_mutual_tls_without_hostname_check(pki):
    k = _k(security_protocol="SSL", ssl_ca_file=str(pki / "ca.pem"), ssl_cert_file=str(pki / "client.pem"),
           ssl_key_file=str(pki / "client.key"), ssl_key_password="kpw", ssl_check_hostname=False)
    conf = librdkafka_config(k)
    assert conf["ssl.certificate.location"] == str(pki / "client.pem")
    assert conf["ssl.key.location"] == str(pki / "client.key")
    assert conf["ssl.key.password"] == "kpw"
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert not any(key.startswith("sasl.") for key in conf)
    # the key is not encrypted: OpenSSL ignores the password; the chain is verified either way
    creds = faust_credentials(k)
    assert isinstance(creds, faust.SSLCredentials)
    auth = credentials_to_aiokafka_auth(creds)
    assert auth["security_protocol"] == "SSL"
    assert not auth["ssl_context"].check_hostname and auth["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_plaintext_gives_nothing_extra():
    k = _k()
    assert set(librdkafka_config(k)) == {"bootstrap.servers", "client.id", "security.protocol"}
    assert faust_credentials(k) is None and ssl_context(k) is None


def test_inconsistent_security_settings_are_one_line_errors(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(ConfigError, match="needs sasl_mechanism"):
        load_settings()
    monkeypatch.setenv("FABRICFLOW_KAFKA__SASL_MECHANISM", "GSSAPI")
    with pytest.raises(ConfigError, match="kafka.sasl_mechanism"):
        load_settings()
    monkeypatch.setenv("FABRICFLOW_KAFKA__SECURITY_PROTOCOL", "SSL")
    monkeypatch.delenv("FABRICFLOW_KAFKA__SASL_MECHANISM")
    monkeypatch.setenv("FABRICFLOW_KAFKA__SSL_CERT_FILE", "/x.pem")
    with pytest.raises(ConfigError, match="go together"):
        load_settings()


def test_missing_tls_file_is_named(tmp_path, pki):
    with pytest.raises(SecurityFileError, match=r"kafka.ssl_ca_file: .*nope.pem: no such file"):
        check_files(_k(security_protocol="SSL", ssl_ca_file=str(tmp_path / "nope.pem")))
    (tmp_path / "junk.pem").write_text("hello")
    with pytest.raises(SecurityFileError, match="not a PEM file"):
        check_files(_k(security_protocol="SSL", ssl_ca_file=str(tmp_path / "junk.pem")))
    check_files(_k(security_protocol="SSL", ssl_ca_file=str(pki / "ca.pem")))


def test_secrets_masked_in_dump_and_description(monkeypatch, caplog):
    monkeypatch.setenv("FABRICFLOW_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("FABRICFLOW_KAFKA__SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv("FABRICFLOW_KAFKA__SASL_USERNAME", "ff")
    monkeypatch.setenv("FABRICFLOW_KAFKA__SASL_PASSWORD", "top-secret-1")
    monkeypatch.setenv("FABRICFLOW_KAFKA__SSL_KEY_PASSWORD", "top-secret-2")
    s = load_settings()
    text = dump_yaml(s)
    assert "top-secret" not in text and text.count("**********") >= 3
    assert "top-secret-1" in dump_yaml(s, show_secrets=True)
    assert "top-secret" not in repr(s) and "top-secret" not in str(s.kafka)
    assert "top-secret" not in describe(s.kafka) and "ff" in describe(s.kafka)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("t").info("settings %s", s.kafka)
    assert "top-secret" not in caplog.text
