"""Unregistered hosts: addresses inside the cluster ranges that the inventory lacks.

A flow side counts when its group is ``unknown`` and its address falls in the
cluster ranges (vectorised CIDR test) and not in ``exclude_cidrs``. Source and
destination sides are stacked and grouped by address; one condition per
address, with the roles it was seen in and the groups it talked to.
"""

from __future__ import annotations

import numpy as np

from processors.logic.alerts import Condition
from processors.logic.windows.groupby import GroupBy
from schemas.columns import addr_keys, addr_str

from .common import BatchContext, Networks, StatelessRule
from .config import UNKNOWN_GROUP, UnregisteredConfig


class UnregisteredHostRule(StatelessRule):
    names = ("unregistered_host",)

    def __init__(self, cfg: UnregisteredConfig):
        self.cfg = cfg
        self.exclude = Networks(cfg.exclude_cidrs)

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        if not self.cfg.enabled or ctx.n == 0 or not ctx.cluster:
            return []
        src, dst = self._rows(ctx, "src"), self._rows(ctx, "dst")
        rs, rd = src[0], dst[0]
        if len(rs) + len(rd) == 0:
            return []
        rows, addr16, hi, lo = (np.concatenate([a, b]) for a, b in zip(src, dst))
        is_src = np.arange(len(rows)) < len(rs)
        b = ctx.batch
        peer = np.concatenate([b["dst_group"][rs], b["src_group"][rd]])
        weight = ctx.bytes_at(rows)
        gb = GroupBy(hi, lo, desc=weight)  # per address, heaviest rows first (samples)
        byt = gb.sum(weight).tolist()
        cnt = gb.count().tolist()
        first = gb.min(ctx.t_start[rows]).tolist()
        last = gb.max(ctx.t_end[rows]).tolist()
        nsrc = gb.sum(is_src.astype(np.int64)).tolist()  # rows seen as source; the others as destination
        tops = gb.top(20)
        samples = ctx.samples_of([rows[t] for t in tops])
        addrs = [addr_str(k) for k in addr_keys(addr16[gb.first])]
        peers_sorted = peer[gb.order].tolist()  # each group's peers are one slice of this
        bounds = gb.starts.tolist() + [len(rows)]
        out = []
        for g, addr in enumerate(addrs):
            peers = sorted({str(p) for p in peers_sorted[bounds[g] : bounds[g + 1]]})
            roles = ",".join(r for r, f in (("src", nsrc[g] > 0), ("dst", nsrc[g] < cnt[g])) if f)
            out.append(
                Condition(
                    rule="unregistered_host",
                    key=(addr,),
                    summary=f"{addr} is inside the cluster ranges but not in the inventory (seen as {roles})",
                    entities={"addr": addr, "seen_as": roles, "peer_groups": ",".join(peers[:5])},
                    first_seen_ms=first[g],
                    last_seen_ms=last[g],
                    bytes_est=byt[g],
                    flows=cnt[g],
                    samples=samples[g],
                )
            )
        return out

    def _rows(self, ctx: BatchContext, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rows, their (n, 16) ``side`` addresses, the addresses' halves hi and lo) of the rows whose ``side``
        is an unknown group at an in-range, not excluded address. The group test (integer codes) runs first,
        the address tests only on the few rows it leaves."""
        sel = ctx.group_addrs(side, (UNKNOWN_GROUP,))
        keep = sel.inside
        if self.exclude:
            keep = keep & ~self.exclude.contains_halves(sel.hi, sel.lo)
        return sel.rows[keep], sel.a16[keep], sel.hi[keep], sel.lo[keep]
