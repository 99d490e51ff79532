"""`fabricflow replay` from a local archive: stdout JSON lines, reports, --set, one-line errors (exit 2)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from fabricflow.settings import load_settings
from replay import archive_source, canonical, core_factory_from, output_records, replay_batches
from sinks.archive.layout import HOUR_MS
from tests.support import replay as h
from tests.support.replay_archive import write_archive
from tests.support.matrix import record_cells, summed
from tests.support.replay_cli import make_app

START = h.T0 + HOUR_MS - 20_000
FRM, TO = str(START - 1000), str(START + 60_000)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("replaycli")
    flows = h.traffic(seconds=60, start=START, incast_at=(20, 23))
    write_archive(d / "archive", h.messages(flows, partitions=2), h.counters(seconds=60, start=START))
    inv = d / "inventory.yaml"
    import yaml

    inv.write_text(yaml.safe_dump(h.inventory_dict()))
    return d


def run(env, *args):
    args = ["replay", "--archive", f"file://{env / 'archive'}", "--inventory", str(env / "inventory.yaml"), *args]
    return CliRunner().invoke(make_app(), args, catch_exceptions=False)


def direct(env, sets=()):
    from replay import parse_set

    s = load_settings(None)
    src = archive_source(None, str(env / "archive"), int(FRM), int(TO))
    fac = core_factory_from(s.processors, parse_set(list(sets)), inventory=str(env / "inventory.yaml"))
    return replay_batches(src.flow_batches(), src.counter_batches(), fac, s.kafka.partitions)


def test_stdout_json_lines_match_the_library(env):
    r = run(env, "--from", FRM, "--to", TO, "--quiet")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    expect = output_records(direct(env))
    assert lines == json.loads(json.dumps(expect))
    assert {x["kind"] for x in lines} >= {"matrix", "incast", "straggler", "link"}


def test_json_and_parquet_reports(env, tmp_path):
    rj = run(env, "--from", FRM, "--to", TO, "--report", str(tmp_path / "r.json"))
    assert rj.exit_code == 0, rj.output
    assert rj.stdout == ""  # a report replaces stdout
    assert "replay:" in rj.stderr and "outputs" in rj.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["replay"]["source"] == "archive" and doc["replay"]["flow_records"] > 0
    rp = run(env, "--from", FRM, "--to", TO, "--report", str(tmp_path / "r.parquet"), "-q")
    assert rp.exit_code == 0, rp.output
    t = pq.read_table(tmp_path / "r.parquet")
    assert t.column_names == ["seq", "kind", "key", "value"]
    from_parquet = [{"kind": k, "key": key, "value": json.loads(v)}
                    for k, key, v in zip(t["kind"].to_pylist(), t["key"].to_pylist(), t["value"].to_pylist())]
    assert from_parquet == doc["outputs"]
    assert b"fabricflow.replay" in t.schema.metadata


def test_set_overrides_change_outputs(env):
    base = run(env, "--from", FRM, "--to", TO, "-q")
    strict = run(env, "--from", FRM, "--to", TO, "-q", "--set", "incast.min_sources=8", "--set", "incast.z=2")
    assert strict.exit_code == 0, strict.output
    n_base = sum(json.loads(x)["kind"] == "incast" for x in base.stdout.splitlines())
    n_strict = sum(json.loads(x)["kind"] == "incast" for x in strict.stdout.splitlines())
    assert n_base > 0 and n_strict == 0
    assert canonical(direct(env, ["incast.min_sources=8"])) == sorted(
        json.dumps(json.loads(x), sort_keys=True) for x in strict.stdout.splitlines())


def test_partitions_option_keeps_results(env):
    a = run(env, "--from", FRM, "--to", TO, "-q", "--partitions", "1")
    b = run(env, "--from", FRM, "--to", TO, "-q", "--partitions", "5")

    def unsharded(out):  # matrix windows are per shard (key and value name it); their cells summed must match
        docs = [json.loads(x) for x in out.splitlines()]
        cells = summed(c for d in docs if d["kind"] == "matrix" for c in record_cells(d["value"]))
        return sorted(json.dumps(d, sort_keys=True) for d in docs if d["kind"] != "matrix"), cells

    assert unsharded(a.stdout) == unsharded(b.stdout)
    assert unsharded(a.stdout)[1]
    assert any(json.loads(x)["kind"] == "matrix" and not json.loads(x)["key"].endswith("|0") for x in b.stdout.splitlines())


@pytest.mark.parametrize("args, needle", [
    (["--from", TO, "--to", FRM], "empty time range"),
    (["--from", str(h.T0 + 10 * HOUR_MS), "--to", str(h.T0 + 11 * HOUR_MS)], "no raw data between"),
    (["--from", FRM], "--from and --to"),
    (["--from", FRM, "--to", TO, "--set", "incast.bogus=1"], "bogus"),
    (["--from", FRM, "--to", TO, "--set", "incast"], "DETECTOR.PARAMETER=VALUE"),
    (["--from", FRM, "--to", TO, "--report", "out.csv"], ".json or .parquet"),
    (["--from", FRM, "--to", TO, "--offsets", "0:1-5"], "--source kafka"),
    (["--from", FRM, "--to", TO, "--source", "tape"], "archive or kafka"),
    (["--from", FRM, "--to", TO, "--partitions", "0"], "must be >= 1"),
    (["--from", FRM, "--to", TO, "--policy", "/nonexistent/policy.yaml"], "policy file"),
])
def test_user_errors_exit_2_with_one_line(env, args, needle):
    r = run(env, *args)
    assert r.exit_code == 2, r.output
    msg = r.stderr.strip()
    assert needle in msg and len(msg.splitlines()) == 1 and msg.startswith("fabricflow: ")


def test_missing_archive_exits_2(env, tmp_path):
    r = CliRunner().invoke(make_app(), ["replay", "--archive", f"file://{tmp_path / 'none'}", "--from", FRM,
                                        "--to", TO], catch_exceptions=False)
    assert r.exit_code == 2
    assert "archive missing" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_archive_url_exits_2(env):
    r = CliRunner().invoke(make_app(), ["replay", "--archive", "ftp://x", "--from", FRM, "--to", TO])
    assert r.exit_code == 2 and "archive.url" in r.stderr and len(r.stderr.strip().splitlines()) == 1
