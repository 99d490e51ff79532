"""Volume rules over a sliding event-time window: exfiltration and off-hours transfers.

Both sum a batch's matching rows per (key, time bucket), keep per-key bucket totals for the last
``window`` and report a key when its windowed total crosses the threshold; evidence is the
not-yet-reported part of the window, so bytes are never counted twice. Rules and defaults:
docs/alerts.md.
"""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import numpy as np

from processors.logic.alerts import Condition
from processors.logic.windows.groupby import GroupBy
from schemas.columns import addr_str

from .common import BatchContext, Networks
from .config import WEEKDAYS, ExfiltrationConfig, OffHoursConfig, Schedule, ms

# bucket entry: [bytes, flows, first_ms, last_ms, reported_bytes, reported_flows]
_B, _F, _FIRST, _LAST, _RB, _RF = range(6)


class WindowedVolume:
    """Per-key bucket totals over a sliding window (plain data, snapshot-able)."""

    def __init__(self, window_ms: int, bucket_ms: int):
        self.window_ms = window_ms
        self.bucket_ms = max(1, bucket_ms)
        self.keys: dict[tuple[str, ...], dict] = {}

    def add(self, key: tuple[str, ...], bucket: int, nbytes: int, flows: int, first: int, last: int) -> None:
        st = self.keys.setdefault(key, {"buckets": {}, "labels": []})
        e = st["buckets"].get(bucket)
        if e is None:
            st["buckets"][bucket] = [nbytes, flows, first, last, 0, 0]
        else:
            e[_B] += nbytes
            e[_F] += flows
            e[_FIRST] = min(e[_FIRST], first)
            e[_LAST] = max(e[_LAST], last)

    def add_labels(self, key: tuple[str, ...], labels: list[str], cap: int = 5) -> None:
        st = self.keys[key]
        for x in labels:
            if x not in st["labels"] and len(st["labels"]) < cap:
                st["labels"].append(x)
        st["labels"].sort()

    def prune(self, now_ms: int) -> None:
        """Drop buckets that ended before ``now - window`` and keys left empty."""
        horizon = now_ms - self.window_ms
        for key in list(self.keys):
            bk = self.keys[key]["buckets"]
            for b in [b for b in bk if (b + 1) * self.bucket_ms <= horizon]:
                del bk[b]
            if not bk:
                del self.keys[key]

    def totals(self, key: tuple[str, ...]) -> tuple[int, int, int, int]:
        """(bytes, flows, first_ms, last_ms) over the window."""
        es = self.keys[key]["buckets"].values()
        return (sum(e[_B] for e in es), sum(e[_F] for e in es), min(e[_FIRST] for e in es), max(e[_LAST] for e in es))

    def peak(self, key: tuple[str, ...], min_duration_ms: int = 0) -> tuple[int, int, int] | None:
        """Largest window total among windows (of ``window`` length, ending at each bucket) that
        last at least ``min_duration_ms``: (bytes, first_ms, last_ms), or None.

        Windows slide in event time over the buckets held, so a late or very large
        batch is judged by its own timestamps, not by the watermark.
        """
        bk = self.keys[key]["buckets"]
        order = sorted(bk)
        span = max(1, self.window_ms // self.bucket_ms)
        best = None
        lo = 0
        for hi_i, b in enumerate(order):
            while order[lo] <= b - span:
                lo += 1
            es = [bk[x] for x in order[lo : hi_i + 1]]
            total = sum(e[_B] for e in es)
            first, last = min(e[_FIRST] for e in es), max(e[_LAST] for e in es)
            if last - first >= min_duration_ms and (best is None or total > best[0]):
                best = (total, first, last)
        return best

    def take_unreported(self, key: tuple[str, ...]) -> tuple[int, int, int, int]:
        """Evidence not yet reported (bytes, flows, first, last), then mark it reported."""
        nb = nf = 0
        first, last = None, None
        for b in sorted(self.keys[key]["buckets"]):
            e = self.keys[key]["buckets"][b]
            if e[_B] > e[_RB] or e[_F] > e[_RF]:
                nb += e[_B] - e[_RB]
                nf += e[_F] - e[_RF]
                first = e[_FIRST] if first is None else min(first, e[_FIRST])
                last = e[_LAST] if last is None else max(last, e[_LAST])
                e[_RB], e[_RF] = e[_B], e[_F]
        t = self.totals(key)
        return nb, nf, t[2] if first is None else first, t[3] if last is None else last

    def snapshot(self) -> list:
        return [
            {
                "key": list(k),
                "labels": list(v["labels"]),
                "buckets": [[b, *v["buckets"][b]] for b in sorted(v["buckets"])],
            }
            for k, v in sorted(self.keys.items())
        ]

    def restore(self, snap: list) -> None:
        self.keys = {
            tuple(d["key"]): {
                "labels": list(d["labels"]),
                "buckets": {int(x[0]): [int(y) for y in x[1:]] for x in d["buckets"]},
            }
            for d in snap
        }


def _fmt_bytes(n: int) -> str:
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n} B"


class _VolumeRule:
    rule = ""

    def __init__(self, window_s: float, bucket_s: float):
        self.vol = WindowedVolume(ms(window_s), ms(bucket_s))

    def _accumulate(self, ctx: BatchContext, rows: np.ndarray, keycols: list[np.ndarray], labels: np.ndarray):
        """Add rows to the window; return (touched keys, per-key sample rows)."""
        bucket = ctx.t_end[rows] // self.vol.bucket_ms
        gb = GroupBy(*keycols, bucket)
        weight = ctx.bytes_at(rows)
        byt, cnt = gb.sum(weight), gb.count()
        first, last = gb.min(ctx.t_start[rows]), gb.max(ctx.t_end[rows])
        for g in range(gb.ngroups):
            r0 = gb.first[g]
            key = tuple(_key_str(c[r0]) for c in keycols[: self._nkey])
            self.vol.add(key, int(bucket[r0]), int(byt[g]), int(cnt[g]), int(first[g]), int(last[g]))
        kg = GroupBy(*keycols)
        tops = kg.top_rows(weight, 20)
        kcnt = kg.count()
        touched = {}
        for g in range(kg.ngroups):
            r0 = kg.first[g]
            key = tuple(_key_str(c[r0]) for c in keycols[: self._nkey])
            members = kg.order[kg.starts[g] : kg.starts[g] + kcnt[g]]
            self.vol.add_labels(key, sorted({str(x) for x in np.unique(labels[members]) if str(x)}))
            touched[key] = rows[tops[g]]
        return touched

    def _condition(self, ctx: BatchContext, vol_key: tuple, sample_rows, **what) -> Condition:
        """A condition (``what``: rule, key, summary, entities) with the evidence of window key ``vol_key`` not
        reported yet: bytes, flow records, first and last seen, and sample flows of ``sample_rows``."""
        nb, nf, f0, l0 = self.vol.take_unreported(vol_key)
        return Condition(**what, first_seen_ms=f0, last_seen_ms=l0, bytes_est=nb, flows=nf,
                         samples=ctx.samples(sample_rows))

    def evaluate(self, now_ms: int) -> list[Condition]:
        self.vol.prune(now_ms)
        return []

    def snapshot(self) -> dict:
        return {"volume": self.vol.snapshot()}

    def restore(self, snap: dict) -> None:
        self.vol.restore(snap.get("volume", []))


def _key_str(v) -> str:
    return str(v)


class ExfiltrationRule(_VolumeRule):
    names = ("exfiltration",)
    _nkey = 3  # src_group, dst hi, dst lo (the address is rebuilt for reports)

    def __init__(self, cfg: ExfiltrationConfig):
        super().__init__(cfg.window, cfg.bucket)
        self.cfg = cfg
        self.authorized = Networks(cfg.authorized_cidrs)

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        cfg = self.cfg
        if not cfg.enabled or ctx.n == 0:
            return []
        m = ctx.isin("src_group", cfg.source_groups)
        if not m.any():  # most batches have no source group row: no destination tests
            self.vol.prune(now_ms)
            return []
        m = m & ctx.isin("dst_group", cfg.watch_dst_groups)
        rows = np.flatnonzero(m & ~ctx.isin("dst_group", cfg.authorized_groups))
        hi, lo = ctx.halves("dst", rows)  # the address test only on the rows the group tests leave
        if self.authorized:
            keep = ~self.authorized.contains_halves(hi, lo)
            rows, hi, lo = rows[keep], hi[keep], lo[keep]
        if len(rows) == 0:
            self.vol.prune(now_ms)
            return []
        b = ctx.batch
        touched = self._accumulate(ctx, rows, [b["src_group"][rows], hi, lo], b["src_node"][rows])
        out = []
        for key, sample_rows in sorted(touched.items()):
            pk = self.vol.peak(key, ms(cfg.min_duration))
            if pk is None or pk[0] <= cfg.min_bytes:
                continue
            total, first, last = pk
            i = sample_rows[0]
            dst = addr_str(b["dst_addr"][i])
            nodes = self.vol.keys[key]["labels"]
            out.append(self._condition(
                ctx, key, sample_rows,
                rule="exfiltration",
                key=(key[0], dst),
                summary=(
                    f"{_fmt_bytes(total)} from {key[0]} to unauthorized {dst} within "
                    f"{cfg.window:g}s (active {(last - first) / 1000:.0f}s)"
                ),
                entities={
                    "src_group": key[0],
                    "dst_addr": dst,
                    "dst_group": str(b["dst_group"][i]),
                    "src_nodes": ",".join(nodes),
                    "window_bytes": str(total),
                },
            ))
        self.vol.prune(now_ms)  # after judging: late records are judged in their own time
        return out


def off_hours_mask(t_ms: np.ndarray, schedule: Schedule) -> np.ndarray:
    """Vectorised: which timestamps fall outside business hours in the schedule's time zone.

    Local time is computed once per distinct UTC minute with zoneinfo (offsets
    change on minute boundaries), then broadcast back, so DST changes are exact.
    """
    t_ms = np.asarray(t_ms, dtype=np.int64)
    if len(t_ms) == 0:
        return np.zeros(0, dtype=bool)
    tz = ZoneInfo(schedule.timezone)
    days = {WEEKDAYS.index(d) for d in schedule.days}
    start, end = Schedule.minute_of_day(schedule.start), Schedule.minute_of_day(schedule.end)
    holidays = {date.fromisoformat(h) for h in schedule.holidays}
    minutes, inv = np.unique(t_ms // 60_000, return_inverse=True)
    off = np.empty(len(minutes), dtype=bool)
    for i, m in enumerate(minutes.tolist()):
        lt = datetime.fromtimestamp(m * 60, tz)
        mod = lt.hour * 60 + lt.minute
        working = lt.weekday() in days and start <= mod < end and lt.date() not in holidays
        off[i] = not working
    return off[inv.reshape(-1)]


class OffHoursRule(_VolumeRule):
    names = ("off_hours_transfer",)
    _nkey = 3  # src_group, src_node, dst_group

    def __init__(self, cfg: OffHoursConfig):
        super().__init__(cfg.window, cfg.bucket)
        self.cfg = cfg

    def observe(self, ctx: BatchContext, now_ms: int) -> list[Condition]:
        cfg = self.cfg
        if not cfg.enabled or ctx.n == 0:
            return []
        m = ctx.isin("src_group", cfg.source_groups)
        if cfg.exclude_dst_groups:
            m = m & ~ctx.isin("dst_group", cfg.exclude_dst_groups)
        rows = np.flatnonzero(m)
        if len(rows):
            rows = rows[off_hours_mask(ctx.t_end[rows], cfg.schedule)]
        if len(rows) == 0:
            self.vol.prune(now_ms)
            return []
        b = ctx.batch
        keycols = [b["src_group"][rows], b["src_node"][rows], b["dst_group"][rows]]
        touched = self._accumulate(ctx, rows, keycols, b["dst_node"][rows])
        out = []
        for key, sample_rows in sorted(touched.items()):
            pk = self.vol.peak(key)
            if pk is None or pk[0] <= cfg.min_bytes:
                continue
            total = pk[0]
            src_group, src_node, dst_group = key
            who = src_node or src_group
            out.append(self._condition(
                ctx, key, sample_rows,
                rule="off_hours_transfer",
                key=key,
                summary=(
                    f"off-hours bulk transfer: {_fmt_bytes(total)} from {who} ({src_group}) to {dst_group} "
                    f"within {cfg.window:g}s ({cfg.schedule.timezone})"
                ),
                entities={
                    "src_group": src_group,
                    "src_node": src_node,
                    "dst_group": dst_group,
                    "dst_nodes": ",".join(self.vol.keys[key]["labels"]),
                    "timezone": cfg.schedule.timezone,
                    "window_bytes": str(total),
                },
            ))
        self.vol.prune(now_ms)  # after judging: late records are judged in their own time
        return out
