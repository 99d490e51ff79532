"""Policy configuration: YAML example, parsing of durations/sizes, validation."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from processors.config_files import load_policy_file
from processors.logic.rules.policy import PolicyConfig, policy_config

REPO = Path(__file__).resolve().parents[5]


def test_example_yaml_loads():
    cfg = load_policy_file(REPO / "scenarios" / "policy.example.yaml")
    assert cfg.segmentation.enabled and cfg.segmentation.allow[0].name == "gpu-collective"
    assert cfg.exfiltration.min_bytes == 1_000_000_000
    assert cfg.exfiltration.window == 600.0
    assert cfg.off_hours_transfer.schedule.timezone == "Europe/Berlin"
    assert cfg.checkpoint.jobs["llm-pretrain-7b"].interval == 1800.0
    s = cfg.alert_settings("segmentation")
    assert s.for_ == 120.0 and s.resolve_after == 900.0
    assert cfg.alert_settings("exfiltration").severity == "critical"
    assert cfg.alert_settings("external_dependency").severity == "info"


def test_yaml_string_and_sizes():
    cfg = policy_config("exfiltration:\n  min_bytes: 2GiB\n  window: 1h\n")
    assert cfg.exfiltration.min_bytes == 2 * 2**30 and cfg.exfiltration.window == 3600.0
    assert policy_config(None) == PolicyConfig()


def test_a_path_is_not_read_by_the_pure_layer(tmp_path):
    """The pure layer reads no file: a path is refused, processors.config_files reads it."""
    p = tmp_path / "policy.yaml"
    p.write_text("exfiltration:\n  min_bytes: 2GiB\n")
    with pytest.raises(TypeError, match="YAML text"):
        policy_config(p)
    assert load_policy_file(p).exfiltration.min_bytes == 2 * 2**30


@pytest.mark.parametrize(
    "data",
    [
        {"bogus": 1},
        {"segmentation": {"allow": [{"src": "gpu", "dst": "storage", "categories": ["nfs"]}]}},
        {"segmentation": {"groups": ["gpu"], "allow": [{"src": "gpu", "dst": "storage"}]}},
        {"segmentation": {"allow": [{"ports": ["80-70"]}]}},
        {"exfiltration": {"authorized_cidrs": ["not-a-cidr"]}},
        {"exfiltration": {"window": "ten minutes"}},
        {"off_hours_transfer": {"schedule": {"timezone": "Mars/Olympus"}}},
        {"off_hours_transfer": {"schedule": {"start": "19:00", "end": "08:00"}}},
        {"off_hours_transfer": {"schedule": {"holidays": ["25.12.2025"]}}},
        {"checkpoint": {"late_factor": 3, "missing_factor": 2}},
        {"alerts": {"no_such_rule": {"for": "1m"}}},
        {"alerts": {"segmentation": {"severity": "fatal"}}},
        {"storage_on_compute": {"compute_interfaces": [{"exporter": "sw1", "ifindexes": [1]}]}},
    ],
)
def test_invalid_config_rejected(data):
    with pytest.raises(ValidationError):
        PolicyConfig.model_validate(data)


def test_config_is_frozen():
    cfg = PolicyConfig()
    with pytest.raises(ValidationError):
        cfg.window = 5
