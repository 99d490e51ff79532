"""sinks/compare/steps.py: step intervals from marks, their communication and I/O from the timeline's segments,
and the stretched-communication rule (robust, and blind to the timeline's slot rounding)."""

from __future__ import annotations

from query.compare.steps import align, flag_stretched, step_intervals


def test_steps_end_at_their_end_mark_or_the_next_start():
    marks = [{"event": "step_start", "step": 0, "time_ms": 0}, {"event": "step_end", "step": 0, "time_ms": 900},
             {"event": "step_start", "step": 1, "time_ms": 1000}, {"event": "checkpoint_start", "step": -1, "time_ms": 1500},
             {"event": "step_start", "step": 2, "time_ms": 2000}, {"event": "step_end", "step": 7, "time_ms": 9}]
    assert step_intervals(marks) == [{"step": 0, "start_ms": 0, "end_ms": 900}, {"step": 1, "start_ms": 1000, "end_ms": 2000}]


def test_align_shares_out_segments_and_unions_io():
    steps = [{"step": 0, "start_ms": 0, "end_ms": 1000}, {"step": 1, "start_ms": 1000, "end_ms": 2000}]
    segs = [("communication", 500, 1500, 1000), ("dataset_read", 0, 400, 40), ("checkpoint_write", 200, 600, 400),
            ("dataset_read", 1200, 1300, 10)]
    a, b = align(steps, segs)
    assert (a["comm_ms"], a["comm_bytes"], a["io_ms"], a["io_bytes"]) == (500, 500, 600, 40 + 400)
    assert (b["comm_ms"], b["comm_bytes"], b["io_ms"], b["io_bytes"]) == (500, 500, 100, 10)
    assert a["duration_ms"] == 1000


def _rows(comm):
    return [{"step": i, "comm_ms": c} for i, c in enumerate(comm)]


def test_a_stretched_step_is_flagged_and_slot_rounding_is_not():
    rounding = _rows([500, 750, 500, 750, 500, 500, 750, 500] * 3)  # a 600 ms phase on 250 ms slots
    assert not any(r["stretched"] for r in flag_stretched(rounding, 250))
    rows = flag_stretched(_rows([500, 750, 500, 750, 500, 500, 750, 500] * 3 + [2000]), 250)
    assert [r["step"] for r in rows if r["stretched"]] == [24]
    few = flag_stretched(_rows([500, 5000]), 250)
    assert not any(r["stretched"] for r in few)  # too few steps to say what is normal
