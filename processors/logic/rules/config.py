"""Typed, YAML-loadable configuration of the policy and security rules.

Frozen pydantic v2 models, unknown keys rejected. Durations accept seconds
(number) or strings such as ``"90s"``, ``"10m"``, ``"1h"``, ``"2d"``; sizes
accept bytes (number) or strings such as ``"1GB"`` (10^9) and ``"1GiB"``.
Defaults of every rule and of its alert behaviour live here; the reasoning
behind them is in ``docs/alerts.md``. No I/O: :func:`policy_config` takes the file's
text, :mod:`processors.config_files` reads it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ByteSize, ConfigDict, Field, field_validator, model_validator

CATEGORIES = ("collective", "rocev2", "storage", "dns", "mgmt", "external", "other")
UNKNOWN_GROUP = "unknown"
RULE_NAMES = (
    "segmentation",
    "unregistered_host",
    "exfiltration",
    "off_hours_transfer",
    "external_dependency",
    "checkpoint_missing",
    "checkpoint_late",
    "storage_on_compute",
)
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DUR_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration_s(value) -> float:
    """Seconds from a number (seconds) or a string like ``"10m"``."""
    if isinstance(value, bool):
        raise ValueError("duration must be a number or a string like '10m'")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("duration must be >= 0")
        return float(value)
    if isinstance(value, str):
        m = _DUR_RE.match(value)
        if not m:
            raise ValueError(f"bad duration {value!r} (use e.g. 90s, 10m, 1h)")
        return float(m.group(1)) * _DUR_UNIT[m.group(2)]
    raise ValueError(f"bad duration {value!r}")


Duration = Annotated[float, BeforeValidator(parse_duration_s)]


def ms(seconds: float) -> int:
    """Seconds (float) -> integer milliseconds."""
    return int(round(seconds * 1000.0))


def _check_cidrs(v: list[str]) -> list[str]:
    for c in v:
        ipaddress.ip_network(c, strict=False)
    return v


Cidrs = Annotated[list[str], AfterValidator(_check_cidrs)]  # address ranges, each checked to parse


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class AlertSettings(_Model):
    """Prometheus-like alert behaviour of one rule."""

    for_: Duration = Field(0.0, alias="for", description="condition must hold this long before firing")
    resolve_after: Duration = Field(600.0, description="resolved when not seen for this long")
    update_every: int = Field(5, ge=1, description="emit 'updated' at most every N windows")
    severity: Literal["info", "warning", "critical"] = "warning"


_ALERT_DEFAULTS: dict[str, dict] = {
    "segmentation": {"severity": "warning", "resolve_after": 900.0},
    "unregistered_host": {"severity": "warning", "resolve_after": 1800.0},
    "exfiltration": {"severity": "critical", "resolve_after": 600.0},
    "off_hours_transfer": {"severity": "warning", "resolve_after": 900.0},
    "external_dependency": {"severity": "info", "resolve_after": 3600.0, "update_every": 60},
    "checkpoint_missing": {"severity": "critical", "resolve_after": 0.0},
    "checkpoint_late": {"severity": "warning", "resolve_after": 0.0},
    "storage_on_compute": {"severity": "warning", "resolve_after": 900.0},
}


class AllowRule(_Model):
    """One allowed direction: ``src`` group -> ``dst`` group for some categories/ports.

    ``"*"`` matches any group / category. ``ports`` are destination ports (ints or
    ``"lo-hi"`` ranges); empty means any port. With ``replies`` the reverse
    direction is allowed too when its *source* port matches (or no ports are set).
    """

    name: str = ""
    src: str = "*"
    dst: str = "*"
    categories: list[str] = Field(default_factory=lambda: ["*"])
    ports: list[int | str] = Field(default_factory=list)
    replies: bool = True

    @field_validator("categories")
    @classmethod
    def _cats(cls, v: list[str]) -> list[str]:
        for c in v:
            if c != "*" and c not in CATEGORIES:
                raise ValueError(f"unknown category {c!r}; known: {', '.join(CATEGORIES)} or '*'")
        return v or ["*"]

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int | str]) -> list[int | str]:
        port_ranges(v)
        return v

    @property
    def label(self) -> str:
        """Name shown in alerts and reports (given name, or ``src->dst:cats``)."""
        if self.name:
            return self.name
        ports = "" if not self.ports else ":" + ",".join(str(p) for p in self.ports)
        return f"{self.src}->{self.dst}[{','.join(self.categories)}]{ports}"


def port_ranges(ports: list[int | str]) -> list[tuple[int, int]]:
    """``[443, "8000-8100"]`` -> ``[(443, 443), (8000, 8100)]``."""
    out = []
    for p in ports:
        if isinstance(p, int) and not isinstance(p, bool):
            lo = hi = p
        elif isinstance(p, str) and re.fullmatch(r"\d+(-\d+)?", p.strip()):
            a, _, b = p.strip().partition("-")
            lo, hi = int(a), int(b or a)
        else:
            raise ValueError(f"bad port {p!r} (int or 'lo-hi')")
        if not (0 <= lo <= hi <= 65535):
            raise ValueError(f"bad port range {p!r}")
        out.append((lo, hi))
    return out


class SegmentationConfig(_Model):
    """Allowed group-to-group directions; every other observed pair is a violation."""

    enabled: bool = False
    groups: list[str] = Field(default_factory=list, description="group names from the inventory")
    allow: list[AllowRule] = Field(default_factory=list)
    skip_unknown: bool = Field(
        False, description="ignore pairs where a side is 'unknown' (left to unregistered_host/exfiltration)"
    )

    @model_validator(mode="after")
    def _groups_known(self):
        if self.groups:
            known = set(self.groups) | {"*", UNKNOWN_GROUP}
            for r in self.allow:
                for g in (r.src, r.dst):
                    if g not in known:
                        raise ValueError(f"allow rule {r.label!r} names group {g!r} not in groups {self.groups}")
        return self


class UnregisteredConfig(_Model):
    """Addresses inside the cluster ranges that the inventory does not know."""

    enabled: bool = True
    exclude_cidrs: Cidrs = Field(default_factory=list, description="in-range addresses to ignore (e.g. DHCP pool)")


class ExfiltrationConfig(_Model):
    """Large, sustained transfers from source groups to unauthorized destinations."""

    enabled: bool = True
    source_groups: list[str] = Field(default_factory=lambda: ["model-store"])
    watch_dst_groups: list[str] = Field(
        default_factory=lambda: [UNKNOWN_GROUP], description="destination groups that count as outside"
    )
    authorized_groups: list[str] = Field(default_factory=lambda: ["external-authorized"])
    authorized_cidrs: Cidrs = Field(default_factory=list)
    window: Duration = 600.0
    min_bytes: ByteSize = ByteSize(1_000_000_000)
    min_duration: Duration = 60.0
    bucket: Duration = 10.0


class Schedule(_Model):
    """Business hours in a time zone; everything else is off-hours (DST-safe via zoneinfo)."""

    timezone: str = "UTC"
    days: list[str] = Field(default_factory=lambda: ["mon", "tue", "wed", "thu", "fri"])
    start: str = "08:00"
    end: str = "19:00"
    holidays: list[str] = Field(default_factory=list, description="local dates YYYY-MM-DD treated as off-hours")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v)
        except Exception as exc:  # ZoneInfoNotFoundError is a KeyError; bad paths raise ValueError
            raise ValueError(f"unknown time zone {v!r}") from exc
        return v

    @field_validator("holidays")
    @classmethod
    def _holidays(cls, v: list[str]) -> list[str]:
        from datetime import date

        for d in v:
            date.fromisoformat(d)
        return v

    @field_validator("days")
    @classmethod
    def _days(cls, v: list[str]) -> list[str]:
        v = [d.lower()[:3] for d in v]
        for d in v:
            if d not in WEEKDAYS:
                raise ValueError(f"bad weekday {d!r}")
        return v

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-4]):[0-5]\d", v) or (v.startswith("24") and v != "24:00"):
            raise ValueError(f"bad time {v!r} (HH:MM)")
        return v

    @model_validator(mode="after")
    def _order(self):
        if self.minute_of_day(self.start) >= self.minute_of_day(self.end):
            raise ValueError("schedule start must be before end (same local day)")
        return self

    @staticmethod
    def minute_of_day(hhmm: str) -> int:
        h, m = hhmm.split(":")
        return int(h) * 60 + int(m)


class OffHoursConfig(_Model):
    """Bulk transfers from configured groups outside business hours."""

    enabled: bool = False
    source_groups: list[str] = Field(default_factory=lambda: ["model-store"])
    exclude_dst_groups: list[str] = Field(default_factory=list, description="e.g. a backup group that runs at night")
    schedule: Schedule = Field(default_factory=Schedule)
    window: Duration = 600.0
    min_bytes: ByteSize = ByteSize(10_000_000_000)
    bucket: Duration = 10.0


class ExternalDependencyConfig(_Model):
    """Periodic egress to addresses outside the cluster ranges (a finding, not an alarm)."""

    enabled: bool = True
    source_groups: list[str] = Field(default_factory=lambda: ["*"])
    watch_dst_groups: list[str] = Field(default_factory=lambda: [UNKNOWN_GROUP])
    documented_cidrs: Cidrs = Field(default_factory=list, description="known dependencies, not reported")
    documented_groups: list[str] = Field(default_factory=lambda: ["external-authorized"])
    activity_bucket: Duration = 60.0
    merge_gap: Duration = 120.0
    min_occurrences: int = Field(4, ge=3)
    history: int = Field(8, ge=3)
    max_cv: float = Field(0.15, gt=0)
    min_period: Duration = 300.0
    forget_after: Duration = 86400.0


class CheckpointJob(_Model):
    interval: Duration | None = None


class CheckpointConfig(_Model):
    """Checkpoint bursts (job nodes -> storage) at the expected cadence."""

    enabled: bool = True
    storage_groups: list[str] = Field(default_factory=lambda: ["storage"])
    categories: list[str] = Field(default_factory=lambda: ["storage"])
    bucket: Duration = 10.0
    burst_min_bytes: ByteSize = ByteSize(1_000_000_000)
    merge_gap: Duration = 60.0
    min_bursts: int = Field(3, ge=2, description="bursts needed before a cadence is learned")
    history: int = Field(8, ge=2)
    late_factor: float = Field(1.5, gt=1.0)
    missing_factor: float = Field(2.5, gt=1.0)
    job_idle_timeout: Duration = 600.0
    jobs: dict[str, CheckpointJob] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _factors(self):
        if self.missing_factor <= self.late_factor:
            raise ValueError("missing_factor must be greater than late_factor")
        return self


class ComputeInterfaces(_Model):
    exporter: str = "*"
    ifindexes: list[int] = Field(default_factory=list)

    @field_validator("exporter")
    @classmethod
    def _exp(cls, v: str) -> str:
        if v != "*":
            ipaddress.ip_address(v)
        return v


class StorageOnComputeConfig(_Model):
    """Storage-category traffic between compute nodes or on compute-fabric interfaces."""

    enabled: bool = True
    compute_groups: list[str] = Field(default_factory=lambda: ["gpu"])
    categories: list[str] = Field(default_factory=lambda: ["storage"])
    compute_interfaces: list[ComputeInterfaces] = Field(default_factory=list)


class PolicyConfig(_Model):
    """All policy/security rules plus their alert settings."""

    window: Duration = Field(60.0, description="evaluation window; 'update_every' counts these")
    segmentation: SegmentationConfig = Field(default_factory=SegmentationConfig)
    unregistered_host: UnregisteredConfig = Field(default_factory=UnregisteredConfig)
    exfiltration: ExfiltrationConfig = Field(default_factory=ExfiltrationConfig)
    off_hours_transfer: OffHoursConfig = Field(default_factory=OffHoursConfig)
    external_dependency: ExternalDependencyConfig = Field(default_factory=ExternalDependencyConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    storage_on_compute: StorageOnComputeConfig = Field(default_factory=StorageOnComputeConfig)
    alerts: dict[str, AlertSettings] = Field(default_factory=dict, description="per-rule overrides")

    @field_validator("window")
    @classmethod
    def _win(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("window must be > 0")
        return v

    @model_validator(mode="before")
    @classmethod
    def _merge_alerts(cls, data):
        if isinstance(data, dict) and "alerts" in data and data["alerts"] is not None:
            for k in data["alerts"]:
                if k not in RULE_NAMES:
                    raise ValueError(f"alerts: unknown rule {k!r}; known: {', '.join(RULE_NAMES)}")
        return data

    def alert_settings(self, rule: str) -> AlertSettings:
        """Effective settings of ``rule``: built-in defaults overlaid with ``alerts[rule]``."""
        base = dict(_ALERT_DEFAULTS[rule])
        if rule in self.alerts:
            base.update(self.alerts[rule].model_dump(by_alias=True, exclude_unset=True))
        return AlertSettings.model_validate(base)


def policy_config(source: str | dict | PolicyConfig | None) -> PolicyConfig:
    """PolicyConfig from a policy file's YAML text, a dict, a PolicyConfig, or None (defaults).

    No file reads: services load the file with :func:`processors.config_files.load_policy_file` (one-line
    errors naming the file and line) and pass the PolicyConfig.
    """
    import yaml

    if source is None:
        return PolicyConfig()
    if isinstance(source, PolicyConfig):
        return source
    if isinstance(source, dict):
        return PolicyConfig.model_validate(source)
    if not isinstance(source, str):
        raise TypeError(f"policy: expected YAML text, a dict or a PolicyConfig, got {type(source).__name__}")
    return PolicyConfig.model_validate(yaml.safe_load(source) or {})
