"""Shared export loop of the template-based exporters (NetFlow v9, IPFIX).

Each export round (once per simulated second) expires due flows from the cache and packs
them into as many messages as needed; the first message of a round carries the
templates, options templates and options data when the refresh interval has passed
(and always in the very first message).
"""

from __future__ import annotations

import struct

import numpy as np

from ..model import FlowExporter
from .flowcache import FlowCache, FlowEntry


class TemplateExporter:
    """Subclasses define the header, set encodings and record layout."""

    header_len = 0
    record_len = 0
    kind = ""

    def __init__(self, cfg: FlowExporter, boot_ms: int, rng: np.random.Generator):
        self.cfg = cfg
        self.boot_ms = boot_ms
        self.cache = FlowCache(int(cfg.active_timeout_s * 1000), int(cfg.inactive_timeout_s * 1000), cfg.sampling_interval, rng)
        self.last_template_ms: int | None = None
        self.messages = 0
        self.data_records = 0

    # subclass hooks
    def template_sets(self) -> tuple[list[bytes], int, int]:
        """(encoded sets, template/options-template record count, options data record count)"""
        raise NotImplementedError

    def data_set(self, recs: list[FlowEntry], start_ms: int, skew_ms: int) -> bytes:
        raise NotImplementedError

    def message(self, sets: list[bytes], n_records: int, n_data: int, event_abs_ms: int, clock_abs_ms: int) -> bytes:
        raise NotImplementedError

    def export(self, now_rel: int, start_ms: int, skew_ms: int = 0, flush: bool = False) -> list[tuple[int, bytes]]:
        recs = self.cache.expire(now_rel, flush)
        refresh = self.last_template_ms is None or now_rel - self.last_template_ms >= self.cfg.template_refresh_s * 1000
        if not recs and not refresh:
            return []
        event_abs = start_ms + now_rel
        out = []
        i = 0
        first = True
        while first or i < len(recs):
            sets: list[bytes] = []
            n_tpl = n_opt = 0
            if first and refresh:
                sets, n_tpl, n_opt = self.template_sets()
                self.last_template_ms = now_rel
            room = self.cfg.max_datagram_bytes - self.header_len - sum(map(len, sets)) - 4 - 3
            k = max(0, min(len(recs) - i, room // self.record_len))
            if k == 0 and not sets:
                k = 1  # always progress, even with a tiny max_datagram_bytes
            if k:
                sets.append(self.data_set(recs[i : i + k], start_ms, skew_ms))
            i += k
            out.append((event_abs, self.message(sets, n_tpl + n_opt + k, n_opt + k, event_abs, event_abs + skew_ms)))
            first = False
        return out


def pad4(b: bytes) -> bytes:
    return b + b"\0" * ((-len(b)) % 4)


def padded_set(set_id: int, body: bytes) -> bytes:
    """A NetFlow v9 FlowSet or IPFIX Set: its id, its length with the padding to a multiple of 4 bytes, the
    body and that padding."""
    total = 4 + len(body) + (-(4 + len(body)) % 4)
    return struct.pack(">HH", set_id, total) + body + b"\0" * (total - 4 - len(body))


def records_set(set_id: int, records: list[bytes]) -> bytes:
    """A data (or options data) set of ``records`` under template ``set_id``, padded."""
    return padded_set(set_id, b"".join(records))
