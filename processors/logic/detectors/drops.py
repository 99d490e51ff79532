"""Drop reasons per switch port from sFlow dropped-packet notifications (discards.raw.v1), for link health.

A notification is one packet a switch dropped, with the spec's reason (:mod:`schemas.drop_reasons`). It is
attributed to a port exactly as the metrics sink and ``fabricflow query drops`` do: the egress ifIndex of an
egress drop, else the input one, on the notifying agent, so the key ``(exporter text, ifIndex)`` is the one
link health keeps its counter state under; the dropped packet's job is its destination node's at that time,
else its source node's (:func:`dropped_jobs`), as in the metrics. :class:`PortDrops` keeps, per port, the
count per (second, reason, job) and the highest agent ``drops`` counter of that second (notifications the
agent could not send), for a horizon; :meth:`PortDrops.summary` answers "which reasons, whose traffic, how
many, how many notifications lost" for a time range, what a link event's evidence and diagnosis read. Batches in, one numpy group-by per
batch: no Python object per notification. Pure: no clock, no I/O.
"""

from __future__ import annotations

import bisect

import numpy as np

from schemas.columns import addr_str
from schemas.drop_reasons import REASON_GROUP, reason_name

__all__ = ["PortDrops", "DropSummary", "port_if_index", "dropped_jobs"]

_GROUP_KEY = np.dtype([("addr", "V16"), ("ifx", "<i8"), ("sec", "<i8"), ("reason", "<i8"), ("job", "<i8")])


def _sec(row: list) -> int:
    return row[0]


def _order(row: list) -> tuple:
    return row[0], row[1], row[4]


def dropped_jobs(inventory, arr: np.ndarray) -> np.ndarray:
    """The job of each dropped packet (DISCARD_DTYPE rows): its destination node's at the notification's time,
    else its source node's, "" for neither (object array; one vectorised look-up per column)."""
    t = arr["time_received_ms"].astype(np.int64)
    ids = inventory.entry_node_id
    dst = inventory.jobs_at(ids[inventory.lookup(arr["dst_addr"]) + 1], t)
    src = inventory.jobs_at(ids[inventory.lookup(arr["src_addr"]) + 1], t)
    return np.where(dst != "", dst, src)


def port_if_index(arr: np.ndarray) -> np.ndarray:
    """The port a notification (DISCARD_DTYPE row) is about: its egress ifIndex, else its input one (0: unknown)."""
    return np.where(arr["out_if"] > 0, arr["out_if"], arr["in_if"]).astype(np.int64)


class DropSummary(dict):
    """``{"total": n, "lost": k, "reasons": [(name, group, count), ...] most first, "groups": {group: count},
    "jobs": [(job, count), ...] most first (packets of no job left out)}``."""

    @property
    def top_group(self) -> str:
        """The reason group with most notifications ("" when none), ties by name."""
        groups = self["groups"]
        return min(groups, key=lambda g: (-groups[g], g)) if groups else ""

    def text(self, top: int = 3) -> str:
        """``acl 12, ttl_exceeded 3`` (the ``top`` reasons, then ``+N other``)."""
        parts = [f"{name} {n}" for name, _g, n in self["reasons"][:top]]
        rest = sum(n for _name, _g, n in self["reasons"][top:])
        return ", ".join(parts + ([f"+{rest} other"] if rest else []))


class PortDrops:
    """Notifications per port, (second, reason) and their agent's lost-notification counter, for
    ``horizon_s`` seconds before the newest notification of the port."""

    def __init__(self, horizon_s: float = 120.0, max_entries: int = 1024):
        self.horizon_s = int(horizon_s)
        self.max_entries = int(max_entries)
        self._swept = -(2**62)  # newest second at the last sweep of ports gone quiet
        self.ports: dict[tuple[str, int], list[list]] = {}  # port -> [[second, reason code, count, drops, job]]
        self.notifications = 0  # applied in all
        self.unattributed = 0  # without a port (ifIndex 0 or a format-1/2 word): in metrics and archive only

    def add(self, arr: np.ndarray, jobs: np.ndarray | None = None) -> int:
        """Apply notifications (DISCARD_DTYPE rows; ``jobs``: the job of each dropped packet, from
        :func:`dropped_jobs`); returns how many were attributed to a port."""
        n = len(arr)
        if n == 0:
            return 0
        self.notifications += n
        ifx = port_if_index(arr)
        ok = (ifx > 0) & (ifx < 0x3FFFFFFF)  # a real ifIndex, not unknown, internal or a format word
        self.unattributed += int(n - ok.sum())
        if not ok.any():
            return 0
        a = arr[ok]
        key = np.empty(len(a), dtype=_GROUP_KEY)
        key["addr"] = np.ascontiguousarray(a["exporter_addr"], dtype=np.uint8).view("V16").ravel()
        key["ifx"] = ifx[ok]
        key["sec"] = a["time_received_ms"].astype(np.int64) // 1000
        key["reason"] = a["reason"].astype(np.int64)
        if jobs is None:
            names, key["job"] = np.array([""]), 0
        else:
            names, codes = np.unique(np.asarray(jobs, dtype=object)[ok].astype(str), return_inverse=True)
            key["job"] = codes.ravel()
        uniq, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        lost = np.zeros(len(uniq), dtype=np.int64)
        np.maximum.at(lost, inv.ravel(), a["drops"].astype(np.int64))
        texts: dict[bytes, str] = {}
        new: dict[tuple[str, int], list[list]] = {}
        for (addr, ifi, sec, reason, job), c, d in zip(uniq.tolist(), counts.tolist(), lost.tolist()):
            exp = texts.get(addr)
            if exp is None:
                exp = texts[addr] = addr_str(np.frombuffer(addr, np.uint8))
            new.setdefault((exp, int(ifi)), []).append([int(sec), int(reason), int(c), int(d), str(names[job])])
        for port, rows in new.items():
            self._insert(port, sorted(rows, key=_order))
        newest = int(key["sec"].max())
        if newest >= self._swept + self.horizon_s:  # ports with nothing within the horizon go (bounded state)
            self._swept = newest
            for port in [p for p, r in self.ports.items() if r[-1][0] < newest - self.horizon_s]:
                del self.ports[port]
        return len(a)

    def _insert(self, port: tuple[str, int], rows: list[list]) -> None:
        """Add a port's entries (sorted); keep its list sorted by (second, reason, job) with one entry each,
        within the horizon. Batches come in time order: only the entries of the newest second are re-merged."""
        have = self.ports.setdefault(port, [])
        cut = 0 if not have or rows[0][0] < have[-1][0] else bisect.bisect_left(have, rows[0][0], key=_sec)
        tail = have[cut:] + rows
        tail.sort(key=_order)
        merged: list[list] = []
        for r in tail:  # the same (second, reason, job) twice: one entry
            if merged and _order(merged[-1]) == _order(r):
                merged[-1][2] += r[2]
                merged[-1][3] = max(merged[-1][3], r[3])
            else:
                merged.append(r)
        have[cut:] = merged
        old = bisect.bisect_left(have, have[-1][0] - self.horizon_s, key=_sec)
        drop = max(old, len(have) - self.max_entries)
        if drop > 0:
            del have[:drop]

    def has(self, port: tuple[str, int]) -> bool:
        return port in self.ports

    def summary(self, port: tuple[str, int], lo_ms: int, hi_ms: int) -> DropSummary:
        """The port's notifications received in the seconds after ``lo_ms`` up to ``hi_ms`` (to the second:
        seconds ``lo_ms // 1000 < s <= hi_ms // 1000``): reasons most first, their groups, and ``lost``, the
        rise of the agent's lost-notification counter over the range (0 when it did not rise or there is no
        earlier value to compare with)."""
        lo, hi = int(lo_ms) // 1000, int(hi_ms) // 1000
        rows = self.ports.get(port, [])
        a, b = bisect.bisect_right(rows, lo, key=_sec), bisect.bisect_right(rows, hi, key=_sec)
        per: dict[int, int] = {}
        jobs: dict[str, int] = {}
        inside = -1
        for _sec_, reason, c, d, job in rows[a:b]:
            per[reason] = per.get(reason, 0) + c
            if job:
                jobs[job] = jobs.get(job, 0) + c
            inside = max(inside, d)
        # the agent's counter before the range: its value in the last second before it (it only rises)
        last = bisect.bisect_left(rows, rows[a - 1][0], key=_sec) if a else a
        before = max((r[3] for r in rows[last:a]), default=-1)
        reasons = sorted(((reason_name(r), c) for r, c in per.items()), key=lambda x: (-x[1], x[0]))
        merged: dict[str, int] = {}
        for name, c in reasons:  # codes the spec does not list all read as "other"
            merged[name] = merged.get(name, 0) + c
        items = sorted(((name, REASON_GROUP.get(name, "other"), c) for name, c in merged.items()),
                       key=lambda x: (-x[2], x[0]))
        groups: dict[str, int] = {}
        for _name, g, c in items:
            groups[g] = groups.get(g, 0) + c
        lost = inside - before if before >= 0 and inside > before else 0
        return DropSummary(total=sum(per.values()), lost=lost, reasons=items, groups=groups,
                           jobs=sorted(jobs.items(), key=lambda x: (-x[1], x[0])))

    def snapshot(self) -> dict:
        return {"ports": [[e, i, rows] for (e, i), rows in sorted(self.ports.items())],
                "notifications": self.notifications, "unattributed": self.unattributed}

    def restore(self, snap: dict | None) -> None:
        snap = snap or {}
        self.ports = {(str(e), int(i)): [[*(int(x) for x in r[:4]), str(r[4])] for r in rows]
                      for e, i, rows in snap.get("ports", ())}
        self.notifications = int(snap.get("notifications", 0))
        self.unattributed = int(snap.get("unattributed", 0))
