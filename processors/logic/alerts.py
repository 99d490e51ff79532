"""Alert state: one alert per ongoing condition, Prometheus-like.

Rules report *conditions* (:class:`Condition`: "this keyed situation was seen, with this evidence");
:class:`AlertManager` turns them into alert dicts matching ``schemas/avro/alert.avsc``: *pending* until
the condition held for the rule's ``for``, then ``firing`` once, ``updated`` at most every
``update_every`` windows (at once on a severity or diagnosis verdict change), ``resolved`` after ``resolve_after`` (or the
condition's ``hold_ms``) unseen. Evidence (bytes, flows, first/last seen, up to 5 sample 5-tuples)
accumulates over the alert's life. The lifecycle: docs/alerts.md, "Alert lifecycle". Time comes in as
arguments (watermarks); the state is plain data (:meth:`AlertManager.snapshot` / ``restore``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("info", "warning", "critical")
MAX_SAMPLES = 5


@dataclass(frozen=True)
class RuleAlertSettings:
    """Alert behaviour of one rule, in milliseconds."""

    for_ms: int = 0
    resolve_after_ms: int = 600_000
    update_every: int = 5
    severity: str = "warning"


_DEFAULT_SETTINGS = RuleAlertSettings()  # frozen: one shared instance for rules without settings


@dataclass
class Condition:
    """One observation of a keyed condition by a rule (evidence is an increment)."""

    rule: str
    key: tuple[str, ...]
    summary: str
    entities: dict[str, str]
    first_seen_ms: int
    last_seen_ms: int
    bytes_est: int = 0
    flows: int = 0
    samples: list[str] = field(default_factory=list)
    severity: str | None = None  # None: the rule's configured severity
    hold_ms: int = 0  # condition-specific minimum quiet time before resolving
    diagnosis: dict | None = None  # the bottleneck diagnosis (detector verdicts; None for policy rules)

    @property
    def dedup_key(self) -> str:
        return dedup_key(self.rule, self.key)


def dedup_key(rule: str, key: tuple[str, ...]) -> str:
    """Stable, readable dedup key: ``rule|part|part``."""
    return "|".join((rule, *key))


@dataclass
class _State:
    rule: str
    dedup_key: str
    status: str  # pending | firing
    severity: str
    summary: str
    entities: dict[str, str]
    active_since_ms: int
    first_seen_ms: int
    last_seen_ms: int
    bytes_est: int
    flows: int
    samples: list[str]
    hold_ms: int
    last_emit_window: int
    dirty: bool
    severity_changed: bool
    diagnosis: dict | None = None  # the latest observation's (snapshots from before it have none)


class AlertManager:
    """Keeps one state per dedup key and emits alert dicts on :meth:`evaluate`."""

    def __init__(self, settings: dict[str, RuleAlertSettings], window_ms: int = 60_000):
        if window_ms <= 0:
            raise ValueError("window_ms must be > 0")
        self.settings = dict(settings)
        self.window_ms = int(window_ms)
        self._states: dict[str, _State] = {}

    def _settings(self, rule: str) -> RuleAlertSettings:
        s = self.settings.get(rule)
        return _DEFAULT_SETTINGS if s is None else s

    def window_index(self, now_ms: int) -> int:
        """Index of the window ``((i-1)*w, i*w]`` that contains ``now_ms``."""
        return -(-int(now_ms) // self.window_ms)

    def observe(self, cond: Condition) -> None:
        """Record one observation (no output; :meth:`evaluate` emits)."""
        st = self._settings(cond.rule)
        sev = cond.severity or st.severity
        if sev not in SEVERITIES:
            raise ValueError(f"bad severity {sev!r}")
        key = cond.dedup_key
        s = self._states.get(key)
        first = int(min(cond.first_seen_ms, cond.last_seen_ms))
        last = int(cond.last_seen_ms)
        if s is None:
            self._states[key] = _State(
                rule=cond.rule, dedup_key=key, status="pending", severity=sev, summary=cond.summary,
                entities={str(k): str(v) for k, v in cond.entities.items()}, active_since_ms=first,
                first_seen_ms=first, last_seen_ms=last, bytes_est=int(cond.bytes_est), flows=int(cond.flows),
                samples=_merge_samples([], cond.samples), hold_ms=int(cond.hold_ms), last_emit_window=0,
                dirty=True, severity_changed=False, diagnosis=cond.diagnosis,
            )
            return
        if sev != s.severity:
            s.severity_changed = s.status == "firing" or s.severity_changed
            s.severity = sev
        s.summary = cond.summary
        s.entities = {str(k): str(v) for k, v in cond.entities.items()}
        s.first_seen_ms = min(s.first_seen_ms, first)
        s.active_since_ms = min(s.active_since_ms, first)
        s.last_seen_ms = max(s.last_seen_ms, last)
        s.bytes_est += int(cond.bytes_est)
        s.flows += int(cond.flows)
        s.samples = _merge_samples(s.samples, cond.samples)
        s.hold_ms = max(s.hold_ms, int(cond.hold_ms))
        if cond.diagnosis is not None:
            if s.diagnosis is not None and cond.diagnosis["verdict"] != s.diagnosis["verdict"]:
                s.severity_changed = s.status == "firing" or s.severity_changed  # a new verdict is emitted at once
            s.diagnosis = cond.diagnosis
        s.dirty = True

    def evaluate(self, now_ms: int) -> list[dict]:
        """Advance alert states to ``now_ms`` (a watermark) and return the alert dicts to emit."""
        now = int(now_ms)
        win = self.window_index(now)
        out: list[dict] = []
        for key in sorted(self._states):
            s = self._states[key]
            st = self._settings(s.rule)
            quiet = now - s.last_seen_ms > max(st.resolve_after_ms, s.hold_ms)
            if s.status == "pending":
                if s.last_seen_ms - s.active_since_ms >= st.for_ms:
                    s.status = "firing"
                    out.append(self._emit(s, "firing", win))
                elif quiet:
                    del self._states[key]
                    continue
            elif not quiet and (s.severity_changed or (s.dirty and win - s.last_emit_window >= st.update_every)):
                out.append(self._emit(s, "updated", win))
            if s.status == "firing" and quiet:  # the resolved message carries the final evidence
                out.append(self._emit(s, "resolved", win))
                del self._states[key]
        return out

    def _emit(self, s: _State, state: str, win: int) -> dict:
        s.last_emit_window = win
        s.dirty = False
        s.severity_changed = False
        return {
            "dedup_key": s.dedup_key,
            "rule": s.rule,
            "severity": s.severity,
            "state": state,
            "summary": s.summary,
            "entities": dict(s.entities),
            "window_start_ms": (win - 1) * self.window_ms,
            "window_end_ms": win * self.window_ms,
            "first_seen_ms": int(s.first_seen_ms),
            "last_seen_ms": int(s.last_seen_ms),
            "bytes_est": int(s.bytes_est),
            "flows": int(s.flows),
            "sample_flows": list(s.samples),
            "diagnosis": s.diagnosis,
        }

    def active(self) -> list[dict]:
        """Current states (pending and firing) as plain dicts, sorted by dedup key."""
        return [asdict(self._states[k]) for k in sorted(self._states)]

    def snapshot(self) -> dict:
        """Plain, JSON-serialisable state."""
        return {"window_ms": self.window_ms, "states": self.active()}

    def restore(self, snap: dict) -> None:
        """Replace the state with one from :meth:`snapshot`."""
        if int(snap.get("window_ms", self.window_ms)) != self.window_ms:
            raise ValueError("snapshot was taken with a different window")
        self._states = {}
        for d in snap.get("states", []):
            s = _State(**{**d, "entities": dict(d["entities"]), "samples": list(d["samples"])})
            self._states[s.dedup_key] = s


def _merge_samples(old: list[str], new: list[str]) -> list[str]:
    out = list(old)
    for x in new:
        if len(out) >= MAX_SAMPLES:
            break
        if x not in out:
            out.append(x)
    return out
