"""Unregistered hosts: addresses inside the cluster ranges that the inventory lacks.

A flow side counts when its group is ``unknown`` and its address falls in the
cluster ranges (vectorised CIDR test) and not in ``exclude_cidrs``. Source and
destination sides are stacked and grouped by address; one condition per
address, with the roles it was seen in and the groups it talked to.
"""

from __future__ import annotations

import numpy as np

from processors.logic.alerts import Condition

from .common import BatchContext, GroupBy, Networks, StatelessRule, addr_text
from .config import UNKNOWN_GROUP, UnregisteredConfig


class UnregisteredHostRule(StatelessRule):
    names = ("unregistered_host",)

    def __init__(self, cfg: UnregisteredConfig):
        self.cfg = cfg
        self.exclude = Networks(cfg.exclude_cidrs)

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        if not self.cfg.enabled or ctx.n == 0 or not ctx.cluster:
            return []
        src_m = ctx.eq("src_group", UNKNOWN_GROUP) & ctx.src_in_cluster
        dst_m = ctx.eq("dst_group", UNKNOWN_GROUP) & ctx.dst_in_cluster
        if self.exclude:
            src_m &= ~self.exclude.contains_halves(*ctx.src_halves)
            dst_m &= ~self.exclude.contains_halves(*ctx.dst_halves)
        rs, rd = np.flatnonzero(src_m), np.flatnonzero(dst_m)
        if len(rs) + len(rd) == 0:
            return []
        rows = np.concatenate([rs, rd])
        is_src = np.concatenate([np.ones(len(rs), bool), np.zeros(len(rd), bool)])
        hi = np.concatenate([ctx.src_halves[0][rs], ctx.dst_halves[0][rd]])
        lo = np.concatenate([ctx.src_halves[1][rs], ctx.dst_halves[1][rd]])
        b = ctx.batch
        peer = np.concatenate([b["dst_group"][rs], b["src_group"][rd]])
        gb = GroupBy(hi, lo)
        byt = gb.sum(ctx.bytes_est[rows])
        cnt = gb.count()
        first = gb.min(ctx.t_start[rows])
        last = gb.max(ctx.t_end[rows])
        as_src = gb.any(is_src)
        as_dst = gb.any(~is_src)
        tops = gb.top_rows(ctx.bytes_est[rows], 20)
        out = []
        for g in range(gb.ngroups):
            r0 = gb.first[g]
            a16 = b["src_addr"][rows[r0]] if is_src[r0] else b["dst_addr"][rows[r0]]
            addr = addr_text(a16)
            members = gb.order[gb.starts[g] : gb.starts[g] + cnt[g]]
            peers = sorted({str(p) for p in set(peer[members].tolist())})
            roles = ",".join(r for r, f in (("src", as_src[g]), ("dst", as_dst[g])) if f)
            out.append(
                Condition(
                    rule="unregistered_host",
                    key=(addr,),
                    summary=f"{addr} is inside the cluster ranges but not in the inventory (seen as {roles})",
                    entities={"addr": addr, "seen_as": roles, "peer_groups": ",".join(peers[:5])},
                    first_seen_ms=int(first[g]),
                    last_seen_ms=int(last[g]),
                    bytes_est=int(byt[g]),
                    flows=int(cnt[g]),
                    samples=ctx.samples(rows[tops[g]]),
                )
            )
        return out
