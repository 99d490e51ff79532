"""The shipped Prometheus rules and configs: promtool checks and unit tests, and their coverage.

promtool comes with Debian's `prometheus` package (scripts/install-system-deps.sh).
Without it these tests skip, unless FABRICFLOW_REQUIRE_BROKER=1 (make test), then they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.prom import promtool_or_skip
from tests.support.promql_sources import REPO, rule_files, rules

DEPLOY = REPO / "deploy" / "prometheus"
UNIT_TESTS = sorted((REPO / "tests" / "prometheus").glob("*.test.yml"))
CONFIGS = [DEPLOY / "prometheus.yml", DEPLOY / "prometheus.compose.yml"]


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool_or_skip(), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_promtool_check_rules():
    r = _promtool("check", "rules", *map(str, rule_files()))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_promtool_check_config(config):
    r = _promtool("check", "config", str(config))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("test_file", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file):
    r = _promtool("test", "rules", str(test_file))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_test_fails_on_a_wrong_expectation(tmp_path):
    """The promtool harness can fail: a test expecting the storage alert with no traffic does."""
    case = {
        "rule_files": [str(p) for p in rule_files(include_example=False)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [
            {"series": 'node_interface_bandwidth_bytes{node="stor01",direction="rx"}', "values": "1e9x30"}],
            "alert_rule_test": [{"eval_time": "20m", "alertname": "FabricStorageTrafficHigh",
                                 "exp_alerts": [{"exp_labels": {"severity": "warning", "dst_node": "stor01"}}]}]}],
    }
    f = tmp_path / "wrong.test.yml"
    f.write_text(yaml.safe_dump(case))
    assert _promtool("test", "rules", str(f)).returncode != 0


def _alert_cases() -> dict[str, dict[str, list]]:
    """alertname -> {"firing": [test names], "quiet": [test names]} over tests/prometheus/*.test.yml."""
    seen: dict[str, dict[str, list]] = {}
    for f in UNIT_TESTS:
        for case in yaml.safe_load(f.read_text())["tests"]:
            for t in case.get("alert_rule_test", []):
                kind = "firing" if t.get("exp_alerts") else "quiet"
                seen.setdefault(t["alertname"], {"firing": [], "quiet": []})[kind].append((f.name, case, t))
    return seen


ALERTS = {r["alert"]: r for _f, r in rules() if "alert" in r}


def test_every_alert_is_tested_firing_and_not_firing():
    cases = _alert_cases()
    for name in ALERTS:
        assert cases.get(name, {}).get("firing"), f"{name}: no promtool test where it fires"
        assert cases.get(name, {}).get("quiet"), f"{name}: no promtool test where it stays quiet"
    assert set(cases) <= set(ALERTS), f"tests name unknown alerts: {set(cases) - set(ALERTS)}"


def _rule_files_of(test_file_name: str) -> list[str]:
    return yaml.safe_load((REPO / "tests" / "prometheus" / test_file_name).read_text())["rule_files"]


def test_checkpoint_silence_is_tested_for_every_alert_that_has_one():
    """Alerts with a checkpoint `unless` have a quiet case while a window is open (series or schedule)."""
    cases = _alert_cases()
    silenced = [n for n, r in ALERTS.items() if "checkpoint_quiet" in r["expr"]]
    expected = {"FabricStorageTrafficHigh", "FabricStraggler", "FabricIncastRepeated", "FabricIncastSustained"}
    assert expected <= set(silenced)
    for name in silenced:
        quiet_in_window = [
            case["name"] for fname, case, _t in cases[name]["quiet"]
            if any("fabricflow_checkpoint_window" in s["series"] for s in case.get("input_series", []))
            or any("checkpoint-schedule" in rf for rf in _rule_files_of(fname))
        ]
        assert quiet_in_window, f"{name}: no test shows it quiet during a checkpoint window"


def test_alerts_hold_for_a_duration_and_explain_themselves():
    """The notes' rule: nothing pages on one sample; every alert says what and where."""
    for name, r in ALERTS.items():
        assert r.get("for") and r["for"] not in ("0", "0s", "0m"), f"{name}: no `for:`"
        assert {"summary", "description"} <= set(r.get("annotations", {})), name
        sev = r.get("labels", {}).get("severity") or ("severity" in r["expr"] and "by (rule, severity)" in r["expr"])
        assert sev, f"{name}: no severity label (own or from the series)"


def test_compose_config_scrapes_the_same_jobs_and_ports():
    local = yaml.safe_load(CONFIGS[0].read_text())
    compose = yaml.safe_load(CONFIGS[1].read_text())

    def ports(cfg):
        out = {}
        for job in cfg["scrape_configs"]:
            addrs = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
            addrs += [f"x:{sd['port']}" for sd in job.get("dns_sd_configs", [])]
            out[job["job_name"]] = ({a.rsplit(":", 1)[1] for a in addrs}, job.get("honor_labels", False))
        return out
    assert ports(local) == ports(compose)
    assert ports(local)["fabricflow-metrics"] == ({"9183"}, True)
    assert {p for ps, _h in ports(local).values() for p in ps} == {"9180", "9181", "9182", "9183"}
    assert local["rule_files"] == compose["rule_files"] == ["rules/*.yml"]


def test_checkpoint_example_is_not_loaded_by_default():
    """Copying it is a decision; a fresh install silences nothing."""
    assert not (DEPLOY / "rules" / "checkpoint-schedule.yml").exists()
    assert Path(DEPLOY / "checkpoint-schedule.example.yml").exists()


def test_monitoring_doc_lists_every_alert_and_dashboard():
    doc = (REPO / "docs" / "monitoring.md").read_text()
    for name in ALERTS:
        assert f"| `{name}` |" in doc, f"docs/monitoring.md does not describe {name}"
    for p in (REPO / "deploy" / "grafana" / "dashboards").glob("*.json"):
        assert f"`{p.stem}`" in doc, p.stem


def test_missing_tools_skip_or_fail(monkeypatch):
    """Skip without promtool/prometheus, except under FABRICFLOW_REQUIRE_BROKER=1 (make test): fail."""
    import tests.support.prom as prom

    monkeypatch.setattr(prom, "find_tool", lambda name: None)
    monkeypatch.setattr(prom, "REQUIRE", False)
    with pytest.raises(pytest.skip.Exception):
        prom.promtool_or_skip()
    monkeypatch.setattr(prom, "REQUIRE", True)
    with pytest.raises(pytest.fail.Exception):
        prom.prometheus_or_skip()
