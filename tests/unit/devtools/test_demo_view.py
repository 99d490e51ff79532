"""The demo's terminal screen at any size: the finest matrix level whose labels fit whole, named in the title;
never a label cut to an ellipsis (the old 80-column matrix read ``src…g…g…g…``)."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from devtools.demo_view import LEVELS, Grid, MatrixPanel, Screen, plan_matrix, rate
from devtools.detections import Detection, MatrixView, readable_speeds

T = 1_764_921_600_000
NODES = [f"gpu{i:02d}" for i in range(1, 17)] + ["lb01", "stor01", "mstore01", "mgmt01", "unknown"]
GROUP = {**{n: "gpu" for n in NODES[:16]}, "lb01": "frontend", "stor01": "storage", "mstore01": "model-store",
         "mgmt01": "mgmt", "unknown": "external-authorized"}
RACK = {**{n: "r1" if i < 8 else "r2" for i, n in enumerate(NODES[:16])}, "lb01": "r3", "stor01": "r3",
        "mstore01": "r3", "mgmt01": "r3", "unknown": "unknown"}
STATUS = [["fabricflow demo | mixed at 5x | 16 detections | 6073 output messages | 10s left | Ctrl-C to stop",
           "16 detections | 10s left"],
          ["console http://127.0.0.1:8090/   metrics http://127.0.0.1:9183/metrics", "console http://127.0.0.1:8090/"]]
EVENTS = [Detection("straggler", T, "gpu03", "gpu03 in job train-a sends 36% of its peers' median per link"),
          Detection("link_downgrade", T + 1000, "tor2/if4", "tor2/if4 (gpu12): link speed 25.0 Gb/s -> 1.0 Gb/s",
                    "critical"),
          Detection("incast", T + 2000, "stor01", "5 sources -> stor01 at 24.1 Gb/s = 96% of 25.0 Gb/s", "critical")]


def demo_like_view(nodes=NODES, group=GROUP, rack=RACK) -> MatrixView:
    """A ring all-reduce over the GPU nodes, storage reads, frontend and outside traffic, at every level."""
    v = MatrixView()
    pairs = [(nodes[i], nodes[(i + 1) % 16], 10**9) for i in range(16)]
    pairs += [(nodes[17], n, 10**8) for n in nodes[:16]]
    pairs += [(nodes[18], nodes[20], 5 * 10**9), (nodes[19], nodes[0], 10**6), (nodes[15], nodes[16], 10**8)]
    for ws in (T, T + 10_000):
        for level, of in (("node", lambda x: x), ("group", group.get), ("rack", rack.get)):
            for s, d, b in pairs:
                v.add({"level": level, "window_start_ms": ws, "window_end_ms": ws + 10_000, "src": of(s),
                       "dst": of(d), "bytes_est": b})
    return v


def shown(view: MatrixView, width: int, height: int, events=EVENTS) -> str:
    c = Console(width=width, height=height, record=True, color_system=None)
    c.print(Screen(view, events, STATUS))
    return c.export_text()


def labels_of(view: MatrixView, level: str) -> set[str]:
    return {x for pair in view.latest(level)[1] for x in pair}


SIZES = [(w, h) for w in (60, 80, 120, 200) for h in (24, 50)]


@pytest.mark.parametrize("width,height", SIZES)
def test_every_label_shown_is_whole_and_the_title_names_the_level(width, height):
    view = demo_like_view()
    text = shown(view, width, height)
    assert "…" not in text and "..." not in text
    lines = text.splitlines()
    assert len(lines) <= height and all(len(x) <= width for x in lines)
    m = re.search(r"traffic matrix, (node|group|rack) level|(node|group|rack) level|top (node|group|rack) pairs", text)
    assert m, text
    level = next(g for g in m.groups() if g)
    if "pairs" in m.group(0):  # the ranked list: its pairs whole
        words = set(re.findall(r"[\w-]+", text))
        top = sorted(view.latest(level)[1].items(), key=lambda kv: -kv[1])[:2]
        assert all(s in words and d in words for (s, d), _ in top)
    else:  # every label of the level shown whole, as a word of its own
        words = set(re.findall(r"[\w-]+", text))
        assert labels_of(view, level) <= words, (level, labels_of(view, level) - words)


def test_the_finest_level_that_fits_is_chosen():
    view = demo_like_view()
    assert "traffic matrix, node level" in shown(view, 200, 50)  # 21 nodes, named columns, rates
    assert re.search(r"\bgroup level\b", shown(view, 80, 24))  # 21 nodes need 22 rows: the 7 groups do
    assert "top node pairs" in shown(view, 40, 12)  # not even the 4 racks fit: a ranked list
    g = plan_matrix(view, 196, 40)
    assert (g.level, g.numbered, g.values) == ("node", False, True)
    g = plan_matrix(view, 116, 30)  # named columns are 140 wide: numbered ones, row "3 gpu03" is column 3
    assert (g.level, g.numbered) == ("node", True)
    assert plan_matrix(view, 40, 5).level == "rack"  # header + 4 racks; the 7 groups need 8 rows
    assert plan_matrix(view, 40, 4) is None
    assert plan_matrix(view, 10, 40) is None


def test_numbered_columns_say_how_to_read_them():
    view = demo_like_view()
    text = shown(view, 120, 50)
    assert "node level" in text and "column n = row n" in text
    assert re.search(r"^│\s+3 gpu03\b", text, re.M)


def test_cells_carry_the_estimated_rate_and_a_pair_not_seen_a_dot():
    view = demo_like_view()
    c = Console(width=200, height=40, record=True, color_system=None)
    g = plan_matrix(view, 196, 38)
    c.print(MatrixPanel(view, g))
    row = next(x for x in c.export_text().splitlines() if re.match(r"│ gpu01\b", x))
    cells = row.strip("│ ").split()[1:]
    assert cells[1] == "800M"  # gpu01 -> gpu02: 1 GB in a 10 s window
    assert cells[0] == "."


def test_long_labels_fall_back_without_ellipsis():
    long = [f"gpu-node-{i:03d}.rack-a.cluster.example" for i in range(16)] + [
        "loadbalancer-frontend-01", "storage-server-01", "model-store-01", "management-01", "unknown"]
    view = demo_like_view(long, {n: GROUP[s] for n, s in zip(long, NODES)}, {n: RACK[s] for n, s in zip(long, NODES)})
    for w, h in SIZES:
        text = shown(view, w, h)
        assert "…" not in text, (w, h)
        assert re.search(r"(node|group|rack) level|top (node|group|rack) pairs", text)


def test_waiting_and_no_detections():
    text = shown(MatrixView(), 80, 24, events=[])
    assert "waiting for the first traffic-matrix window" in text and "no detections yet" in text


def test_detections_show_the_newest_that_fit_and_say_how_many_are_hidden():
    many = [Detection("straggler", T + i * 1000, f"gpu{i:02d}", f"event number {i} " + "x" * 60) for i in range(30)]
    text = shown(demo_like_view(), 80, 24, events=many)
    assert "event number 29" in text  # the newest is on screen (the old panel cut it off at the bottom)
    assert "event number 0 " not in text
    hidden = int(re.search(r"(\d+) earlier not shown", text).group(1))
    assert 0 < hidden < 30 and f"event number {hidden} " in text and f"event number {hidden - 1} " not in text


def test_status_lines_take_the_longest_variant_that_fits():
    assert "Ctrl-C to stop" in shown(demo_like_view(), 120, 30).splitlines()[0]
    assert shown(demo_like_view(), 60, 30).splitlines()[0].rstrip() == "16 detections | 10s left"


def test_rate_is_at_most_four_characters():
    for v, want in ((0, "0"), (999.4, "999"), (999.6, "1.0k"), (8e8, "800M"), (1.23e9, "1.2G"), (25e9, "25G"),
                    (999.6e9, "1.0T")):
        assert rate(v) == want
    assert all(len(rate(10 ** (k / 3))) <= 4 for k in range(0, 40))


def test_grid_width_counts_every_column():
    g = Grid("group", ("gpu", "storage"), numbered=False, values=True)
    assert g.width == len("src\\dst") + (1 + 4) + (1 + 7) and g.height == 3
    g = Grid("node", tuple(f"n{i}" for i in range(12)), numbered=True, values=False)
    assert g.row_label() == len("12 n11") + 1 and g.columns() == [2] * 12  # the corner "src\dst" is wider


def test_matrix_view_keeps_every_level():
    view = demo_like_view()
    assert {lvl for lvl in LEVELS if view.latest(lvl)[0] == T + 10_000} == set(LEVELS)
    assert labels_of(view, "rack") == {"r1", "r2", "r3", "unknown"}
    assert view.top_talkers(1) == [("mstore01", "unknown", 10**10)]  # summed over both windows


def test_link_speeds_read_in_gbps():
    assert readable_speeds("if_speed 25000000000 -> 1000000000 bps") == "link speed 25.0 Gb/s -> 1.0 Gb/s"
    assert readable_speeds("if_speed 1000000000 bps below the configured 25000000000 bps at the first sample") == \
        "link speed 1.0 Gb/s below the configured 25.0 Gb/s at the first sample"
    assert readable_speeds("41.3 errors/s") == "41.3 errors/s"


def test_closing_lines_name_a_command_that_runs_from_here(monkeypatch, tmp_path):
    """``make demo`` runs .venv/bin/fabricflow, which a fresh shell does not find as ``fabricflow``."""
    import os
    import sys
    from pathlib import Path

    from devtools.demo import closing_lines
    from query.views import EXAMPLE_SQL

    mine = Path(sys.executable).parent / "fabricflow"
    monkeypatch.chdir(tmp_path)
    state = tmp_path / ".fabricflow" / "demo"
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    lines = closing_lines(EVENTS, 12.0, state / "archive", state / "pipeline.yaml", 0, 600)
    tries = [x.strip() for x in lines if x.startswith("  ") and "--config" in x]
    assert len(tries) == 4
    if mine.exists():
        assert all(Path(x.split()[0]).resolve() == mine.resolve() for x in tries)
    assert all(" --config .fabricflow/demo/pipeline.yaml " in x for x in tries)  # relative: below the cwd
    assert f'query sql "{EXAMPLE_SQL}"' in tries[2]
    assert "archive (hourly Parquet): .fabricflow/demo/archive" in lines
    assert "summary: 3 detections: incast=1, link_downgrade=1, straggler=1" in lines
    if mine.exists():
        monkeypatch.setenv("PATH", f"{mine.parent}{os.pathsep}/usr/bin")
        tries = [x.strip() for x in closing_lines([], None, state / "a", state / "p.yaml", 0, 1) if "--config" in x]
        assert all(x.startswith("fabricflow --config ") for x in tries)


def test_closing_lines_fit_the_terminal_and_stay_one_shell_command_each(monkeypatch, tmp_path):
    from pathlib import Path

    from devtools.demo import closing_lines

    monkeypatch.chdir(tmp_path)
    # as `make demo` shows it from the checkout; the test must not depend on where the checkout lives
    monkeypatch.setattr("devtools.demo._command", lambda: ".venv/bin/fabricflow")
    state = Path(".fabricflow/demo")
    kinds = ["discard_burst", "error_burst", "exfiltration", "incast", "lb_skew", "link_downgrade", "storage_bound",
             "straggler", "unregistered_host"]
    args = ([Detection(k, T, "x", "y") for k in kinds], 12.0, state / "archive", state / "pipeline.yaml", 0, 600)
    wide, narrow = closing_lines(*args), closing_lines(*args, width=80)
    for line in "\n".join(narrow).splitlines():
        assert len(line) <= 80 or line.strip().startswith('"SELECT'), line  # only the quoted SQL may not fit
    joined = [re.sub(r" \\\n +", " ", x) for x in narrow]  # the shell's view of a continued command
    assert [x for x in joined if "--config" in x] == [x for x in wide if "--config" in x]
    assert re.sub(r"\n +", " ", narrow[1]) == wide[1] and "\n" in narrow[1]  # the summary, wrapped
