"""The diagnosis record: verdicts from a closed set, undetermined exactly when something is missing, Wilson bounds."""

from __future__ import annotations

import fastavro
import pytest

from processors.logic.diagnosis.catalog import (
    HOST, UNDETERMINED, VERDICTS, diagnosis, evidence, limits, undetermined, wilson,
)  # fmt: skip
from schemas.columns import load_avsc


def test_a_determined_verdict_misses_nothing_and_undetermined_says_what_is_missing():
    d = diagnosis(HOST, "s", "n", "c", [evidence("recv_ratio", "flows", "gpu03", 1.0)])
    assert d["verdict"] == HOST and d["missing"] == [] and d["title"] == "the host, not the network"
    with pytest.raises(ValueError):
        diagnosis(HOST, "s", "n", "c", [], ["something"])
    with pytest.raises(ValueError):
        diagnosis(UNDETERMINED, "s", "n", "c", [])
    with pytest.raises(ValueError):
        diagnosis("a_guess", "s", "n", "c", [])
    assert undetermined("s", ["x"], [], "n", "c")["missing"] == ["x"]


def test_wilson_bounds():
    lo, hi = wilson(0, 100, 1.96)
    assert lo == 0.0 and 0.03 < hi < 0.04  # no hit among 100: up to ~3.7 %
    lo, hi = wilson(50, 100, 1.96)
    assert 0.40 < lo < 0.5 < hi < 0.6
    assert wilson(3, 0, 1.96) == (0.0, 1.0)


def test_limits_name_the_polling_interval_and_sampling_rate():
    text = limits(UNDETERMINED, 20_000, 4096)
    assert "every 20 s" in text and "1 packet in 4096" in text and "PFC" in text
    assert "not yet known" in limits(HOST, 0)


@pytest.mark.parametrize("name", ["incast_event", "straggler_score", "link_health", "alert"])
def test_every_event_schema_carries_the_same_optional_diagnosis_and_a_record_fits_it(name):
    fields = {f["name"]: f for f in load_avsc(name)["fields"]}
    f = fields["diagnosis"]
    assert f["default"] is None and f["type"][0] == "null"
    assert f["type"] == load_avsc("incast_event")["fields"][-1]["type"]  # one definition, not four drifting copies
    assert [s["name"] for s in f["type"][1]["fields"]] == ["verdict", "title", "summary", "next_step", "cannot_tell",
                                                           "missing", "evidence"]
    rec = diagnosis(HOST, "s", "n", "c", [evidence("recv_ratio", "flows", "gpu03", 1.0, 0.9, 1.1, "note")])
    assert fastavro.validation.validate(rec, fastavro.parse_schema(f["type"][1]))
    assert set(VERDICTS) <= set(f["type"][1]["fields"][0]["doc"].replace(",", " ").replace(" or ", " ").split())
