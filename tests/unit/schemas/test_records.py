"""The optional nested diagnosis keeps link-health samples on the column-wise encoder, byte-identical to fastavro."""

from __future__ import annotations

from schemas.records import encode_records, flat_plan
from schemas.registry import decode_record, encode_record


def sample(i: int, diagnosis=None) -> dict:
    return {"time_ms": 1000 * i, "interval_ms": 10_000, "kind": "sample", "exporter": "10.0.255.1", "switch": "tor1",
            "if_index": i % 48, "if_speed": 25_000_000_000, "previous_if_speed": 25_000_000_000, "util_in": 0.1,
            "util_out": 0.2, "in_errors_per_s": 0.0, "out_errors_per_s": 0.0, "in_discards_per_s": 0.0,
            "out_discards_per_s": 0.0, "oper_up": True, "detail": "", "node": "gpu01", "job": "train-a",
            "diagnosis": diagnosis}


DIAG = {"verdict": "physical_link_fault", "title": "physical link fault", "summary": "s", "next_step": "n",
        "cannot_tell": "c", "missing": [], "evidence": [{"signal": "port_errors_per_s", "source": "counters",
                                                           "subject": "tor1/if3", "value": 150.0, "low": 150.0,
                                                           "high": 150.0, "note": "counter interval 10 s"}]}


def test_the_diagnosis_field_is_planned_as_flat_while_null():
    assert ("diagnosis", "null", None, None) in flat_plan("link_health")


def test_samples_without_diagnosis_encode_like_fastavro_on_the_column_path(monkeypatch):
    recs = [sample(i) for i in range(300)]
    want = [encode_record("link_health", r) for r in recs]

    def no_fallback(*a):
        raise AssertionError("fell back to per-record fastavro")

    monkeypatch.setattr("schemas.records.encode_record", no_fallback)
    assert encode_records("link_health", recs) == want


def test_a_list_with_one_diagnosis_goes_through_fastavro_and_round_trips():
    recs = [sample(i) for i in range(300)]
    recs[7] = sample(7, DIAG) | {"kind": "error_burst"}
    out = encode_records("link_health", recs)
    assert out == [encode_record("link_health", r) for r in recs]
    assert decode_record(out[7])["diagnosis"] == DIAG and decode_record(out[8])["diagnosis"] is None


def test_a_record_leaving_the_field_out_writes_its_default():
    recs = [{k: v for k, v in sample(i).items() if k != "diagnosis"} for i in range(200)]
    assert [decode_record(m)["diagnosis"] for m in encode_records("link_health", recs)] == [None] * 200
