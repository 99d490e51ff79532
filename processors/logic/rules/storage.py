"""Storage I/O checks: checkpoint cadence per job, and storage traffic on the compute network.

``checkpoint_late`` / ``checkpoint_missing``: storage bursts per job, grouped into checkpoints and
compared with the job's configured or learned interval. ``storage_on_compute``: storage traffic
between compute nodes or on ifIndexes configured as compute. Rules and defaults: docs/alerts.md.
"""

from __future__ import annotations

import ipaddress

import numpy as np

from processors.logic.alerts import Condition
from processors.logic.windows.groupby import DenseGroups, GroupBy, min_max_by
from schemas.columns import addr16, addr_halves, addr_str

from .common import BatchContext, StatelessRule
from .config import CheckpointConfig, StorageOnComputeConfig, ms


class CheckpointRule:
    names = ("checkpoint_late", "checkpoint_missing")

    def __init__(self, cfg: CheckpointConfig):
        self.cfg = cfg
        self.bucket_ms = max(1, ms(cfg.bucket))
        self.jobs: dict[str, dict] = {}

    def _job(self, job: str) -> dict:
        st = self.jobs.get(job)
        if st is None:
            st = self.jobs[job] = {
                "first_seen": None, "last_active": None, "pending": {}, "final_until": None,
                "burst_last_bucket": None, "starts": [], "burst_bytes": 0, "burst_flows": 0,
            }
        return st

    def expected_ms(self, job: str) -> int | None:
        """Configured interval, else the learned median interval, else None."""
        jc = self.cfg.jobs.get(job)
        if jc is not None and jc.interval:
            return ms(jc.interval)
        starts = self.jobs.get(job, {}).get("starts", [])
        if len(starts) < self.cfg.min_bursts:
            return None
        return int(np.median(np.diff(np.asarray(starts[-(self.cfg.history + 1):], dtype=np.int64))))

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        cfg = self.cfg
        if not cfg.enabled:
            return []
        if ctx.n:
            self._note_activity(ctx)
            self._add_storage_bytes(ctx)
        out: list[Condition] = []
        for job in sorted(self.jobs):
            out.extend(self._finalize(job, now_ms))
        return out

    def _note_activity(self, ctx: BatchContext) -> None:
        """First seen / last active of every job in the batch (either side; ``""`` is no job)."""
        ids, labels = ctx.label_ids("src_job", "dst_job")
        first, last = min_max_by(ids, len(labels), ctx.t_start, ctx.t_end)
        seen = (first <= last).nonzero()[0]  # t_start <= t_end on every row: exactly the jobs with rows
        for i, f0, l0 in zip(seen.tolist(), first[seen].tolist(), last[seen].tolist()):
            if labels[i] == "":
                continue
            st = self._job(str(labels[i]))
            st["first_seen"] = f0 if st["first_seen"] is None else min(st["first_seen"], f0)
            st["last_active"] = l0 if st["last_active"] is None else max(st["last_active"], l0)

    def _add_storage_bytes(self, ctx: BatchContext) -> None:
        """Add the batch's storage bytes from job nodes to the storage groups into each job's pending buckets."""
        cfg = self.cfg
        m = ctx.isin("category", cfg.categories) & ctx.isin("dst_group", cfg.storage_groups)
        rows = np.flatnonzero(m & ~ctx.eq("src_job", ""))
        if len(rows) == 0:
            return
        (ids,), labels = ctx.label_ids("src_job")
        ids = ids[rows].astype(np.int64)
        bucket = ctx.t_end[rows] // self.bucket_ms
        off, span = _offsets(bucket, len(labels))
        gb = DenseGroups(ids * span + off, len(labels) * span)  # groups of (job, bucket)
        first = gb.first
        for i, bk, nbytes, nflows in zip(ids[first].tolist(), bucket[first].tolist(),
                                         gb.sum(ctx.bytes_at(rows)).tolist(), gb.count().tolist()):
            st = self._job(str(labels[i]))
            if st["final_until"] is not None and bk < st["final_until"]:
                continue  # too late for an already final bucket
            e = st["pending"].setdefault(bk, [0, 0])
            e[0] += nbytes
            e[1] += nflows

    def _finalize(self, job: str, now_ms: int) -> list[Condition]:
        """Close buckets whose end <= now; detect burst starts; report late arrivals."""
        st = self.jobs[job]
        out = []
        if not st["pending"]:
            return out
        closable = sorted(bk for bk in st["pending"] if (bk + 1) * self.bucket_ms <= now_ms)
        gap_buckets = ms(self.cfg.merge_gap) // self.bucket_ms
        for bk in closable:
            nbytes, nflows = st["pending"].pop(bk)
            st["final_until"] = bk + 1
            if nbytes < self.cfg.burst_min_bytes:
                continue
            last = st["burst_last_bucket"]
            if last is not None and bk - last - 1 <= gap_buckets:
                st["burst_last_bucket"] = bk
                st["burst_bytes"] += nbytes
                st["burst_flows"] += nflows
                continue
            start = bk * self.bucket_ms
            expected = self.expected_ms(job)
            if st["starts"]:
                prev = st["starts"][-1]
            else:  # a job with a configured interval is due one interval after it was first seen
                prev = st["first_seen"] if expected and self.cfg.jobs.get(job) else None
            if expected and prev is not None:
                cond = self._overdue(job, prev, expected, start, arrived=True)
                if cond is not None:
                    cond.bytes_est, cond.flows = nbytes, nflows
                    out.append(cond)
            st["starts"] = (st["starts"] + [start])[-(self.cfg.history + 1):]
            st["burst_last_bucket"] = bk
            st["burst_bytes"], st["burst_flows"] = nbytes, nflows
        return out

    def _overdue(self, job: str, anchor: int, expected: int, t: int, arrived: bool) -> Condition | None:
        late_at = anchor + int(self.cfg.late_factor * expected)
        missing_at = anchor + int(self.cfg.missing_factor * expected)
        if t <= late_at:
            return None
        rule = "checkpoint_missing" if t > missing_at else "checkpoint_late"
        since = (t - anchor) / 1000
        what = "arrived" if arrived else "not seen"
        summary = (
            f"job {job}: checkpoint {what} {since:.0f}s after the last one (expected every {expected / 1000:.0f}s)"
        )
        return Condition(
            rule=rule,
            key=(job,),
            summary=summary,
            entities={"job": job, "expected_interval_s": f"{expected / 1000:.0f}", "last_checkpoint_ms": str(anchor),
                      "overdue_s": f"{since:.0f}"},
            first_seen_ms=anchor + expected,
            last_seen_ms=t,
        )

    def evaluate(self, now_ms: int) -> list[Condition]:
        if not self.cfg.enabled:
            return []
        out = []
        for job in sorted(self.jobs):
            out.extend(self._finalize(job, now_ms))
            st = self.jobs[job]
            if st["last_active"] is None or now_ms - st["last_active"] > ms(self.cfg.job_idle_timeout):
                continue
            expected = self.expected_ms(job)
            if not expected:
                continue
            anchor = st["starts"][-1] if st["starts"] else (st["first_seen"] if self.cfg.jobs.get(job) else None)
            if anchor is None:
                continue
            cond = self._overdue(job, anchor, expected, now_ms, arrived=False)
            if cond is not None:
                out.append(cond)
        # forget jobs idle for a long time with nothing pending
        horizon = now_ms - 10 * ms(self.cfg.job_idle_timeout)
        for job in [j for j, s in self.jobs.items() if s["last_active"] is not None and s["last_active"] < horizon
                    and not s["pending"]]:
            del self.jobs[job]
        return out

    def snapshot(self) -> dict:
        jobs = []
        for job in sorted(self.jobs):
            st = self.jobs[job]
            jobs.append({**st, "job": job, "starts": list(st["starts"]),
                         "pending": [[bk, *v] for bk, v in sorted(st["pending"].items())]})
        return {"jobs": jobs}

    def restore(self, snap: dict) -> None:
        self.jobs = {}
        for d in snap.get("jobs", []):
            d = dict(d)
            job = d.pop("job")
            d["pending"] = {int(x[0]): [int(x[1]), int(x[2])] for x in d["pending"]}
            d["starts"] = [int(x) for x in d["starts"]]
            self.jobs[job] = d


def _offsets(bucket: np.ndarray, nlabels: int) -> tuple[np.ndarray, int]:
    """(offset, span): each bucket as an int in ``[0, span)``, in bucket order, small enough that
    ``id * span + offset`` of ids below ``nlabels`` fits an int64 (the offset from the first bucket,
    or the bucket's rank when the buckets spread absurdly far)."""
    b0 = int(bucket.min())
    span = int(bucket.max()) - b0 + 1
    if span * max(nlabels, 1) < 2**62:
        return bucket - b0, span
    uniq, rank = np.unique(bucket, return_inverse=True)
    return rank.reshape(-1), len(uniq)


class StorageOnComputeRule(StatelessRule):
    names = ("storage_on_compute",)

    def __init__(self, cfg: StorageOnComputeConfig):
        self.cfg = cfg
        self._ifaces = []
        for ci in cfg.compute_interfaces:
            if ci.exporter == "*":
                self._ifaces.append((None, np.asarray(ci.ifindexes, dtype=np.int64)))
            else:
                hi, lo = addr_halves(np.frombuffer(addr16(ipaddress.ip_address(ci.exporter)), dtype=np.uint8))
                self._ifaces.append(((hi[0], lo[0]), np.asarray(ci.ifindexes, dtype=np.int64)))

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        cfg = self.cfg
        if not cfg.enabled or ctx.n == 0:
            return []
        b = ctx.batch
        storage = ctx.isin("category", cfg.categories)
        if not storage.any():
            return []
        between = storage & ctx.isin("src_group", cfg.compute_groups) & ctx.isin("dst_group", cfg.compute_groups)
        out = []
        rows = np.flatnonzero(between)
        if len(rows):
            gb = GroupBy(b["src_group"][rows], b["dst_group"][rows])
            out += self._conds(
                ctx, rows, gb, lambda r0: ("nodes", str(b["src_group"][r0]), str(b["dst_group"][r0])),
                lambda k: {"src_group": k[1], "dst_group": k[2], "reason": "storage between compute nodes"})
        if self._ifaces:
            in_if, out_if = b["in_if"].astype(np.int64), b["out_if"].astype(np.int64)
            ehi, elo = addr_halves(b["exporter_addr"])
            which = np.full(ctx.n, -1, dtype=np.int64)
            for exp, idx in self._ifaces:
                em = np.ones(ctx.n, bool) if exp is None else (ehi == exp[0]) & (elo == exp[1])
                hit_in = em & np.isin(in_if, idx)
                hit_out = em & np.isin(out_if, idx)
                pick = np.where(hit_in, in_if, np.where(hit_out, out_if, -1))
                which = np.where((which < 0) & (pick >= 0), pick, which)
            rows = np.flatnonzero(storage & (which >= 0))
            if len(rows):
                gb = GroupBy(ehi[rows], elo[rows], which[rows])
                out += self._conds(
                    ctx, rows, gb, lambda r0: ("iface", addr_str(b["exporter_addr"][r0]), str(int(which[r0]))),
                    lambda k: {"exporter": k[1], "ifindex": k[2], "reason": "storage on a compute interface"})
        return out

    def _conds(self, ctx, rows, gb, keyf, entf) -> list[Condition]:
        weight = ctx.bytes_at(rows)
        byt, cnt = gb.sum(weight), gb.count()
        first, last = gb.min(ctx.t_start[rows]), gb.max(ctx.t_end[rows])
        tops = gb.top_rows(weight, 20)
        out = []
        for g in range(gb.ngroups):
            key = keyf(rows[gb.first[g]])
            ent = entf(key)
            where = f"{ent['src_group']} -> {ent['dst_group']}" if key[0] == "nodes" else f"{key[1]} ifIndex {key[2]}"
            out.append(Condition(
                rule="storage_on_compute", key=key,
                summary=f"storage traffic on the compute network: {where}",
                entities=ent, first_seen_ms=int(first[g]), last_seen_ms=int(last[g]),
                bytes_est=int(byt[g]), flows=int(cnt[g]), samples=ctx.samples(rows[tops[g]]),
            ))
        return out
