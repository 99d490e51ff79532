"""Segmentation: observed group pairs that no allow rule covers.

:class:`CompiledPolicy` matches rows against the allow list, vectorised over a
batch (one mask per allow rule, first match wins for the reported rule name)
or one row at a time for reports. :class:`SegmentationRule` groups the
disallowed rows of a batch by (src_group, dst_group) and reports one
condition per pair.
"""

from __future__ import annotations

import numpy as np

from processors.logic.alerts import Condition
from processors.logic.windows.groupby import GroupBy

from .common import BatchContext, StatelessRule
from .config import UNKNOWN_GROUP, AllowRule, SegmentationConfig, port_ranges


def _ports_mask(ports: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    if not ranges:
        return np.ones(len(ports), dtype=bool)
    out = np.zeros(len(ports), dtype=bool)
    for lo, hi in ranges:
        out |= (ports >= lo) & (ports <= hi)
    return out


class CompiledPolicy:
    """An allow list ready for matching."""

    def __init__(self, allow: list[AllowRule]):
        self.rules = list(allow)
        self._ranges = [port_ranges(r.ports) for r in self.rules]

    # --- one row (reports)
    def match(self, src_group: str, dst_group: str, category: str, dst_port=None, src_port=None) -> str | None:
        """Label of the first allow rule covering this row, ``'<label> (reply)'`` for replies, else None.

        A port of None means "not known at this aggregation": port constraints are then ignored.
        """
        for r, ranges in zip(self.rules, self._ranges):
            if r.categories != ["*"] and category not in r.categories:
                continue
            if _g(r.src, src_group) and _g(r.dst, dst_group) and _p(dst_port, ranges):
                return r.label
        for r, ranges in zip(self.rules, self._ranges):
            if not r.replies or (r.categories != ["*"] and category not in r.categories):
                continue
            if _g(r.dst, src_group) and _g(r.src, dst_group) and _p(src_port, ranges):
                return f"{r.label} (reply)"
        return None

    # --- a whole batch
    def allowed(self, ctx: BatchContext) -> np.ndarray:
        """Row mask of flows some allow rule covers (forward or reply)."""
        ok = np.zeros(ctx.n, dtype=bool)
        if ctx.n == 0:
            return ok
        dport = ctx.batch["dst_port"].astype(np.int64)
        sport = ctx.batch["src_port"].astype(np.int64)
        for r, ranges in zip(self.rules, self._ranges):
            cat = ctx.isin("category", r.categories)
            fwd = cat & ctx.isin("src_group", [r.src]) & ctx.isin("dst_group", [r.dst]) & _ports_mask(dport, ranges)
            ok |= fwd
            if r.replies:
                ok |= cat & ctx.isin("src_group", [r.dst]) & ctx.isin("dst_group", [r.src]) & _ports_mask(sport, ranges)
        return ok


def _g(pattern: str, group: str) -> bool:
    return pattern == "*" or pattern == group


def _p(port, ranges) -> bool:
    if port is None or not ranges:
        return True
    return any(lo <= int(port) <= hi for lo, hi in ranges)


class SegmentationRule(StatelessRule):
    """One ``segmentation`` condition per observed (src_group, dst_group) outside the policy."""

    names = ("segmentation",)

    def __init__(self, cfg: SegmentationConfig):
        self.cfg = cfg
        self.policy = CompiledPolicy(cfg.allow)

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        if not self.cfg.enabled or ctx.n == 0:
            return []
        bad = ~self.policy.allowed(ctx)
        if self.cfg.skip_unknown:
            bad &= ~ctx.eq("src_group", UNKNOWN_GROUP) & ~ctx.eq("dst_group", UNKNOWN_GROUP)
        rows = np.flatnonzero(bad)
        if len(rows) == 0:
            return []
        b = ctx.batch
        sg, dg = b["src_group"][rows], b["dst_group"][rows]
        gb = GroupBy(ctx.code_col("src_group", rows), ctx.code_col("dst_group", rows))
        weight = ctx.bytes_at(rows)
        byt = gb.sum(weight)
        cnt = gb.count()
        first = gb.min(ctx.t_start[rows])
        last = gb.max(ctx.t_end[rows])
        tops = gb.top_rows(weight, 20)
        out = []
        for g in range(gb.ngroups):
            r0 = gb.first[g]
            src, dst = str(sg[r0]), str(dg[r0])
            members = gb.order[gb.starts[g] : gb.starts[g] + cnt[g]]
            cats = [str(c) for c in ctx.codes("category")[0][np.unique(ctx.code_col("category", rows[members]))]]
            out.append(
                Condition(
                    rule="segmentation",
                    key=(src, dst),
                    summary=f"{src} -> {dst} traffic not allowed by policy (categories: {', '.join(cats)})",
                    entities={"src_group": src, "dst_group": dst, "categories": ",".join(cats)},
                    first_seen_ms=int(first[g]),
                    last_seen_ms=int(last[g]),
                    bytes_est=int(byt[g]),
                    flows=int(cnt[g]),
                    samples=ctx.samples(rows[tops[g]]),
                )
            )
        return out
