"""schemas/records.py encodes lists of flat records byte for byte as fastavro does (codec.encode_record)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.records import MIN_RECORDS, encode_records, flat_plan

LONG = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=90)  # > 63 bytes: 2-byte length prefixes
DOUBLE = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**60), 2**60)

RECORDS = {
    "matrix_cell": st.fixed_dictionaries(
        {"window_start_ms": LONG, "window_end_ms": LONG, "level": st.sampled_from(["node", "group"]), "src": TEXT,
         "dst": TEXT, "category": TEXT, "bytes_est": LONG, "packets_est": LONG, "flow_records": LONG, "samples": LONG}),
    "straggler_score": st.fixed_dictionaries(
        {"window_start_ms": LONG, "window_end_ms": LONG, "job": TEXT, "node": TEXT, "sent_bytes": LONG,
         "recv_bytes": LONG, "peer_median_sent": DOUBLE, "peer_median_recv": DOUBLE, "ratio_sent": DOUBLE,
         "score": DOUBLE, "evidence_windows": SMALL, "straggler": st.booleans(), "peers": SMALL}),
    "link_health": st.fixed_dictionaries(
        {"time_ms": LONG, "interval_ms": LONG, "kind": TEXT, "exporter": TEXT, "switch": TEXT, "if_index": LONG,
         "if_speed": LONG, "previous_if_speed": LONG, "util_in": DOUBLE, "util_out": DOUBLE, "in_errors_per_s": DOUBLE,
         "out_errors_per_s": DOUBLE, "in_discards_per_s": DOUBLE, "out_discards_per_s": DOUBLE, "oper_up": st.booleans(),
         "detail": TEXT}),
}


def _plain(name, records):
    return [codec.encode_record(name, r) for r in records]


@pytest.mark.parametrize("name", sorted(RECORDS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_identical_to_fastavro(name, data):
    if data.draw(st.booleans()):  # a short list: per record
        records = data.draw(st.lists(RECORDS[name], max_size=8))
    else:  # >= MIN_RECORDS: vectorised. A pool of drawn records picked from by drawn indices (100+ records of
        # 16 random fields each would exceed hypothesis' data budget per example)
        pool = data.draw(st.lists(RECORDS[name], min_size=1, max_size=12))
        picks = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=MIN_RECORDS, max_size=MIN_RECORDS + 30))
        records = [pool[i] for i in picks]
    assert encode_records(name, records) == _plain(name, records)


def test_many_similar_records_and_round_trip(monkeypatch):
    recs = [{"window_start_ms": 1_800_000_000_000, "window_end_ms": 1_800_000_010_000, "level": "node" if i % 3 else "group",
             "src": f"gpu{i % 17:02d}", "dst": "stor01" if i % 5 else "", "category": "collective", "bytes_est": i * 1_000_003,
             "packets_est": i, "flow_records": 1, "samples": i % 2} for i in range(500)]
    expected = _plain("matrix_cell", recs)
    monkeypatch.setattr("schemas.records.encode_record", None)  # the vectorised path, no per-record fallback
    out = encode_records("matrix_cell", recs)
    assert out == expected  # fields left out (the signal columns) are written as their defaults, like fastavro
    signals = {"syn_packets_est": 0, "rst_packets_est": 0, "ecn_ce_packets_est": 0, "cnp_packets_est": 0,
               **{f"roce_{op}_packets_est": 0 for op in ("send", "write", "read_request", "read_response", "ack",
                                                          "atomic")}}
    assert [codec.decode_record(m, expect="matrix_cell") for m in out[:50]] == [r | signals for r in recs[:50]]
    recs = [r | signals | {"level": "rack", "syn_packets_est": i} for i, r in enumerate(recs)]
    assert encode_records("matrix_cell", recs) == _plain("matrix_cell", recs)


def test_non_flat_schemas_and_short_lists_use_fastavro():
    assert flat_plan("alert") is None and flat_plan("incast_event") is None
    assert flat_plan("matrix_cell") is not None
    assert MIN_RECORDS > 1


@pytest.mark.parametrize("odd", [None, 3.5, True, "7"])
def test_odd_values_behave_as_fastavro(odd):
    """A value of another type makes the whole list go through fastavro: same bytes or the same error."""
    import numpy as np

    base = {"window_start_ms": 0, "window_end_ms": 10, "job": "j", "node": "n", "sent_bytes": 5, "recv_bytes": 6,
            "peer_median_sent": 1.0, "peer_median_recv": 2.0, "ratio_sent": math.inf, "score": -1.5,
            "evidence_windows": 2, "straggler": False, "peers": 3}
    recs = [dict(base) for _ in range(MIN_RECORDS + 3)]
    recs[4]["sent_bytes"] = odd
    recs[5]["score"] = np.float64(2.25)  # numpy floats are floats
    try:
        expected = _plain("straggler_score", recs)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            encode_records("straggler_score", recs)
    else:
        assert encode_records("straggler_score", recs) == expected
