"""Periodic egress to external addresses: an undocumented dependency (a finding).

Rows whose destination is outside the cluster ranges, in ``watch_dst_groups``
(default ``unknown``) and not documented (group or CIDR) are bucketed per
(source group, destination address) into activity buckets. Consecutive active
buckets (gaps up to ``merge_gap``) form one *episode*. When a new episode
starts and the last ``history`` episode starts have at least
``min_occurrences`` members whose inter-arrival times have a coefficient of
variation (std / mean) at most ``max_cv`` and a mean of at least
``min_period``, the key is reported with severity ``info``. The finding stays
open while episodes keep arriving (hold = 2.5 periods) and resolves after.
"""

from __future__ import annotations

import numpy as np

from processors.logic.alerts import Condition
from processors.logic.windows.groupby import GroupBy
from schemas.columns import addr_str

from .common import BatchContext, Networks
from .config import ExternalDependencyConfig, ms


class ExternalDependencyRule:
    names = ("external_dependency",)

    def __init__(self, cfg: ExternalDependencyConfig):
        self.cfg = cfg
        self.documented = Networks(cfg.documented_cidrs)
        self.bucket_ms = max(1, ms(cfg.activity_bucket))
        # key -> {"starts": [ms...], "last": bucket, "bytes", "flows", "first", "last_ms", "addr", "nodes": [...]}
        self.keys: dict[tuple[str, str], dict] = {}

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        cfg = self.cfg
        if not cfg.enabled or ctx.n == 0:
            return []
        rows, hi, lo = self._rows(ctx)
        if len(rows) == 0:
            return []
        b = ctx.batch
        sg = b["src_group"][rows]
        bucket = ctx.t_end[rows] // self.bucket_ms
        gb = GroupBy(sg, hi, lo, bucket)
        weight = ctx.bytes_at(rows)
        byt, cnt = gb.sum(weight), gb.count()
        first, last = gb.min(ctx.t_start[rows]), gb.max(ctx.t_end[rows])
        kg = GroupBy(sg, hi, lo)
        tops = kg.top_rows(weight, 20)
        samples_for = {}
        for g in range(kg.ngroups):
            i = rows[kg.first[g]]
            samples_for[(str(b["src_group"][i]), addr_str(b["dst_addr"][i]))] = rows[tops[g]]
        gap = max(1, ms(cfg.merge_gap) // self.bucket_ms)
        reported: dict[tuple[str, str], Condition] = {}
        # groups are sorted by key then bucket, so each key's buckets arrive in time order
        for g in range(gb.ngroups):
            i = rows[gb.first[g]]
            key = (str(b["src_group"][i]), addr_str(b["dst_addr"][i]))
            bk = int(bucket[gb.first[g]])
            st = self.keys.get(key)
            if st is None:
                st = self.keys[key] = {"starts": [], "last": None, "bytes": 0, "flows": 0,
                                       "first": int(first[g]), "last_ms": int(last[g])}
            st["bytes"] += int(byt[g])
            st["flows"] += int(cnt[g])
            st["first"] = min(st["first"], int(first[g]))
            st["last_ms"] = max(st["last_ms"], int(last[g]))
            if st["last"] is not None and bk <= st["last"]:
                continue  # inside (or before) the current episode
            new_episode = st["last"] is None or bk - st["last"] > gap
            st["last"] = bk
            if not new_episode:
                continue
            st["starts"] = (st["starts"] + [bk * self.bucket_ms])[-cfg.history:]
            period = self._period(st["starts"])
            if period is None:
                continue
            cv, mean = period
            reported[key] = Condition(
                rule="external_dependency",
                key=key,
                summary=(
                    f"finding: {key[0]} reaches external {key[1]} periodically, every ~{mean / 1000:.0f}s "
                    f"(cv {cv:.2f}, {len(st['starts'])} episodes); undocumented dependency?"
                ),
                entities={"src_group": key[0], "dst_addr": key[1], "period_s": f"{mean / 1000:.0f}",
                          "cv": f"{cv:.3f}", "episodes": str(len(st["starts"]))},
                first_seen_ms=st["first"],
                last_seen_ms=st["last_ms"],
                bytes_est=st["bytes"],
                flows=st["flows"],
                samples=[],
                hold_ms=int(2.5 * mean),
            )
            st["bytes"] = st["flows"] = 0
            st["first"] = st["last_ms"]
        out = []
        for key in sorted(reported):
            c = reported[key]
            rows_k = samples_for.get(key)
            if rows_k is not None:
                c.samples = ctx.samples(rows_k)
            out.append(c)
        return out

    def _rows(self, ctx: BatchContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, destination hi, lo) of the watched, undocumented rows to outside the cluster ranges.

        The group tests (integer codes) run first, the address tests only on the few rows they leave.
        """
        cfg = self.cfg
        sel = ctx.group_addrs("dst", cfg.watch_dst_groups)
        keep = ~sel.inside & ctx.isin("src_group", cfg.source_groups)[sel.rows]
        keep &= ~ctx.isin("dst_group", cfg.documented_groups)[sel.rows]
        if self.documented:
            keep &= ~self.documented.contains_halves(sel.hi, sel.lo)
        return sel.rows[keep], sel.hi[keep], sel.lo[keep]

    def _period(self, starts: list[int]) -> tuple[float, float] | None:
        if len(starts) < self.cfg.min_occurrences:
            return None
        d = np.diff(np.asarray(starts, dtype=np.float64))
        mean = float(d.mean())
        if mean < ms(self.cfg.min_period) or mean <= 0:
            return None
        cv = float(d.std() / mean)
        if cv > self.cfg.max_cv:
            return None
        return cv, mean

    def evaluate(self, now_ms: int) -> list[Condition]:
        horizon = now_ms - ms(self.cfg.forget_after)
        for key in [k for k, st in self.keys.items() if st["last_ms"] < horizon]:
            del self.keys[key]
        return []

    def snapshot(self) -> dict:
        return {"keys": [{"key": list(k), **{**v, "starts": list(v["starts"])}} for k, v in sorted(self.keys.items())]}

    def restore(self, snap: dict) -> None:
        self.keys = {}
        for d in snap.get("keys", []):
            d = dict(d)
            k = tuple(d.pop("key"))
            d["starts"] = [int(x) for x in d["starts"]]
            self.keys[k] = d
