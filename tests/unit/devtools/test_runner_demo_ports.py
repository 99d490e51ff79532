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
