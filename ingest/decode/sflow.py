"""sFlow v5 decoding: the compiled decoder, for one datagram or many per call.

:func:`decode_sflow` (one datagram, what :func:`ingest.decode.decode` calls), :func:`decode_sflow_many`
(many, a result or :class:`DecodeError` each) and :func:`decode_sflow_group` (many, the ingest pipeline's
form) all run the one compiled walk of ``_sflow_compiled.pyx`` (sampled headers: ``_sflow_packet.pyx``),
built with the wheel or image: samples,
records, counters, discarded packet samples and every sampled header shape, written straight into
FLOW_DTYPE, SAMPLE_DTYPE, COUNTER_DTYPE and DISCARD_DTYPE rows. What it returns for any bytes is what the readable reference
(:mod:`ingest.decode.reference.sflow`, tests only) returns: same rows, values, order, problems and
errors. Pure: no I/O, no clock. Column conventions and the error cases: docs/architecture.md, "What the
decoders read"; why compiled ahead of time: "Compiled decoders" there.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from fabricflow.compiled import NotBuilt, load
from schemas.columns import COUNTER_DTYPE, FLOW_DTYPE, PROTO_SFLOW5, addr_str

from .errors import DecodeError
from .result import (DISCARD_DTYPE, EMPTY_COUNTERS, EMPTY_DISCARDS, EMPTY_FLOWS, EMPTY_SAMPLES, SAMPLE_DTYPE,
                     DecodeResult, ExportHeader)
from .templates import TemplateCache

__all__ = ["decode_sflow", "decode_sflow_many", "decode_sflow_group", "SflowGroup"]

P = "sflow5"
load("ingest.decode._sflow_packet")  # the sampled-header parser the walk cimports: built and current
_compiled = load("ingest.decode._sflow_compiled")
try:
    _compiled.check_layouts(np.zeros(1, FLOW_DTYPE), np.zeros(1, SAMPLE_DTYPE), np.zeros(1, COUNTER_DTYPE),
                            np.zeros(1, DISCARD_DTYPE))
except ValueError as e:  # the rows it writes are not the dtypes' (a schema changed since it was built)
    raise NotBuilt(f"ingest.decode._sflow_compiled does not write the current record layout ({e}): rebuild it "
                   "(`make venv`), after updating its row structs if a schema changed") from None
_ERRORS = _compiled.ERRORS


class _Fallback:
    """``fallback(i)``: the rate for a zero sampling rate in datagram ``i`` -- its exporter's configured
    override, else 1 (the decoder counts each use as ``sampling_rate_missing``)."""

    __slots__ = ("templates", "exporters")

    def __init__(self, templates: TemplateCache | None, exporters: list):
        self.templates, self.exporters = templates, exporters

    def __call__(self, i: int) -> int:
        t = self.templates
        rate = (t.sampling_override(self.exporters[i]) if t is not None else None) or 1
        return max(rate, 1)


def _error(code_offset_a_b: tuple) -> DecodeError:
    code, offset, a, b = code_offset_a_b
    reason, detail = _ERRORS[code]
    return DecodeError(P, reason, offset, detail.format(a=a, b=b))


class _Walk:
    """One compiled walk over ``k`` datagrams: every row, and per datagram its status, header and bounds."""

    __slots__ = ("flows", "samples", "counters", "discards", "status", "heads", "agents", "fb", "cb", "db", "problems",
                 "errors")

    def __init__(self, datas: list[bytes], ts: list, fallback: _Fallback):
        k = len(datas)
        cap = _compiled.capacity(datas)
        flows = np.empty(cap, dtype=FLOW_DTYPE)
        samples = np.empty(cap, dtype=SAMPLE_DTYPE)
        counters = np.empty(cap, dtype=COUNTER_DTYPE)
        discards = np.empty(cap, dtype=DISCARD_DTYPE)
        self.status = np.empty(k, dtype=np.int8)
        self.heads = np.zeros((k, 3), dtype=np.int64)
        self.agents = np.zeros((k, 16), dtype=np.uint8)
        self.fb = np.empty(k + 1, dtype=np.int64)
        self.cb = np.empty(k + 1, dtype=np.int64)
        self.db = np.empty(k + 1, dtype=np.int64)
        nf, nc, nd, self.problems, self.errors = _compiled.walk(
            datas, np.asarray(ts, dtype=np.int64), PROTO_SFLOW5, fallback, flows.view(np.uint8),
            samples.view(np.uint8), counters.view(np.uint8), discards.view(np.uint8), self.status, self.heads,
            self.agents, self.fb, self.cb, self.db)
        self.flows = flows[:nf]
        self.samples = samples[:nf]
        self.counters = counters[:nc].copy() if nc else EMPTY_COUNTERS  # few: not the whole buffer kept
        self.discards = discards[:nd].copy() if nd else EMPTY_DISCARDS

    def result(self, i: int, head: tuple, agent16: bytes) -> DecodeResult:
        """Datagram ``i``'s :class:`DecodeResult` (not for an error)."""
        lo, hi = self.fb[i], self.fb[i + 1]
        clo, chi = self.cb[i], self.cb[i + 1]
        dlo, dhi = self.db[i], self.db[i + 1]
        sub_agent, dseq, uptime = head
        return DecodeResult(
            self.flows[lo:hi] if hi > lo else EMPTY_FLOWS,
            self.counters[clo:chi] if chi > clo else EMPTY_COUNTERS,
            ExportHeader(P, addr_str(agent16), sub_agent, dseq, 1, None, uptime),
            Counter(dict(self.problems.get(i, ()))),
            samples=self.samples[lo:hi] if hi > lo else EMPTY_SAMPLES,
            discards=self.discards[dlo:dhi] if dhi > dlo else EMPTY_DISCARDS,
        )


def decode_sflow(datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache) -> DecodeResult:
    """Decode one sFlow v5 datagram into flow and counter rows; raises :class:`DecodeError` (only) when its
    structure is broken. Unknown sample and record types are skipped by their length and counted in
    ``problems``; a zero sampling rate takes the exporter's override from ``templates``, else 1 (counted)."""
    w = _Walk([bytes(datagram)], [received_at_ms], _Fallback(templates, [exporter]))
    if w.status[0] == 2:
        raise _error(w.errors[0])
    return w.result(0, tuple(w.heads[0].tolist()), w.agents[0].tobytes())


def decode_sflow_many(datagrams, exporters, received_at_ms, templates: TemplateCache) -> list[DecodeResult | DecodeError]:
    """Decode many sFlow v5 datagrams in one call; per datagram its result or its :class:`DecodeError`,
    exactly what :func:`decode_sflow` returns or raises for it. ``exporters`` and ``received_at_ms`` are one
    value for all datagrams or a sequence with one value per datagram."""
    g = decode_sflow_group(datagrams, exporters, received_at_ms, templates)
    return [g.result(i) for i in range(len(datagrams))]


class SflowGroup:
    """:func:`decode_sflow_group`'s outcome for ``k`` datagrams, without one object per plain datagram.

    ``plain[i]``: datagram ``i`` gave flow rows only (no counters, no problems, no error); its rows are
    ``flows[bounds[i] : bounds[i + 1]]`` (with ``samples`` alike; every datagram's rows are in datagram
    order) and its header is ``header(i)``. Every other datagram's :class:`DecodeResult` or
    :class:`DecodeError` is ``others[i]``.
    """

    __slots__ = ("flows", "samples", "bounds", "plain", "others", "heads", "agents")

    def header(self, i: int) -> ExportHeader:
        sub_agent, dseq, uptime = self.heads[i]
        return ExportHeader(P, addr_str(self.agents[i]), sub_agent, dseq, 1, None, uptime)

    def result(self, i: int) -> DecodeResult | DecodeError:
        """Datagram ``i`` as :func:`decode_sflow` returns (or raises) it."""
        if not self.plain[i]:
            return self.others[i]
        lo, hi = self.bounds[i], self.bounds[i + 1]
        return DecodeResult(self.flows[lo:hi] if hi > lo else EMPTY_FLOWS, EMPTY_COUNTERS, self.header(i),
                            Counter(), samples=self.samples[lo:hi] if hi > lo else EMPTY_SAMPLES)


def decode_sflow_group(datagrams, exporters, received_at_ms, templates: TemplateCache) -> SflowGroup:
    """:func:`decode_sflow_many` as one :class:`SflowGroup` (the ingest pipeline's form)."""
    k = len(datagrams)
    ex = [exporters] * k if isinstance(exporters, str) else list(exporters)
    ts = [received_at_ms] * k if isinstance(received_at_ms, (int, np.integer)) else list(received_at_ms)
    if len(ex) != k or len(ts) != k:
        raise ValueError("exporters / received_at_ms must match the datagrams")
    w = _Walk([d if type(d) is bytes else bytes(d) for d in datagrams], ts, _Fallback(templates, ex))
    g = SflowGroup()
    g.flows, g.samples, g.bounds = w.flows, w.samples, w.fb.tolist()
    g.plain = (w.status == 0).tolist()
    g.heads = list(map(tuple, w.heads.tolist()))
    ab = w.agents.tobytes()
    g.agents = [ab[o : o + 16] for o in range(0, 16 * k, 16)]
    others: dict[int, DecodeResult | DecodeError] = {}
    for i in np.flatnonzero(w.status).tolist():
        others[i] = _error(w.errors[i]) if i in w.errors else w.result(i, g.heads[i], g.agents[i])
    g.others = others
    return g
