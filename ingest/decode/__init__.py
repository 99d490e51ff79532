"""Pure decoders: bytes in, columnar records out. No sockets, Kafka, clock or logging.

    result = decode(datagram, exporter="10.0.0.1", received_at_ms=..., templates=cache)

``decode_into(datagram, exporter, received_at_ms, templates, batch)`` is the
ingest pipeline's variant: NetFlow v9/IPFIX records go to a
:class:`~ingest.decode.batch.FlowBatch` and are decoded many data sets at a
time at flush (same rows, same order).

The version field tells the protocols apart: sFlow v5 starts with the 32-bit
value 5, NetFlow v5/v9 and IPFIX with the 16-bit values 5, 9 and 10.
Templates (NetFlow v9/IPFIX) are the one piece of state and live in the
``TemplateCache`` passed in, keyed by exporter, version, domain and template id.
"""

from __future__ import annotations

from .errors import REASONS, DecodeError
from .result import DecodeResult, ExportHeader
from .templates import TemplateCache

__all__ = [
    "decode", "decode_into", "DecodeError", "DecodeResult", "ExportHeader", "TemplateCache", "REASONS",
    "sniff_protocol",
]


def sniff_protocol(datagram: bytes) -> str:
    """``sflow5``, ``netflow5``, ``netflow9``, ``ipfix`` or ``unknown`` from the version field."""
    if len(datagram) < 4:
        return "unknown"
    v16 = (datagram[0] << 8) | datagram[1]
    if v16 == 0 and datagram[2] == 0 and datagram[3] == 5:
        return "sflow5"
    if v16 == 5:
        return "netflow5"
    if v16 == 9:
        return "netflow9"
    if v16 == 10:
        return "ipfix"
    return "unknown"


def decode(datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache) -> DecodeResult:
    """Decode one export datagram.

    Returns a :class:`DecodeResult`; raises :class:`DecodeError` (and nothing
    else) when the datagram cannot be decoded at all. Partial problems (a set
    with an unknown template, an unknown sFlow record type) are counted in
    ``result.problems`` and the rest of the datagram is still decoded.
    """
    if not _DECODERS:
        _load_decoders()
    fn = _DECODERS.get(sniff_protocol(datagram))
    if fn is None:
        raise DecodeError("unknown", "bad_version" if len(datagram) >= 4 else "truncated", 0)
    return fn(datagram, exporter, received_at_ms, templates)


#: protocol (``sniff_protocol``) -> its decoder, and NetFlow version -> the decoder that can defer to a FlowBatch;
#: filled at the first decode, so importing this package loads no decoder
_DECODERS: dict = {}
_NF_DECODERS: dict = {}


def _load_decoders() -> None:
    from .ipfix import decode_ipfix
    from .netflow5 import decode_v5
    from .netflow9 import decode_v9
    from .sflow import decode_sflow

    _NF_DECODERS.update({9: decode_v9, 10: decode_ipfix})
    _DECODERS.update({"sflow5": decode_sflow, "netflow5": decode_v5, "netflow9": decode_v9, "ipfix": decode_ipfix})


def decode_into(datagram: bytes, exporter: str, received_at_ms: int, templates: TemplateCache, batch) -> DecodeResult:
    """Decode one datagram, NetFlow v9/IPFIX flow records going to ``batch`` (a ``FlowBatch``).

    The header, every set and every template are parsed and checked now, as
    in :func:`decode`: a malformed datagram raises :class:`DecodeError` and
    adds nothing to ``batch``; problems, templates learned/withdrawn and the
    header are in the result. The records' bytes wait in ``batch`` until
    ``batch.decode()`` (``batch.records`` grows by the datagram's record
    count; ``result.flows`` stays empty). Other protocols are decoded as by
    :func:`decode` (records in ``result.flows``, ``batch`` untouched).
    """
    if not _DECODERS:
        _load_decoders()
    fn = _NF_DECODERS.get(((datagram[0] << 8) | datagram[1]) if len(datagram) >= 4 else -1)
    if fn is None:
        return decode(datagram, exporter, received_at_ms, templates)
    if type(datagram) is not bytes:  # the batch keeps views of it until decode(): never of a reused buffer
        datagram = bytes(datagram)
    defer: list = []
    res = fn(datagram, exporter, received_at_ms, templates, defer)
    if defer:
        batch.add(defer)
    return res
