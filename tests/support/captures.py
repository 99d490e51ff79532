"""Decoding for tests: a capture's datagrams grouped as the ingest pipeline groups them, and the error a
bad datagram must raise."""

from __future__ import annotations

from ingest.decode import DecodeError, DecodeResult, TemplateCache, decode
from ingest.decode.sflow import decode_sflow_many


def decode_sflow_groups(pkts, size: int, cache: TemplateCache | None = None) -> list[DecodeResult]:
    """The results of ``decode_sflow_many`` over ``pkts`` (``ingest.pcapread`` packets: payload, source,
    time) in groups of ``size``, in order; every datagram must decode."""
    cache = cache if cache is not None else TemplateCache()
    out = []
    for i in range(0, len(pkts), size):
        part = pkts[i : i + size]
        out += decode_sflow_many([p.payload for p in part], [p.src_ip for p in part],
                                 [int(p.timestamp_s * 1000) for p in part], cache)
    assert all(isinstance(r, DecodeResult) for r in out)
    return out


def decode_error(data: bytes, exporter: str = "192.0.2.1", cache: TemplateCache | None = None) -> DecodeError:
    """The ``DecodeError`` that decoding ``data`` must raise (fails the test if it decodes)."""
    try:
        decode(data, exporter, 0, cache if cache is not None else TemplateCache())
    except DecodeError as e:
        return e
    raise AssertionError("decoded, expected a DecodeError")
