"""schemas/marks.py: mark lines -> step_mark / change_mark records, every refusal with its reason."""

from __future__ import annotations

import json

import pytest

from schemas import codec
from schemas.marks import (MAX_LINE_BYTES, MAX_LINES, MarkError, change_key, change_record, looks_like_mark,
                           parse_lines, parse_mark)

NOW = 1_764_600_000_000


def test_a_step_line_becomes_a_step_mark_that_encodes():
    kind, rec = parse_mark(b'{"job":"train-a","event":"step_start","step":12,"node":"gpu01","rank":0}', NOW, "udp:10.0.0.1")
    assert kind == "step"
    assert rec == {"time_ms": NOW, "received_ms": NOW, "job": "train-a", "event": "step_start", "step": 12,
                   "phase": "", "node": "gpu01", "rank": 0, "source": "udp:10.0.0.1"}
    assert codec.decode_record(codec.encode_record("step_mark", rec), expect="step_mark") == rec


def test_the_senders_time_is_the_event_time():
    _k, rec = parse_mark(json.dumps({"job": "j", "event": "step_end", "time": (NOW + 1234.4) / 1000}), NOW, "http")
    assert rec["time_ms"] == NOW + 1234 and rec["received_ms"] == NOW
    _k, rec = parse_mark(json.dumps({"job": "j", "event": "step_end", "time_ms": NOW - 5}), NOW, "http")
    assert rec["time_ms"] == NOW - 5


def test_a_change_line_becomes_a_change_mark_with_a_stable_id():
    line = json.dumps({"kind": "change", "text": " raised NCCL_IB_TIMEOUT to 22 ", "job": "train-a"})
    kind, rec = parse_mark(line, NOW, "udp:x")
    assert kind == "change" and rec["text"] == "raised NCCL_IB_TIMEOUT to 22" and rec["if_index"] == -1
    again = change_record("raised NCCL_IB_TIMEOUT to 22", NOW, NOW + 999, "cli", job="train-a")
    assert again["mark_id"] == rec["mark_id"]  # same time, text and scope: same change
    assert change_record("raised NCCL_IB_TIMEOUT to 22", NOW, NOW, "cli", job="train-b")["mark_id"] != rec["mark_id"]
    assert codec.decode_record(codec.encode_record("change_mark", rec), expect="change_mark") == rec


@pytest.mark.parametrize("scope,key", [({"job": "a"}, "a"), ({"node": "n1"}, "n1"), ({"switch": "tor1", "if_index": 3}, "tor1"),
                                       ({"src_group": "gpu", "dst_group": "storage"}, "gpu>storage"), ({}, "cluster")])
def test_change_keys(scope, key):
    assert change_key(change_record("x", NOW, NOW, "cli", **scope)) == key


@pytest.mark.parametrize("line,reason", [
    (b"\xff\xfe", "not_utf8"),
    (b"{nope", "not_json"),
    (b"[1,2]", "not_object"),
    (b'{"event":"step_start"}', "missing_job"),
    (b'{"job":"a","event":"started"}', "bad_event"),
    (b'{"job":"a b","event":"step_start"}', "bad_field"),
    (b'{"job":"a","event":"step_start","step":-2}', "bad_field"),
    (b'{"job":"a","event":"step_start","step":true}', "bad_field"),
    (b'{"job":"a","event":"step_start","extra":1}', "bad_field"),
    (b'{"job":"a","event":"phase_start"}', "bad_field"),
    (b'{"job":"a","event":"step_start","time":"now"}', "bad_time"),
    (b'{"job":"a","event":"step_start","time":1e30}', "bad_time"),
    (b'{"job":"a","event":"step_start","time":17646}', "bad_time"),
    (b'{"kind":"change","job":"a"}', "missing_text"),
    (b'{"kind":"change","text":"x","if_index":3}', "bad_field"),
    (b'{"kind":"change","text":"x","src_group":"gpu"}', "bad_field"),
    (b'{"kind":"other","job":"a"}', "bad_field"),
    (b'{"job":"a","event":"step_start","pad":"' + b"x" * MAX_LINE_BYTES + b'"}', "too_long"),
])
def test_bad_lines_are_refused_with_their_reason(line, reason):
    with pytest.raises(MarkError) as e:
        parse_mark(line, NOW, "udp:x")
    assert e.value.reason == reason and "\n" not in str(e.value)


def test_a_datagram_of_many_lines_keeps_the_good_ones():
    data = b'{"job":"a","event":"step_start","step":1}\n\n{bad}\n{"job":"a","event":"step_end","step":1}\n'
    good, bad = parse_lines(data, NOW, "udp:x")
    assert [r["event"] for _k, r in good] == ["step_start", "step_end"] and [e.reason for e in bad] == ["not_json"]
    good, bad = parse_lines(b'{"job":"a","event":"step_start"}\n' * (MAX_LINES + 5), NOW, "udp:x")
    assert len(good) == MAX_LINES and bad[0].reason == "too_many_lines"


def test_marks_are_told_from_export_datagrams():
    assert looks_like_mark(b'  {"job":"a"}') and not looks_like_mark(b"\x00\x00\x00\x05rest")
    assert not looks_like_mark(b"\x00\x09\x00\x01") and not looks_like_mark(b"")
