"""``fabricflow demo`` takes every port from the settings, so it runs beside another stack or demo."""

from __future__ import annotations

from dataclasses import asdict

import yaml

from devtools.runner import LocalPipeline, PipelinePorts
from fabricflow.settings import load_settings

MOVED = {
    "stack": {"kafka_port": 42000, "s3_port": 42001, "s3_base_port": 42010},
    "ingest": {"listen": ["sflow://127.0.0.1:42030", "netflow://127.0.0.1:42031", "ipfix://127.0.0.1:42032",
                          "marks://127.0.0.1:42033"],
               "metrics_port": 42040},
    "processors": {"web_port": 42041, "metrics_port": 42042},
    "archive": {"metrics_port": 42043},
    "metrics": {"port": 42044},
    "console": {"listen": "127.0.0.1:42045", "metrics_port": 42046},
}


def test_default_settings_give_the_default_ports():
    assert PipelinePorts.from_settings(load_settings(None)) == PipelinePorts()


def test_every_port_moves_with_the_settings(tmp_path):
    cfg = tmp_path / "ports.yaml"
    cfg.write_text(yaml.safe_dump(MOVED))
    ports = PipelinePorts.from_settings(load_settings(cfg))
    assert all(42000 <= p < 42100 for p in asdict(ports).values()), ports
    assert len(set(asdict(ports).values())) == len(asdict(ports))
    written = LocalPipeline(tmp_path / "demo", ports=ports).settings_dict()  # what the demo's services read
    assert written["stack"]["kafka_port"] == 42000 and written["console"]["listen"] == "127.0.0.1:42045"
    assert written["ingest"]["listen"][0] == "sflow://127.0.0.1:42030"


def test_the_demos_group_members_use_the_embedded_brokers_shortest_join(tmp_path):
    """Tansu holds each join for half the session timeout (3 s at the 6000 default): the demo's services get
    devtools.stack.SESSION_TIMEOUT_MS (a 1 s join), and a setting given to the runner still wins."""
    from devtools.stack import SESSION_TIMEOUT_MS

    assert SESSION_TIMEOUT_MS < load_settings(None).kafka.session_timeout_ms
    assert LocalPipeline(tmp_path / "a").settings_dict()["kafka"]["session_timeout_ms"] == SESSION_TIMEOUT_MS
    given = LocalPipeline(tmp_path / "b", extra={"kafka": {"session_timeout_ms": 10000}}).settings_dict()
    assert given["kafka"]["session_timeout_ms"] == 10000
