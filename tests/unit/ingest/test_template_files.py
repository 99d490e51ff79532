"""Templates per ingest worker: own file, saved periodically, every worker's file restored at start."""

import json

from fabricflow.settings import load_settings
from ingest.pcapread import read_udp
from ingest.service import IngestWorker
from ingest.template_files import restore_templates, template_files, worker_template_path
from ingest.decode.templates import TemplateCache
from tests.support.fixtures_path import SHARED_FIXTURES
from tests.support.ingest_sinks import FakeSink


def _payloads(name):
    return [pkt.payload for pkt in read_udp(str(SHARED_FIXTURES / "exports" / name))]


def _worker(tmp_path, index, workers, **ingest):
    s = load_settings(None, ingest={"template_path": str(tmp_path / "templates.json"), "workers": workers,
                                    "metrics_port": 0, **ingest})
    return IngestWorker(s, [], index=index, sink=FakeSink())


def test_worker_paths():
    assert worker_template_path("/v/t.json", 0, 1) == "/v/t.json"
    assert worker_template_path("/v/t.json", 3, 4) == "/v/t.w3.json"


def test_each_worker_writes_its_own_file_periodically_and_all_are_restored(tmp_path):
    w0, w1 = _worker(tmp_path, 0, 2, template_save_s=5), _worker(tmp_path, 1, 2, template_save_s=5)
    for d in _payloads("softflowd_v9.pcap"):
        w0.pipeline.handle(d, "192.0.2.7", 1_700_000_000_000)
    for d in _payloads("softflowd_v9.pcap"):
        w1.pipeline.handle(d, "192.0.2.8", 1_700_000_000_000)
    t0 = w0._templates_saved
    assert not w0.save_templates_if_due(t0 + 1)  # not due yet
    assert w0.save_templates_if_due(t0 + 6) and w1.save_templates_if_due(t0 + 6)  # no shutdown needed
    files = template_files(str(tmp_path / "templates.json"))
    assert [f.rsplit("/", 1)[1] for f in sorted(files)] == ["templates.w0.json", "templates.w1.json"]
    exporters = [{t["exporter"] for t in json.load(open(f))["templates"]} for f in sorted(files)]
    assert exporters == [{"192.0.2.7"}, {"192.0.2.8"}]  # nobody overwrote the other
    # a restart (after a crash: no close()) with the workers swapped still knows both exporters' templates
    again = _worker(tmp_path, 1, 2)
    keys = {k[0] for k in again.pipeline.templates._templates}
    assert keys == {"192.0.2.7", "192.0.2.8"}
    assert again.pipeline.templates.path.endswith("templates.w1.json")


def test_a_corrupt_file_is_skipped(tmp_path, caplog):
    (tmp_path / "templates.w0.json").write_text("{not json")
    cache = TemplateCache()
    assert restore_templates(cache, str(tmp_path / "templates.json")) == 0
    assert "not loaded" in caplog.text
