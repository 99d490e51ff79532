"""The demo's closing summary counts detections apart from the diagnosis lines that announce verdicts."""

from __future__ import annotations

from pathlib import Path

from devtools.demo import closing_lines
from devtools.detections import Detection


def test_diagnosis_lines_are_not_counted_as_detections():
    dets = [Detection("incast", 0, "gpu05", "s"), Detection("diagnosis", 1, "gpu05", "s", "info"),
            Detection("straggler", 2, "gpu03", "s")]
    lines = closing_lines(dets, 3.0, Path("a"), Path("c.yaml"), 0, 600)
    assert lines[1] == ("summary: 2 detections: incast=1, straggler=1; 1 diagnosis line (the console's events view "
                        "has every diagnosis)")
    assert closing_lines(dets[:1], 3.0, Path("a"), Path("c.yaml"), 0, 600)[1] == "summary: 1 detections: incast=1"
