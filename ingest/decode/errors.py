"""The one error type every decoder raises."""

from __future__ import annotations

# Closed set of reasons; metrics label values come from here only.
REASONS = frozenset(
    {
        "truncated",  # datagram/set/record shorter than its header or length says
        "bad_version",  # version field is not one we decode
        "bad_length",  # a length field is inconsistent (zero, too small, past the end)
        "bad_template",  # template/options template definition is malformed
        "bad_count",  # header counts do not match what the datagram holds
        "unsupported",  # well-formed but a format we do not decode (e.g. sFlow header protocol)
        "too_many",  # a bound was hit (records per datagram, templates per exporter, ...)
    }
)


class DecodeError(Exception):
    """Undecodable datagram.

    ``protocol`` is one of ``sflow5 netflow5 netflow9 ipfix unknown``;
    ``reason`` is one of :data:`REASONS`; ``offset`` is the byte offset in the
    datagram where decoding stopped.
    """

    def __init__(self, protocol: str, reason: str, offset: int = 0, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"unknown decode error reason {reason!r}")
        self.protocol = protocol
        self.reason = reason
        self.offset = offset
        self.detail = detail
        super().__init__(f"{protocol}: {reason} at offset {offset}" + (f": {detail}" if detail else ""))
