"""The fabricflow CLI app run against a local archive, and the flow rows of the query-CLI archive fixture."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from sinks.archive.layout import HOUR_MS
from tests.support.archive import T0

runner = CliRunner()

GROUP = {"g1": "gpu", "g2": "gpu", "g3": "gpu", "s1": "storage", "m1": "mgmt", "": "unknown"}

JOB = {"g1": "jobA", "g2": "jobA", "g3": "jobB", "s1": "", "m1": "", "": ""}

IP = {"g1": "10.0.0.1", "g2": "10.0.0.2", "g3": "10.0.0.3", "s1": "10.0.1.1", "m1": "10.0.2.1", "": "198.51.100.7"}

PAIRS = [  # src, dst, category, src_port, dst_port
    ("g1", "g2", "collective", 50001, 4791),
    ("g2", "g1", "collective", 50002, 4791),
    ("g1", "s1", "storage", 50003, 2049),
    ("g3", "s1", "storage", 50004, 2049),
    ("s1", "g1", "storage", 2049, 50003),  # NFS replies
    ("g3", "m1", "mgmt", 50005, 22),
    ("", "g3", "other", 443, 50006),
    ("g1", "s1", "storage", 50007, 8080),  # storage category on a port the policy does not allow
]

HOURS = [0, 1, 25]  # 2026-01-01 00h, 01h; 2026-01-02 01h


def fixture_rows():
    rows = []
    for h in HOURS:
        for i, (s, d, c, sp, dp) in enumerate(PAIRS):
            b = (h + 1) * (i + 1) * 1000
            rows.append({
                "time_end_ms": T0 + h * HOUR_MS + 60_000 * i, "src_node": s, "dst_node": d, "category": c,
                "bytes_est": b, "packets_est": b // 100, "src_group": GROUP[s], "dst_group": GROUP[d],
                "src_job": JOB[s], "dst_job": JOB[d], "src_addr": IP[s], "dst_addr": IP[d],
                "src_port": sp, "dst_port": dp})
    return rows


def ff(root: Path, *args, **env):
    return runner.invoke(app, list(args), env={"FABRICFLOW_ARCHIVE__URL": f"file://{root}", **env})
