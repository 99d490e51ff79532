"""`fabricflow backfill`, `fabricflow mark` and `fabricflow compare` as a user runs them: exit codes, one-line
errors, text and JSON output."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from devtools.simulator.engine import Simulation
from devtools.simulator.exporters.pcap import DistinctSources, write_pcap
from tests.support import scenario_archives as sa
from tests.support.fixtures_path import REPO

runner = CliRunner()


@pytest.fixture(scope="module")
def tuning(scenario_archive):
    return scenario_archive(sa.scenario_doc("tuning"))


def _ff(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_backfill_writes_an_archive_and_sums_up(tmp_path):
    cap = tmp_path / "c.pcap"
    write_pcap(cap, Simulation("healthy", duration_s=20, kinds={"sflow", "netflow9", "ipfix", "marks"}).run(),
               sources=DistinctSources())
    r = _ff("backfill", str(cap), "--inventory", str(REPO / "scenarios" / "healthy.yaml"), "--archive",
            f"file://{tmp_path / 'a'}", "--format", "json", "--quiet")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["flow_records"] > 1000 and out["files_written"] > 5 and out["archive"].endswith("/a")
    assert (tmp_path / "a" / "flows_enriched").is_dir()
    again = _ff("backfill", str(cap), "--archive", f"file://{tmp_path / 'a'}", "--replace", "--quiet")
    assert again.exit_code == 0 and "files" in again.output


def test_backfill_errors_are_one_line(tmp_path):
    r = _ff("backfill", str(tmp_path / "nope.pcap"), "--archive", f"file://{tmp_path / 'a'}", "-q")
    assert r.exit_code == 2 and "no capture file" in r.output
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"garbage!")
    r = _ff("backfill", str(bad), "--archive", f"file://{tmp_path / 'a'}", "-q")
    assert r.exit_code == 2 and "cannot read" in r.output


def test_mark_into_an_archive_then_compare_around_it(tuning, tmp_path):
    import shutil

    archive = tmp_path / "archive"
    shutil.copytree(tuning[0], archive)
    url = f"file://{archive}"
    r = _ff("mark", "pinned NCCL_ALGO=Ring", "--job", "train-a", "--at", "2026-12-01T14:03:20", "--archive", url,
            "--author", "ops@x")
    assert r.exit_code == 0 and "written to" in r.output, r.output
    again = _ff("mark", "pinned NCCL_ALGO=Ring", "--job", "train-a", "--at", "2026-12-01T14:03:20", "--archive", url,
                "--author", "ops@x")
    assert again.output.split()[1] == r.output.split()[1]  # the same change: the same id, the same file
    text = _ff("compare", "--job", "train-a", "--archive", url)
    assert text.exit_code == 0, text.output
    assert "pinned NCCL_ALGO=Ring" in text.output and "no significant change" in text.output
    assert "improved" not in text.output and "WORSE" not in text.output
    js = json.loads(_ff("compare", "--job", "train-b", "--archive", url, "--format", "json").output)
    assert {r["verdict"] for r in js["metrics"] if r["entity"] == "gpu07" and r["metric"] == "ecn_ce_share"} == {"improved"}


@pytest.mark.parametrize("args,msg", [
    (["compare"], "exactly one of"),
    (["compare", "--job", "a", "--node", "b"], "exactly one of"),
    (["compare", "--job", "train-a", "--before", "x..y", "--after", "1..2"], "--before"),
    (["compare", "--job", "train-a", "--before", "1000..2000"], "go together"),
    (["compare", "--job", "train-a", "--window", "15s"], "multiple of"),
    (["compare", "--link", "tor1"], "SWITCH/IFINDEX"),
    (["mark", "", "--archive", "file:///tmp/x"], "needs a text"),
    (["mark", "x", "--link", "tor1", "--archive", "file:///tmp/x"], "SWITCH/IFINDEX"),
    (["mark", "x", "--at", "whenever", "--archive", "file:///tmp/x"], "--at"),
])
def test_user_errors_exit_2_with_one_line(tuning, args, msg):
    r = _ff(*args, *(["--archive", f"file://{tuning[0]}"] if args[0] == "compare" else []))
    assert r.exit_code == 2 and msg in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
