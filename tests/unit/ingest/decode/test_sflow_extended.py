"""sFlow extended switch (VLANs and priorities in and out) and extended router (next hop) in the flow record,
identical on the compiled decoder (one datagram or many per call) and the readable reference."""

from __future__ import annotations

import struct

import pytest

from ingest.decode import TemplateCache
from ingest.decode.reference.sflow import decode_sflow as decode_sflow_reference
from ingest.decode.sflow import decode_sflow, decode_sflow_many
from schemas.columns import addr_str

from devtools import sflow_build as b

FRAME = b.raw_header(b.tcp_frame(vlan=5))


def _router6(nh: str) -> bytes:
    import ipaddress

    return b.record(1002, struct.pack(">I16sII", 2, ipaddress.ip_address(nh).packed, 64, 64))


def _dg():
    return b.datagram([
        b.flow_sample([FRAME, b.ext_switch(10, 3, 20, 5), b.ext_router("10.0.0.254")], seq=1),
        b.flow_sample_expanded([b.ext_switch(11, 1, 0, 0), FRAME, _router6("fd00::fe")], seq=2),
        b.flow_sample([FRAME], seq=3),  # no extended records: defaults
        b.flow_sample([FRAME, b.record(1002, struct.pack(">I4s", 9, b"\x01\x02\x03\x04"))], seq=4),  # unknown type
        b.flow_sample([FRAME, b.record(1002, struct.pack(">I4s", 2, b"\x01\x02\x03\x04"))], seq=5),  # v6, too short
    ])


def test_extended_switch_and_router_fields():
    r = decode_sflow(_dg(), "10.254.0.1", 1000, TemplateCache())
    f = r.flows
    assert f["vlan"].tolist() == [10, 11, 5, 5, 5]  # the switch's input VLAN wins over the header tag
    assert f["vlan_out"].tolist() == [20, 0, 0, 0, 0]
    assert f["vlan_priority_in"].tolist() == [3, 1, 0, 0, 0] and f["vlan_priority_out"].tolist() == [5, 0, 0, 0, 0]
    assert [addr_str(a) for a in f["next_hop"]] == ["10.0.0.254", "fd00::fe", "::", "::", "::"]
    assert not f["bgp_next_hop"].any() and not r.problems


@pytest.mark.parametrize("decoder", ["one", "many"])
def test_compiled_paths_give_the_reference_rows(decoder):
    d = _dg()
    ref = decode_sflow_reference(d, "10.254.0.1", 1000, TemplateCache())
    if decoder == "one":
        got = decode_sflow(d, "10.254.0.1", 1000, TemplateCache())
    else:
        (got,) = decode_sflow_many([d], "10.254.0.1", 1000, TemplateCache())
    assert got.flows.tobytes() == ref.flows.tobytes()
