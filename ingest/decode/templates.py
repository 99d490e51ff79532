"""Template cache for NetFlow v9 / IPFIX (the decoders' one piece of state).

Per exporter: templates keyed by ``(exporter, version, domain, template_id)`` with the time they were
last (re)defined (dropped when not refreshed for ``expiry_s``); the sampling state learned from
options records (domain-wide rate, rates per sampler/selector id, IPFIX system init time); and data
sets that arrived before their template, held for ``pending_hold_s`` (bounded) and decoded when it
arrives. The clock is the ``received_at_ms`` the decoders pass in. ``save()`` writes templates and
sampling state to the JSON file ``path``; constructing with an existing ``path`` loads it.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from dataclasses import dataclass, field

VAR_LEN = 0xFFFF  # IPFIX variable-length field marker

TemplateKey = tuple  # (exporter: str, version: int, domain: int, template_id: int)


class Template:
    """One (options) template definition: ``fields`` are ``(ie, pen, length)``."""

    __slots__ = ("kind", "fields", "scope_count", "last_seen_ms", "variable", "fixed_fields", "min_len", "rec_len", "_plans")

    def __init__(self, kind: str, fields, scope_count: int, last_seen_ms: int):
        self.kind = kind  # "data" or "options"
        self.fields = tuple(tuple(f) for f in fields)
        self.scope_count = scope_count
        self.last_seen_ms = last_seen_ms
        self.variable = any(f[2] == VAR_LEN for f in self.fields)
        self.fixed_fields = tuple(f for f in self.fields if f[2] != VAR_LEN)
        self.min_len = sum(1 if f[2] == VAR_LEN else f[2] for f in self.fields)
        self.rec_len = None if self.variable else self.min_len
        self._plans: dict = {}

    def plan(self, protocol: str):
        """Compiled gather plan over the fixed-length fields (shared between identical templates)."""
        p = self._plans.get(protocol)
        if p is None:
            from ._nf_plan import plan_for

            p = self._plans[protocol] = plan_for(self.fixed_fields, protocol)
        return p


@dataclass(slots=True)
class SamplingState:
    """What options records told us about one exporter + version + domain."""

    default_rate: int = 0  # 0 = unknown
    samplers: dict = field(default_factory=dict)  # sampler/selector id -> rate
    system_init_ms: int | None = None


@dataclass(slots=True)
class Pending:
    """A data set held until its template arrives."""

    received_at_ms: int
    body: bytes
    export_ms: int
    uptime_ms: int | None
    done: bool = False


class TemplateCache:
    """Templates, sampling state and held data sets for NetFlow v9 / IPFIX.

    ``TemplateCache(expiry_s=..., pending_hold_s=..., sampling_overrides={exporter: rate},
    default_sampling_rate=None, path=None)``. Counters: ``learned_total`` (new or changed
    definitions), ``refreshed_total``, ``expired_total``, ``withdrawn_total``,
    ``rejected_total`` (per-exporter bound hit), ``pending_held_total``,
    ``pending_decoded_total``, ``pending_expired_total``, ``pending_dropped_total``;
    ``len(cache)`` is the number of templates held.
    """

    def __init__(
        self,
        expiry_s: float = 1800.0,
        pending_hold_s: float = 30.0,
        sampling_overrides: dict[str, int] | None = None,
        default_sampling_rate: int | None = None,
        path: str | None = None,
        *,
        max_templates_per_exporter: int = 1024,
        max_pending_sets: int = 1024,
        max_pending_bytes: int = 4 << 20,
    ):
        self.expiry_s = expiry_s
        self.pending_hold_s = pending_hold_s
        self.sampling_overrides = dict(sampling_overrides or {})
        self.default_sampling_rate = default_sampling_rate
        self.path = path
        self.max_templates_per_exporter = max_templates_per_exporter
        self.max_pending_sets = max_pending_sets
        self.max_pending_bytes = max_pending_bytes
        self._templates: dict[TemplateKey, Template] = {}
        self._per_exporter: Counter = Counter()
        self._sampling: dict[tuple, SamplingState] = {}
        self._pending: dict[TemplateKey, list[Pending]] = {}
        self._pending_order: deque = deque()
        self._pending_sets = 0
        self._pending_bytes = 0
        self.learned_total = 0
        self.refreshed_total = 0
        self.expired_total = 0
        self.withdrawn_total = 0
        self.rejected_total = 0
        self.pending_held_total = 0
        # (exporter, version) -> data sets whose template was unknown when they came (held or not), until the
        # caller reads and clears it (ingest: fabricflow_ingest_template_missing_sets_total)
        self.missing_sets: Counter = Counter()
        self.pending_decoded_total = 0
        self.pending_expired_total = 0
        self.pending_dropped_total = 0
        self._exporter16: dict[str, bytes] = {}
        if path and os.path.exists(path):
            self.load(path)

    # -- configuration -----------------------------------------------------
    def sampling_override(self, exporter: str) -> int | None:
        """Configured rate for an exporter whose records carry no (or a zero) rate."""
        return self.sampling_overrides.get(exporter, self.default_sampling_rate)

    def exporter16(self, exporter: str) -> bytes:
        """16-byte (IPv4-mapped) form of the exporter address, memoised; zeros if not an address."""
        b = self._exporter16.get(exporter)
        if b is None:
            from schemas.columns import addr16

            try:
                b = addr16(exporter)
            except ValueError:
                b = bytes(16)
            if len(self._exporter16) > 65536:
                self._exporter16.clear()
            self._exporter16[exporter] = b
        return b

    # -- templates ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self._templates)

    def __contains__(self, key) -> bool:
        return key in self._templates

    def keys(self):
        return list(self._templates)

    def peek(self, key: TemplateKey) -> Template | None:
        """The template under ``key`` without an expiry check."""
        return self._templates.get(key)

    def get(self, key: TemplateKey, now_ms: int) -> tuple[Template | None, bool]:
        """``(template, expired)``; an expired template is dropped and counted."""
        t = self._templates.get(key)
        if t is None:
            return None, False
        if self.expiry_s and now_ms - t.last_seen_ms > self.expiry_s * 1000.0:
            self._drop(key)
            self.expired_total += 1
            return None, True
        return t, False

    def learn(self, key: TemplateKey, kind: str, fields, scope_count: int, now_ms: int) -> str:
        """Store a definition: returns ``new``, ``changed``, ``refreshed`` or ``rejected``."""
        fields = tuple(tuple(f) for f in fields)
        old = self._templates.get(key)
        if old is not None:
            if old.kind == kind and old.fields == fields and old.scope_count == scope_count:
                old.last_seen_ms = now_ms
                self.refreshed_total += 1
                return "refreshed"
            self._templates[key] = Template(kind, fields, scope_count, now_ms)
            self.learned_total += 1
            return "changed"
        if self._per_exporter[key[0]] >= self.max_templates_per_exporter:
            self.rejected_total += 1
            return "rejected"
        self._templates[key] = Template(kind, fields, scope_count, now_ms)
        self._per_exporter[key[0]] += 1
        self.learned_total += 1
        return "new"

    def _drop(self, key: TemplateKey) -> None:
        if self._templates.pop(key, None) is not None:
            self._per_exporter[key[0]] -= 1
            if self._per_exporter[key[0]] <= 0:
                del self._per_exporter[key[0]]

    def withdraw(self, key: TemplateKey) -> int:
        """Remove one template; returns 1 if it existed."""
        if key in self._templates:
            self._drop(key)
            self.withdrawn_total += 1
            return 1
        return 0

    def withdraw_all(self, exporter: str, version: int, domain: int, kind: str) -> int:
        """Remove every ``kind`` template of one exporter + version + domain."""
        keys = [
            k for k, t in self._templates.items() if k[0] == exporter and k[1] == version and k[2] == domain and t.kind == kind
        ]
        for k in keys:
            self._drop(k)
        self.withdrawn_total += len(keys)
        return len(keys)

    # -- sampling ----------------------------------------------------------
    def sampling_state(self, exporter: str, version: int, domain: int, create: bool = False) -> SamplingState | None:
        key = (exporter, version, domain)
        s = self._sampling.get(key)
        if s is None and create:
            if len(self._sampling) > 65536:
                self._sampling.clear()
            s = self._sampling[key] = SamplingState()
        return s

    # -- data before template ----------------------------------------------
    def hold(self, key: TemplateKey, item: Pending) -> bool:
        """Keep a data set until its template arrives; False when holding is off or full."""
        self.missing_sets[key[:2]] += 1
        if self.pending_hold_s <= 0:
            return False
        if self._pending_sets >= self.max_pending_sets or self._pending_bytes + len(item.body) > self.max_pending_bytes:
            self.pending_dropped_total += 1
            return False
        self._pending.setdefault(key, []).append(item)
        self._pending_order.append((key, item))
        self._pending_sets += 1
        self._pending_bytes += len(item.body)
        self.pending_held_total += 1
        return True

    def take_pending(self, key: TemplateKey) -> list[Pending]:
        """Held sets for a template (removed from the hold), oldest first."""
        items = self._pending.pop(key, None)
        if not items:
            return []
        for it in items:
            it.done = True
            self._pending_sets -= 1
            self._pending_bytes -= len(it.body)
        self.pending_decoded_total += len(items)
        return items

    def has_pending(self) -> bool:
        return self._pending_sets > 0

    def pending_count(self) -> int:
        return self._pending_sets

    def expire_pending(self, now_ms: int) -> int:
        """Drop held sets older than ``pending_hold_s``; returns how many expired."""
        expired = 0
        limit = now_ms - self.pending_hold_s * 1000.0
        order = self._pending_order
        while order and (order[0][1].done or order[0][1].received_at_ms < limit):
            key, item = order.popleft()
            if item.done:
                continue
            item.done = True
            lst = self._pending.get(key)
            if lst is not None:
                try:
                    lst.remove(item)
                except ValueError:
                    pass
                if not lst:
                    del self._pending[key]
            self._pending_sets -= 1
            self._pending_bytes -= len(item.body)
            expired += 1
        self.pending_expired_total += expired
        return expired

    # -- persistence -------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": 1,
            "templates": [
                {
                    "exporter": k[0],
                    "version": k[1],
                    "domain": k[2],
                    "template_id": k[3],
                    "kind": t.kind,
                    "scope_count": t.scope_count,
                    "fields": [list(f) for f in t.fields],
                    "last_seen_ms": t.last_seen_ms,
                }
                for k, t in self._templates.items()
            ],
            "sampling": [
                {
                    "exporter": k[0],
                    "version": k[1],
                    "domain": k[2],
                    "default_rate": s.default_rate,
                    "samplers": [[sid, r] for sid, r in s.samplers.items()],
                    "system_init_ms": s.system_init_ms,
                }
                for k, s in self._sampling.items()
            ],
        }

    def save(self, path: str | None = None) -> None:
        """Write templates and sampling state as JSON (atomically: temp file + rename)."""
        path = path or self.path
        if not path:
            raise ValueError("no path to save the template cache to")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh)
        os.replace(tmp, path)

    def load(self, path: str | None = None) -> int:
        """Load a file written by :meth:`save`; returns the number of templates loaded."""
        path = path or self.path
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        n = 0
        for t in data.get("templates", []):
            key = (str(t["exporter"]), int(t["version"]), int(t["domain"]), int(t["template_id"]))
            fields = tuple((int(a), int(b), int(c)) for a, b, c in t["fields"])
            if key not in self._templates and self._per_exporter[key[0]] >= self.max_templates_per_exporter:
                continue
            if key not in self._templates:
                self._per_exporter[key[0]] += 1
            self._templates[key] = Template(t["kind"], fields, int(t["scope_count"]), int(t["last_seen_ms"]))
            n += 1
        for s in data.get("sampling", []):
            st = self.sampling_state(str(s["exporter"]), int(s["version"]), int(s["domain"]), create=True)
            st.default_rate = int(s.get("default_rate") or 0)
            st.samplers = {int(a): int(b) for a, b in s.get("samplers", [])}
            sim = s.get("system_init_ms")
            st.system_init_ms = None if sim is None else int(sim)
        return n
