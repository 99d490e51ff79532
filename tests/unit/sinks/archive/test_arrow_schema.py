"""Arrow schemas derived from every .avsc; tables from numpy columns and from dicts."""

from __future__ import annotations

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from schemas.columns import AVRO_DIR, addr16, dtype_for, load_avsc
from sinks.archive import layout
from sinks.archive.arrow_schema import arrow_schema, table_from_columns, table_from_dicts
from sinks.archive.summaries import summary_avsc
from tests.support.archive import flows

# summary_hourly has nested records: test_summary_schema_is_valid_avro_and_maps covers it.
AVSC_NAMES = sorted(p.stem for p in AVRO_DIR.glob("*.avsc") if p.stem != "summary_hourly")
PRIM = {"int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_(), "double": pa.float64(), "string": pa.string()}


def expected_type(t):
    if isinstance(t, list):  # [null, T]: nullable T
        return expected_type(next(x for x in t if x != "null"))
    if isinstance(t, str):
        return PRIM.get(t, pa.binary(16))  # the only named reference in our schemas is Address16
    return {"fixed": lambda: pa.binary(t["size"]), "enum": lambda: pa.string(),
            "array": lambda: pa.list_(expected_type(t["items"])),
            "map": lambda: pa.map_(pa.string(), expected_type(t["values"])),
            "record": lambda: pa.struct([(f["name"], expected_type(f["type"])) for f in t["fields"]])}[t["type"]]()


@pytest.mark.parametrize("name", AVSC_NAMES)
def test_every_avro_field_maps(name):
    avsc = load_avsc(name)
    schema = arrow_schema(name)
    base = schema.names[: len(avsc["fields"])]
    assert base == [f["name"] for f in avsc["fields"]]
    for f in avsc["fields"]:
        got = schema.field(f["name"])
        exp = expected_type(f["type"])
        same = str(got.type).replace(" not null", "") == str(exp).replace(" not null", "")  # nested item nullability
        assert got.type.equals(exp) or same, f["name"]
        assert got.nullable == isinstance(f["type"], list)  # only [null, T] unions are nullable
    extra = schema.names[len(avsc["fields"]):]
    addr = [f["name"] for f in avsc["fields"] if schema.field(f["name"]).type == pa.binary(16)]
    names = {"exporter_addr": "exporter", "src_addr": "src_ip", "dst_addr": "dst_ip", "next_hop": "next_hop_ip",
             "bgp_next_hop": "bgp_next_hop_ip"}
    assert extra == [names[a] for a in addr]


def test_every_dataset_has_a_schema_with_its_time_column():
    from sinks.archive.parquet import dataset_schema

    for d in layout.DATASETS.values():
        s = dataset_schema(d.name)  # rollups (derived datasets) have their own schema (sinks.archive.rollups)
        assert s.field(d.time_column).type == pa.int64()


def test_table_from_numpy_columns_roundtrip():
    f = flows([1, 2, 3])
    f["dst_addr"][2] = np.frombuffer(addr16("::1"), dtype=np.uint8)
    t = table_from_columns(f, "flow_record")
    assert t.schema.equals(arrow_schema("flow_record"), check_metadata=False)
    assert t["src_addr"].to_pylist() == [bytes(a) for a in f["src_addr"]]
    assert t["src_ip"].to_pylist() == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert t["dst_ip"].to_pylist() == ["2001:db8::1", "10.0.1.1", "::1"]
    assert t["exporter"].to_pylist() == ["192.0.2.1"] * 3
    for name in f.dtype.names:
        if f[name].ndim == 1:
            assert t[name].to_pylist() == f[name].tolist(), name


def test_table_from_columns_enriched_and_mapping():
    dt = dtype_for("flow_enriched")
    arr = np.zeros(2, dtype=dt)
    for n in dt.names:
        if dt[n] == np.dtype(object):
            arr[n] = ["a", "b"]
    t = table_from_columns(arr, "flow_enriched")
    assert t["category"].to_pylist() == ["a", "b"]
    cols = {n: arr[n] for n in dt.names}
    assert table_from_columns(cols, "flow_enriched").equals(t)
    del cols["category"]
    with pytest.raises(KeyError, match="category"):
        table_from_columns(cols, "flow_enriched")


def example(name: str) -> dict:
    schema = load_avsc(name)
    vals = {"string": "x", "long": 7, "int": 3, "double": 0.5, "boolean": True}
    out = {}
    for f in schema["fields"]:
        t = f["type"]
        if isinstance(t, list):  # the optional diagnosis record
            from processors.logic.diagnosis.catalog import LINK_FAULT, diagnosis, evidence

            out[f["name"]] = diagnosis(LINK_FAULT, "s", "n", "c", [evidence("port_errors_per_s", "counters", "tor/if1", 50.0)])
        elif isinstance(t, str):
            out[f["name"]] = vals[t]
        elif t["type"] == "enum":
            out[f["name"]] = t["symbols"][0]
        elif t["type"] == "array":
            out[f["name"]] = [vals[t["items"]]] * 2
        elif t["type"] == "map":
            out[f["name"]] = {"k": "v"}
    return out


@pytest.mark.parametrize("name", ["alert", "incast_event", "link_health", "matrix_cell", "straggler_score"])
def test_table_from_detector_dicts(name):
    row = example(name)
    fastavro.validation.validate(row, fastavro.parse_schema(load_avsc(name)))
    t = table_from_dicts([row, row], name)
    assert t.schema.equals(arrow_schema(name), check_metadata=False)
    back = t.to_pylist()[0]
    for k, v in row.items():
        assert (dict(back[k]) if isinstance(v, dict) else back[k]) == v
    bad = dict(row)
    bad.pop(next(iter(bad)))
    with pytest.raises(KeyError):
        table_from_dicts([row, bad], name)


def test_summary_schema_is_valid_avro_and_maps():
    fastavro.parse_schema(summary_avsc())
    s = arrow_schema("summary_hourly")
    assert s.field("nodes").type.value_type.field("sent_bytes_est").type == pa.int64()
    assert s.field("jobs").type == s.field("nodes").type  # named type reference resolved
