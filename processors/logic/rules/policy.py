"""Policy and security analytics over enriched flow batches.

:class:`PolicyEngine` runs every rule (segmentation, unregistered hosts, exfiltration, off-hours
transfers, external dependencies, checkpoint cadence, storage on compute) over a batch and turns their
conditions into ``alerts.v1`` dicts through :class:`processors.logic.alerts.AlertManager`;
:func:`segmentation_matrix` and :func:`observed_pairs` make the ``fabricflow query segmentation``
report. Configuration models live in :mod:`processors.logic.rules.config` (re-exported here); the
rules: docs/alerts.md. Deterministic, state is plain data; pure: no I/O, no clock, time comes in as
watermarks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..alerts import AlertManager, Condition, RuleAlertSettings
from ..windows.groupby import GroupBy
from .common import BatchContext, Networks
from .config import (  # re-exported
    RULE_NAMES,
    AlertSettings,
    AllowRule,
    PolicyConfig,
    Schedule,
    SegmentationConfig,
    ms,
    policy_config,
)
from .egress import ExternalDependencyRule
from .exfiltration import ExfiltrationRule, OffHoursRule
from .segmentation import CompiledPolicy, SegmentationRule
from .storage import CheckpointRule, StorageOnComputeRule
from .unregistered import UnregisteredHostRule

__all__ = [
    "PolicyEngine", "PolicyConfig", "SegmentationConfig", "AllowRule", "AlertSettings", "Schedule",
    "policy_config", "segmentation_matrix", "observed_pairs",
]

SNAPSHOT_VERSION = 1


class PolicyEngine:
    """All policy rules plus alert state.

    ``cluster_ranges`` are the CIDRs of the cluster (from config/inventory); an
    address inside them but not in the inventory is "unregistered", one
    outside them is "external".
    """

    def __init__(self, config: PolicyConfig | Mapping | None, cluster_ranges: Iterable[str] = ()):
        if config is None:
            config = PolicyConfig()
        elif not isinstance(config, PolicyConfig):
            config = PolicyConfig.model_validate(config)
        self.config = config
        self.cluster = Networks(list(cluster_ranges))
        self.rules = [
            SegmentationRule(config.segmentation),
            UnregisteredHostRule(config.unregistered_host),
            ExfiltrationRule(config.exfiltration),
            OffHoursRule(config.off_hours_transfer),
            ExternalDependencyRule(config.external_dependency),
            CheckpointRule(config.checkpoint),
            StorageOnComputeRule(config.storage_on_compute),
        ]
        settings = {}
        for name in RULE_NAMES:
            s = config.alert_settings(name)
            settings[name] = RuleAlertSettings(
                for_ms=ms(s.for_), resolve_after_ms=ms(s.resolve_after), update_every=s.update_every,
                severity=s.severity,
            )
        self.alerts = AlertManager(settings, window_ms=ms(config.window))
        self.now_ms: int | None = None

    def _advance(self, now_ms: int) -> int:
        now = int(now_ms) if self.now_ms is None else max(self.now_ms, int(now_ms))
        self.now_ms = now
        return now

    def process(self, batch: np.ndarray, watermark_ms: int, interned=None) -> list[dict]:
        """Run all rules over one enriched batch; return the alerts to emit at ``watermark_ms``.

        The watermark never goes back: an older one is treated as the current one.
        ``interned``: string columns of this batch already coded by the caller (see ``BatchContext``).
        """
        now = self._advance(watermark_ms)
        ctx = BatchContext(batch, self.cluster, interned)
        conds: list[Condition] = []
        for rule in self.rules:
            conds.extend(rule.observe(ctx, now))
        return self._finish(conds, now)

    def tick(self, now_ms: int) -> list[dict]:
        """Advance time without data: timers (checkpoint cadence) and resolutions."""
        return self._finish([], self._advance(now_ms))

    def _finish(self, conds: list[Condition], now: int) -> list[dict]:
        for rule in self.rules:
            conds.extend(rule.evaluate(now))
        for c in sorted(conds, key=lambda c: (c.dedup_key, c.first_seen_ms, c.last_seen_ms)):
            self.alerts.observe(c)
        return self.alerts.evaluate(now)

    def active_alerts(self) -> list[dict]:
        """Pending and firing alert states (plain dicts)."""
        return self.alerts.active()

    def snapshot(self) -> dict:
        """Plain, JSON-serialisable state of the rules and the alerts."""
        return {
            "version": SNAPSHOT_VERSION,
            "now_ms": self.now_ms,
            "alerts": self.alerts.snapshot(),
            "rules": {type(r).__name__: r.snapshot() for r in self.rules},
        }

    def restore(self, snap: dict) -> None:
        """Replace the state with one from :meth:`snapshot` (same config)."""
        if snap.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported policy snapshot version {snap.get('version')!r}")
        self.now_ms = snap.get("now_ms")
        self.alerts.restore(snap["alerts"])
        for r in self.rules:
            r.restore(snap["rules"].get(type(r).__name__, {}))


def observed_pairs(batch: np.ndarray, by_port: bool = False) -> list[dict]:
    """Rows ``{src_group, dst_group, category[, dst_port], bytes, flows}`` of an enriched batch (vectorised)."""
    n = len(batch)
    if n == 0:
        return []
    keys = [batch["src_group"], batch["dst_group"], batch["category"]]
    if by_port:
        keys.append(batch["dst_port"].astype(np.int64))
    gb = GroupBy(*keys)
    byt = gb.sum(batch["bytes_est"].astype(np.int64))
    cnt = gb.count()
    out = []
    for g in range(gb.ngroups):
        r0 = gb.first[g]
        row = {"src_group": str(batch["src_group"][r0]), "dst_group": str(batch["dst_group"][r0]),
               "category": str(batch["category"][r0])}
        if by_port:
            row["dst_port"] = int(batch["dst_port"][r0])
        row["bytes"] = int(byt[g])
        row["flows"] = int(cnt[g])
        out.append(row)
    return out


def segmentation_matrix(observed_pairs_table, policy: PolicyConfig | SegmentationConfig) -> list[dict]:
    """Observed group x group rows checked against the policy.

    ``observed_pairs_table``: rows (mappings, or anything with ``to_pylist()``
    such as a pyarrow Table) with ``src_group``, ``dst_group``, ``category``,
    optional ``dst_port`` / ``src_port``, ``bytes``, ``flows``. Rows with the
    same key are summed. Returns one row per key, sorted by key:
    ``{src_group, dst_group, category, [dst_port,] bytes, flows, allowed, rule}``
    where ``rule`` is the label of the first allow rule that matched
    (``"... (reply)"`` for the reverse direction) or None. A missing/None port
    means port constraints are not checked for that row.
    """
    seg = policy.segmentation if isinstance(policy, PolicyConfig) else policy
    compiled = CompiledPolicy(seg.allow)
    rows = observed_pairs_table.to_pylist() if hasattr(observed_pairs_table, "to_pylist") else observed_pairs_table
    agg: dict[tuple, list[int]] = {}
    has_port = False
    for r in rows:
        dport = r.get("dst_port")
        sport = r.get("src_port")
        has_port |= dport is not None
        key = (str(r["src_group"]), str(r["dst_group"]), str(r["category"]),
               None if dport is None else int(dport), None if sport is None else int(sport))
        a = agg.setdefault(key, [0, 0])
        a[0] += int(r.get("bytes", 0) or 0)
        a[1] += int(r.get("flows", 0) or 0)
    out = []
    def order(k):
        return (k[0], k[1], k[2], -1 if k[3] is None else k[3], -1 if k[4] is None else k[4])

    for key in sorted(agg, key=order):
        src, dst, cat, dport, sport = key
        rule = compiled.match(src, dst, cat, dst_port=dport, src_port=sport)
        row = {"src_group": src, "dst_group": dst, "category": cat}
        if has_port:
            row["dst_port"] = dport
        if sport is not None:
            row["src_port"] = sport
        row.update({"bytes": agg[key][0], "flows": agg[key][1], "allowed": rule is not None, "rule": rule})
        out.append(row)
    return out
