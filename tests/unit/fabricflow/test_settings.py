"""Settings: env prefix, nesting, YAML, unknown keys, frozen, generated docs in sync."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli.main import app
from cli.pipeline import register
from cli.config import configuration_docs
from fabricflow.settings import ConfigError, iter_fields, load_settings

REPO = Path(__file__).resolve().parents[3]
register(app)
runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith("FABRICFLOW_"):
            monkeypatch.delenv(k)


def test_defaults_run_locally():
    s = load_settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert s.archive.url.startswith("file://")
    assert s.processors.inventory is None
    assert s.kafka.topics.flows_raw == "flows.raw.v1"


def test_every_topic_name_is_a_stream_of_the_catalog():
    """kafka.topics is built from fabricflow/streams.py: one setting per stream (its default and description
    from the catalog), no more, no less, and no two streams share a topic."""
    from fabricflow import streams
    from fabricflow.settings import TopicNames

    assert set(TopicNames.model_fields) - {"replay_prefix"} == {s.name for s in streams.STREAMS}
    assert len(set(streams.topic_names(load_settings().kafka).values())) == len(streams.STREAMS)
    assert {s.name: TopicNames.model_fields[s.name].default for s in streams.STREAMS}["matrix"] == "matrix.windows.v2"


def test_env_nested_and_precedence(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("kafka:\n  bootstrap_servers: filehost:1\n  partitions: 8\n")
    monkeypatch.setenv("FABRICFLOW_KAFKA__BOOTSTRAP_SERVERS", "envhost:2")
    s = load_settings(str(f))
    assert s.kafka.bootstrap_servers == "envhost:2"  # env beats file
    assert s.kafka.partitions == 8  # file beats default
    monkeypatch.setenv("FABRICFLOW_INGEST__ALLOWLIST", '["10.0.0.0/8"]')
    assert load_settings().ingest.allowlist == ["10.0.0.0/8"]


def test_frozen():
    s = load_settings()
    with pytest.raises(Exception):
        s.kafka.partitions = 2


@pytest.mark.parametrize(
    "yaml_text,needle",
    [
        ("kafka:\n  partitionz: 3\n", "kafka.partitionz: unknown setting (env FABRICFLOW_KAFKA__PARTITIONZ)"),
        ("kafka:\n  partitions: many\n", "kafka.partitions: Input should be a valid integer"),
        ("archive:\n  url: ftp://x\n", "archive.url: Value error, must start with file://, s3:// or memory://"),
        ("nonsense: 1\n", "nonsense: unknown setting"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("kafka: [\n", "not valid YAML"),
    ],
)
def test_bad_config_one_clear_line(tmp_path, yaml_text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml_text)
    with pytest.raises(ConfigError) as ei:
        load_settings(str(f))
    assert needle in str(ei.value)
    assert "\n" not in str(ei.value)
    r = runner.invoke(app, ["config", "check", str(f)])
    assert r.exit_code == 2
    assert needle in r.output
    assert "Traceback" not in r.output


def test_unknown_env_var_rejected(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_KAFKA__BOGUS", "1")
    r = runner.invoke(app, ["config", "dump"])
    assert r.exit_code == 2
    assert "kafka.bogus: unknown setting" in r.output


def test_config_check_ok_and_missing(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("ingest:\n  workers: 2\n")
    r = runner.invoke(app, ["config", "check", str(f)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["config", "check", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "config file not found" in r.output


def test_config_dump_masks_secrets(monkeypatch):
    monkeypatch.setenv("FABRICFLOW_KAFKA__SASL_PASSWORD", "hunter2")
    r = runner.invoke(app, ["config", "dump"])
    assert r.exit_code == 0
    assert "hunter2" not in r.output and "**********" in r.output


def test_configuration_doc_in_sync():
    doc = (REPO / "docs" / "configuration.md").read_text()
    assert doc == configuration_docs(), "docs/configuration.md is stale: run `fabricflow config docs -o docs/configuration.md`"
    for path, env, _default, desc in iter_fields():
        assert env in doc and desc, f"{path} undocumented"


@pytest.mark.parametrize("detectors, expect", [
    ({"incast": {"min_sources": 0}}, "processors.detectors.incast.min_sources: Input should be greater than or equal to 1"),
    ({"incast": {"min_source": 3}}, "processors.detectors.incast.min_source: unknown parameter (known: window_ms,"),
    ({"straggler": {"persist_windows": "three"}}, "processors.detectors.straggler.persist_windows: Input should be a valid integer"),
    ({"incst": {}}, "processors.detectors.incst: unknown detector"),
])
def test_config_check_validates_detector_parameters(tmp_path, detectors, expect):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"processors": {"detectors": detectors}}))
    r = runner.invoke(app, ["config", "check", str(f)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], r.output


def test_detector_parameters_are_typed_and_documented():
    from processors.logic.core import DETECTORS, detector_params
    from processors.logic.params import describe_params

    s = load_settings(None, processors={"detectors": {"incast": {"min_sources": "3", "categories": ["rocev2"]}}})
    params = detector_params(s.processors)
    assert params["incast"].min_sources == 3 and params["incast"].categories == ("rocev2",)
    doc = (REPO / "docs" / "configuration.md").read_text()
    for name, cls in DETECTORS.items():
        for param, _default, desc in describe_params(cls):
            assert desc and f"`processors.detectors.{name}.{param}`" in doc
