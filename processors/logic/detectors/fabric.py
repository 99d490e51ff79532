"""``uplink_imbalance`` and ``rail_imbalance`` alerts: load spread unevenly over equal-cost members.

Two groups of members the inventory's topology (``Inventory.topology``) names: a leaf's uplinks to the
spines (ECMP should spread the leaf's upward traffic evenly) and a node's NICs on their rails (rank r's
traffic goes on rail r, so the NICs of a node carry about the same). Per evaluation period (``eval_s``)
each member's share of its group's bytes is read from interface counters (exact, when every member of
the group had a counter sample) or from sampled flows (bounded by the sampling error: Wilson interval on
the sampled packets). A leaf fires ``uplink_imbalance`` when one uplink persistently carries far more than
its even share while an equal-cost peer idles (ECMP polarisation); a node fires ``rail_imbalance`` when one
NIC persistently carries far less than its siblings. The rules, parameters and limits: docs/detectors.md,
"Uplink and rail balance". Pure logic: no clock, no Kafka.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..alerts import AlertManager, Condition, RuleAlertSettings
from ..diagnosis.catalog import wilson
from ..enrich.inventory import Inventory
from ..params import detector_params

__all__ = ["FabricBalanceConfig", "FabricBalanceDetector", "RULE_RAIL", "RULE_UPLINK"]

RULE_UPLINK = "uplink_imbalance"
RULE_RAIL = "rail_imbalance"


@detector_params
class FabricBalanceConfig:
    """Uplink and rail balance parameters (docs/detectors.md, "Uplink and rail balance")."""

    eval_s: float = Field(60.0, gt=0, description="Seconds of traffic judged together (at least two counter polling intervals, so every port has a sample)")
    hot_ratio: float = Field(2.0, gt=1, description="An uplink carrying at least this many times the even share of its leaf's uplink bytes is hot")
    idle_ratio: float = Field(0.5, ge=0, lt=1, description="...while an equal-cost peer carries at most this many times the even share (idle)")
    low_ratio: float = Field(0.6, gt=0, lt=1, description="A NIC carrying at most this many times the even share of its node's bytes is low")
    min_util: float = Field(0.01, ge=0, le=1, description="Counters: a group whose mean utilisation is below this is not judged (an idle fabric has no balance to speak of)")
    min_samples: int = Field(200, ge=1, description="Flows: sampled packets a group needs in a period to be judged (fewer: neither adds nor resets evidence)")
    source: Literal["auto", "counters", "flows"] = Field("auto", description="Where shares come from: counters when every member of the group has a counter sample in the period, else flows (auto); or only one of them")
    persist_periods: int = Field(2, ge=1, description="Consecutive imbalanced periods before the alert fires")
    resolve_periods: int = Field(2, ge=1, description="Balanced (or unjudged) periods before the alert resolves")
    max_members: int = Field(8, ge=1, description="Members listed with their shares in the alert's evidence (the most loaded first)")
    z: float = Field(1.96, gt=0, description="Normal quantile of the flow shares' bounds (Wilson interval; 1.96 ~ 95 %)")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Alert severity")


class _Groups:
    """Members (uplinks, NICs) of the inventory's groups and the look-ups that map counters and flows to them."""

    def __init__(self, inv: Inventory | None):
        self.members: list[tuple[str, str, str, str, int]] = []  # (kind u|r, group, label, switch, port)
        self.groups: dict[tuple[str, str], list[int]] = {}
        self.port_member: dict[tuple[str, int], int] = {}
        self.detail: dict[int, str] = {}  # member -> spine (uplink) or rail (NIC)
        if inv is None:
            self.entry_member = np.full(1, -1, np.int64)
            self._up_keys = np.zeros(0, np.int64)
            self._up_member = np.zeros(0, np.int64)
            self.inv = None
            return
        self.inv = inv
        topo = inv.topology
        for leaf in topo.switch_role:
            ups = topo.uplinks(leaf)
            if len(ups) >= 2:
                for port, spine, _, _ in ups:
                    self.detail[self._add("u", leaf, f"if{port}", leaf, port)] = spine
        by_node: dict[str, list] = {}
        for nic in topo.nics:
            by_node.setdefault(nic.node, []).append(nic)
        nic_member: dict[tuple[str, str], int] = {}
        for node, nics in by_node.items():
            if len(nics) >= 2:
                for nic in nics:
                    m = self._add("r", node, nic.name, nic.switch, nic.port)
                    nic_member[(node, nic.name)] = m
                    self.detail[m] = str(nic.rail) if nic.rail >= 0 else ""
        # address entry -> NIC member (flows); (switch id << 32 | ifIndex) -> uplink member (flows)
        self.entry_member = np.array([-1] + [nic_member.get((n, c), -1) for n, c in
                                             zip(inv.entry_node[1:].tolist(), inv.entry_nic[1:].tolist())], np.int64)
        sw_id = {s: i for i, s in enumerate(inv.switch_names)}
        ups = sorted(((sw_id[s] << 32) | p, m) for m, (k, _, _, s, p) in enumerate(self.members) if k == "u")
        self._up_keys = np.array([k for k, _ in ups], np.int64)
        self._up_member = np.array([m for _, m in ups], np.int64)
        self._sw_id = sw_id

    def _add(self, kind: str, group: str, label: str, switch: str, port: int) -> int:
        m = len(self.members)
        self.members.append((kind, group, label, switch, port))
        self.groups.setdefault((kind, group), []).append(m)
        if port >= 0:
            self.port_member[(switch, port)] = m
        return m

    def flow_members(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(uplink member per row or -1, NIC members of the source and destination addresses, stacked)."""
        inv = self.inv
        n = len(batch)
        up = np.full(n, -1, np.int64)
        if inv is None:
            return up, np.full(2 * n, -1, np.int64)
        if len(self._up_keys):
            names = inv.switch_for_agents(np.ascontiguousarray(batch["exporter_addr"]))
            sid = np.array([self._sw_id.get(s, -1) for s in names.tolist()], np.int64)
            key = (np.maximum(sid, 0) << 32) | (batch["out_if"].astype(np.int64) & 0xFFFFFFFF)
            pos = np.minimum(np.searchsorted(self._up_keys, key), len(self._up_keys) - 1)
            up = np.where((sid >= 0) & (self._up_keys[pos] == key), self._up_member[pos], -1)
        nic = np.concatenate([self.entry_member[inv.lookup(np.ascontiguousarray(batch[c])) + 1]
                              for c in ("src_addr", "dst_addr")])
        return up, nic


class FabricBalanceDetector:
    """Judges the uplinks of every leaf and the NICs of every multi-NIC node once per ``eval_s``."""

    def __init__(self, config: FabricBalanceConfig = FabricBalanceConfig(), window_ms: int = 10_000,
                 inventory: Inventory | None = None):
        self.config = config
        self.window_ms = int(window_ms)
        self.eval_ms = max(self.window_ms, int(config.eval_s * 1000))
        settings = RuleAlertSettings(for_ms=0, resolve_after_ms=config.resolve_periods * self.eval_ms, update_every=6,
                                     severity=config.severity)
        self.alerts = AlertManager({RULE_UPLINK: settings, RULE_RAIL: settings}, window_ms=self.window_ms)
        self.evidence: dict[str, int] = {}  # "u|leaf" / "r|node" -> consecutive imbalanced periods
        self.period_start: int | None = None
        self.set_inventory(inventory)

    def set_inventory(self, inventory: Inventory | None) -> None:
        """New topology: the accumulators of the running period restart (evidence by group name is kept)."""
        self.groups = _Groups(inventory)
        self._reset()

    def _reset(self) -> None:
        n = len(self.groups.members)
        self.acc = {k: np.zeros(n, np.float64) for k in ("c_bytes", "c_ms", "c_speed", "f_bytes", "f_samples")}

    # -- inputs ------------------------------------------------------------------
    def observe_flows(self, batch: np.ndarray) -> None:
        """Sampled flow records (``flow_record`` fields ``exporter_addr``, ``out_if``, ``src_addr``, ``dst_addr``,
        ``bytes_est``, ``packets``): leaf-exported records leaving on an uplink count for that uplink; records
        from or to a NIC's address count for that NIC."""
        if not self.groups.members or len(batch) == 0:
            return
        up, nic = self.groups.flow_members(batch)
        n = len(self.groups.members)
        b = batch["bytes_est"].astype(np.float64)
        s = batch["packets"].astype(np.float64)
        for members, weights in ((up, (b, s)), (nic, (np.concatenate([b, b]), np.concatenate([s, s])))):
            b, s = weights
            ok = members >= 0
            if ok.any():
                self.acc["f_bytes"] += np.bincount(members[ok], b[ok], n)
                self.acc["f_samples"] += np.bincount(members[ok], s[ok], n)

    def observe_link(self, records: list[dict]) -> None:
        """Link health ``sample`` records (docs/detectors.md, "Link health"): an uplink counts its bytes out
        (towards the spine, the direction the leaf's ECMP hash chooses), a NIC port its bytes in and out."""
        pm = self.groups.port_member
        if not pm:
            return
        for r in records:
            m = pm.get((r["switch"], int(r["if_index"])))
            if m is None or r["kind"] != "sample" or r["interval_ms"] <= 0 or r["if_speed"] <= 0:
                continue
            util = r["util_out"] if self.groups.members[m][0] == "u" else r["util_in"] + r["util_out"]
            self.acc["c_bytes"][m] += util * r["if_speed"] * r["interval_ms"] / 8000.0
            self.acc["c_ms"][m] += r["interval_ms"]
            self.acc["c_speed"][m] = r["if_speed"]

    # -- periods -----------------------------------------------------------------
    def advance(self, now_ms: int) -> list[dict]:
        """Event time reached ``now_ms`` (a main window's end, or the newest counter sample): judge the period
        once it is complete (periods are aligned to multiples of ``eval_s``); alert dicts (alert.avsc)."""
        now_ms = int(now_ms)
        if self.period_start is None:
            self.period_start = now_ms - now_ms % self.eval_ms
        if now_ms < self.period_start + self.eval_ms:
            return []
        end = now_ms - now_ms % self.eval_ms
        self._judge(self.period_start, end)
        self.period_start = end
        self._reset()
        return self.alerts.evaluate(end)

    def _shares(self, ms: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, float] | None:
        """(shares, low, high, source, samples or mean utilisation) of one group's members, or None (not judged)."""
        cfg, a = self.config, self.acc
        idx = np.array(ms)
        if cfg.source != "flows" and (a["c_ms"][idx] > 0).all():
            rate = a["c_bytes"][idx] * 8000.0 / a["c_ms"][idx]
            util = float((rate / a["c_speed"][idx]).mean())
            if util < cfg.min_util or rate.sum() <= 0:
                return None
            sh = rate / rate.sum()
            return sh, sh, sh, "counters", util
        if cfg.source == "counters":
            return None
        n = float(a["f_samples"][idx].sum())
        total = float(a["f_bytes"][idx].sum())
        if n < cfg.min_samples or total <= 0:
            return None
        sh = a["f_bytes"][idx] / total
        bounds = np.array([wilson(s * n, n, cfg.z) for s in sh.tolist()])
        return sh, bounds[:, 0], bounds[:, 1], "flows", n

    def _judge(self, p0: int, p1: int) -> None:
        cfg, g = self.config, self.groups
        for (kind, group), ms in g.groups.items():
            got = self._shares(ms)
            if got is None:
                continue
            sh, lo, hi, source, amount = got
            even = 1.0 / len(ms)
            if kind == "u":
                i = int(np.argmax(sh))
                others = np.delete(sh, i)
                bad = sh[i] >= cfg.hot_ratio * even and lo[i] > even and others.min() <= cfg.idle_ratio * even
            else:
                i = int(np.argmin(sh))
                bad = sh[i] <= cfg.low_ratio * even and hi[i] < even
            key = f"{kind}|{group}"
            self.evidence[key] = self.evidence.get(key, 0) + 1 if bad else 0
            if self.evidence[key] >= cfg.persist_periods:
                self.alerts.observe(self._condition(kind, group, ms, i, sh, lo, hi, source, amount, p0, p1))

    def _condition(self, kind, group, ms, i, sh, lo, hi, source, amount, p0, p1) -> Condition:
        cfg, g = self.config, self.groups
        even = 1.0 / len(ms)
        m = ms[i]
        _, _, label, switch, port = g.members[m]
        order = sorted(range(len(ms)), key=lambda j: (-sh[j], g.members[ms[j]][2]))[: cfg.max_members]
        shares = ",".join(f"{g.members[ms[j]][2]}:{sh[j]:.2f}" for j in order)
        volume = self.acc["c_bytes" if source == "counters" else "f_bytes"][np.array(ms)].sum()
        ev = self.evidence[f"{kind}|{group}"]
        how = (f"mean utilisation {amount:.0%} from counters" if source == "counters"
               else f"{int(amount)} sampled packets, 95 % bounds {lo[i]:.0%}-{hi[i]:.0%}")
        ent = {"share": f"{sh[i]:.3f}", "low": f"{lo[i]:.3f}", "high": f"{hi[i]:.3f}", "even_share": f"{even:.3f}",
               "members": str(len(ms)), "shares": shares, "source": source, "evidence_periods": str(ev),
               "period_s": f"{(p1 - p0) / 1000:g}"}
        if source == "flows":
            ent["samples"] = f"{amount:.0f}"
        else:
            ent["utilisation"] = f"{amount:.3f}"
        if kind == "u":
            idle = int((sh <= cfg.idle_ratio * even).sum())
            ent |= {"leaf": group, "uplink": label, "spine": g.detail.get(m, ""), "idle_uplinks": str(idle)}
            summary = (f"leaf {group}: uplink {label} (to {g.detail.get(m, '?')}) carries {sh[i]:.0%} of the "
                       f"uplink traffic, even share {even:.0%} over {len(ms)} equal-cost uplinks, {idle} idle, for "
                       f"{ev} periods ({how}): ECMP polarisation")
            return Condition(rule=RULE_UPLINK, key=(group,), summary=summary, entities=ent, first_seen_ms=p0,
                             last_seen_ms=p1, bytes_est=int(volume))
        ent |= {"node": group, "nic": label, "rail": g.detail.get(m, ""),
                "port": f"{switch}/if{port}" if port >= 0 else ""}
        summary = (f"node {group}: NIC {label} (rail {g.detail.get(m, '?')}) carries {sh[i]:.0%} of the node's "
                   f"traffic, even share {even:.0%} over {len(ms)} NICs, for {ev} periods ({how})")
        return Condition(rule=RULE_RAIL, key=(group, label), summary=summary, entities=ent, first_seen_ms=p0,
                         last_seen_ms=p1, bytes_est=int(volume))

    # -- state -------------------------------------------------------------------
    def snapshot(self) -> dict:
        return {"period_start": self.period_start, "evidence": dict(sorted(self.evidence.items())),
                "acc": {k: v.tolist() for k, v in self.acc.items()}, "alerts": self.alerts.snapshot()}

    def restore(self, snap: dict) -> None:
        self.period_start = None if snap["period_start"] is None else int(snap["period_start"])
        self.evidence = {k: int(v) for k, v in snap["evidence"].items()}
        if all(len(v) == len(self.groups.members) for v in snap["acc"].values()):
            self.acc = {k: np.array(v, np.float64) for k, v in snap["acc"].items()}
        self.alerts.restore(snap["alerts"])

