"""One producer configuration (fabricflow.kafka.producer_config) for ingest, the processors' output producer and
replay: the same security, idempotence, partitioner, size limit, compression and buffer bounds everywhere."""

from __future__ import annotations

from unittest import mock

import pytest

from fabricflow.kafka import producer_config
from fabricflow.settings import load_settings
from tests.support.fake_kafka import FakeProducer

# what a producer may set differently from producer_config, and why
OWN = {
    "ingest": set(),
    "processors": {"linger.ms", "delivery.report.only.error", "on_delivery"},  # processors.output_linger_ms, errors only
    "replay": set(),
}


class _Capture(FakeProducer):
    """Stands in for confluent_kafka.Producer: keeps the configuration it was built with."""

    configs: list[dict] = []

    def __init__(self, conf):
        super().__init__(conf)
        _Capture.configs.append(dict(conf))


def _settings():
    return load_settings(None, kafka={"bootstrap_servers": "127.0.0.1:9", "security_protocol": "SASL_PLAINTEXT",
                                      "sasl_mechanism": "PLAIN", "sasl_username": "ff", "sasl_password": "pw"},
                         ingest={"producer": {"compression": "zstd", "linger_ms": 7, "queue_max_kbytes": 4096}},
                         processors={"output_linger_ms": 3, "metrics_port": 0, "web_port": 0})


def _built(who: str, s) -> dict:
    _Capture.configs = []
    if who == "ingest":
        from ingest.metrics import IngestMetrics
        from ingest.publish import KafkaSink

        KafkaSink(s.kafka, s.ingest.producer, IngestMetrics(), producer_factory=_Capture)
    elif who == "processors":
        from processors.worker.publish import OutputPublisher

        with mock.patch("processors.worker.publish.Producer", _Capture):
            OutputPublisher(s)
    else:
        from replay.outputs import publish

        with mock.patch("confluent_kafka.Producer", _Capture), mock.patch("fabricflow.kafka.ensure_topics", lambda *a, **k: {}):
            publish([], s.kafka, producer_settings=s.ingest.producer)
    (conf,) = _Capture.configs
    return conf


@pytest.mark.parametrize("who", sorted(OWN))
def test_every_producer_is_built_from_the_one_configuration(who):
    s = _settings()
    conf = _built(who, s)
    base = producer_config(s.kafka, s.ingest.producer)
    assert {k: v for k, v in conf.items() if k not in OWN[who]} == {k: v for k, v in base.items() if k not in OWN[who]}
    assert conf["compression.type"] == "zstd" and conf["partitioner"] == "murmur2_random"
    assert conf["sasl.username"] == "ff" and conf["enable.idempotence"] is True
    if who == "processors":
        assert conf["linger.ms"] == 3 and conf["delivery.report.only.error"] is True
    else:
        assert conf["linger.ms"] == 7
