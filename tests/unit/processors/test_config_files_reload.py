"""Inventory, policy and category rules: checked at start (one line), re-read while running, last good kept."""

import os
import shutil
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from fabricflow.settings import load_settings
from processors.worker import Processors
from processors.logic.enrich.categories import CATEGORY_CODE
from processors.config_files import ConfigFileError, check_config_files
from tests.support.synth import training_batches
from tests.support.worker import NoBrokerProducer

REPO = Path(__file__).resolve().parents[3]
INVENTORY = REPO / "tests" / "data" / "cluster_inventory.yaml"
POLICY = REPO / "deploy" / "fabricflow" / "policy.yaml"


def _proc(tmp_path, **processors):
    s = load_settings(
        None,
        kafka={"bootstrap_servers": "127.0.0.1:9", "partitions": 2},
        processors={"datadir": str(tmp_path / "d"), "metrics_port": 0, "web_port": 0, "inventory_reload_s": 0, **processors},
    )
    with mock.patch("processors.worker.publish.Producer", NoBrokerProducer):
        p = Processors(s)
    p.publisher.produce = lambda *a, **kw: None
    p.publisher.poll = lambda: None
    p.state = {}
    return p


def _metric(p, **labels):
    return p.metrics.registry.get_sample_value("fabricflow_processors_config_reloads_total", labels) or 0


def _touch_write(path: Path, text: str) -> None:
    st = path.stat() if path.exists() else None
    path.write_text(text)
    if st is not None:  # a different mtime even within the file system's timestamp granularity
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_bad_policy_fails_at_start_with_one_line(tmp_path):
    bad = tmp_path / "policy.yaml"
    bad.write_text("window: 60s\nsegmentation:\n  enabled: maybe\n")
    with pytest.raises(ConfigFileError) as e:
        _proc(tmp_path, inventory=str(INVENTORY), policy=str(bad))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(bad)) and "line 3 (segmentation.enabled)" in msg


def test_missing_policy_fails_at_start(tmp_path):
    with pytest.raises(ConfigFileError, match=r"nope.yaml: no such file \(setting processors.policy\)"):
        _proc(tmp_path, policy=str(tmp_path / "nope.yaml"))


def test_check_config_files_lists_every_bad_file(tmp_path):
    (tmp_path / "c.yaml").write_text("storage_ports: [tcp/70000]\n")
    s = load_settings(None, processors={"inventory": str(tmp_path / "inv.yaml"), "policy": str(POLICY),
                                        "categories": str(tmp_path / "c.yaml")})
    problems = check_config_files(s.processors)
    assert len(problems) == 2
    assert problems[0].startswith("processors.inventory: ") and "no such file" in problems[0]
    assert problems[1].startswith("processors.categories: ") and "line 1 (storage_ports.0)" in problems[1]


def _categories_of(p, port: int) -> set[str]:
    _e, batch = training_batches(seconds=1)[0]
    b = batch.copy()
    b["ip_protocol"] = 6
    b["dst_port"] = port
    b["src_port"] = 40000
    enriched = p.prepare.core.enrich(b)
    return set(enriched["category"].tolist())


def test_categories_reload_and_bad_reload_keeps_last_good(tmp_path):
    cats = tmp_path / "categories.yaml"
    cats.write_text("storage_ports: [tcp/2049]\n")
    p = _proc(tmp_path, inventory=str(INVENTORY), categories=str(cats))
    assert "storage" not in _categories_of(p, 1191)
    _touch_write(cats, "storage_ports: [tcp/2049, tcp/1191]  # GPFS\n")
    p.on_tick(1_000)
    assert _categories_of(p, 1191) == {"storage"}
    assert _metric(p, file="categories", result="ok") == 1
    _touch_write(cats, "storage_ports: [tcp/2049, nonsense]\n")
    p.on_tick(2_000)
    assert _categories_of(p, 1191) == {"storage"}, "the last good rules stay in use"
    assert _metric(p, file="categories", result="error") == 1
    assert "line 1" in p.watchers["categories"].last_error


def test_policy_reload_reaches_every_core_and_bad_reload_is_counted(tmp_path):
    pol = tmp_path / "policy.yaml"
    shutil.copy(POLICY, pol)
    p = _proc(tmp_path, inventory=str(INVENTORY), policy=str(pol))
    core = p.core_for(0)
    assert core.policy.config.unregistered_host.enabled
    _touch_write(pol, pol.read_text().replace("unregistered_host:\n  enabled: true", "unregistered_host:\n  enabled: false"))
    p.on_tick(1_000)
    assert not p.core_for(0).policy.config.unregistered_host.enabled
    assert not p.core_for(1).policy.config.unregistered_host.enabled  # a core created after the reload too
    _touch_write(pol, "window: -5\n")
    p.on_tick(2_000)
    assert not p.core_for(0).policy.config.unregistered_host.enabled
    assert _metric(p, file="policy", result="error") == 1 and _metric(p, file="policy", result="ok") == 1


def test_inventory_reload_still_counted_under_its_old_metric(tmp_path):
    inv = tmp_path / "inv.yaml"
    shutil.copy(INVENTORY, inv)
    p = _proc(tmp_path, inventory=str(inv))
    _touch_write(inv, "nodes: [\n")
    p.on_tick(1_000)
    assert p.metrics.registry.get_sample_value("fabricflow_processors_inventory_reloads_total", {"result": "error"}) == 1
    assert _metric(p, file="inventory", result="error") == 1
    assert CATEGORY_CODE  # categories module imported alongside
    assert np is not None


def test_one_file_watcher_for_inventory_and_config_files(tmp_path):
    """Inventory and configuration files share one watcher: reload on change, last good value on a bad one
    (counted once per version), the first load raising."""
    import os

    import pytest

    from processors.config_files import ConfigFileWatcher
    from fabricflow.filewatch import FileWatcher
    from processors.config_files import InventoryWatcher

    assert issubclass(InventoryWatcher, FileWatcher) and issubclass(ConfigFileWatcher, FileWatcher)
    p = tmp_path / "n.txt"

    def write(text, mtime):
        p.write_text(text)
        os.utime(p, (mtime, mtime))

    write("1", 1_000_000)
    w = FileWatcher(p, lambda path: int(path.read_text()))
    assert w.value == 1 and not w.maybe_reload(1.0)
    write("x", 1_000_010)
    assert not w.maybe_reload(2.0) and w.value == 1 and w.errors_total == 1 and "invalid literal" in w.last_error
    assert not w.maybe_reload(3.0) and w.errors_total == 1
    write("2", 1_000_020)
    assert w.maybe_reload(4.0) and w.value == 2 and w.last_error is None and w.reloads_total == 1
    write("y", 1_000_030)
    with pytest.raises(ValueError):
        FileWatcher(p, lambda path: int(path.read_text()))
